"""Together AI Instant Clusters: parsing raw field values and the update rules (SPEC §1.1)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.providers.base import (
    ChangeInputError,
    ClusterState,
    example_time,
    parse_whole_number,
    unknown_field,
)
from bot.providers.errors import (
    RuleViolation,
)
from bot.providers.together.models import (
    GPU_COUNT_FIELDS,
    GPUS_PER_NODE,
    PREPAID_BILLING,
    UPDATE_FIELDS,
    BillingType,
    ClusterType,
    ClusterUpdate,
    TogetherCluster,
    rfc3339,
)
from bot.providers.together.summary import cluster_state


# -- rules (SPEC §1.1) ---------------------------------------------------------------------
@dataclass(frozen=True)
class _Target:
    """What the rules need to know about the cluster an update is aimed at."""

    name: str
    billing_type: str | None
    capacity_pool_id: str | None
    current: dict[str, Any]  # UPDATE_FIELDS → current value (datetime for the end time)

    @classmethod
    def of(cls, cluster: TogetherCluster | ClusterState) -> _Target:
        state = cluster if isinstance(cluster, ClusterState) else cluster_state(cluster, project="")
        current = {name: state.current.get(name) for name in UPDATE_FIELDS}
        end = current["reservation_end_time"]
        if isinstance(end, str):
            current["reservation_end_time"] = _aware(datetime.fromisoformat(end))
        return cls(
            name=state.summary.name,
            billing_type=state.summary.billing,
            capacity_pool_id=_text_or_none(state.summary.details.get("capacity_pool_id")),
            current=current,
        )


def _text_or_none(value: object) -> str | None:
    return str(value) if value else None


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _multiple_of_8(field: str, value: int) -> None:
    if value % GPUS_PER_NODE:
        lower = value // GPUS_PER_NODE * GPUS_PER_NODE
        raise RuleViolation(
            f"{field} must be a multiple of 8 (got {value}; try {lower} or {lower + 8})",
            field=field,
        )


def _same(current: object, new: object) -> bool:
    if isinstance(new, datetime) and isinstance(current, datetime):
        return _aware(current) == _aware(new)
    return bool(current == new)


def shown(value: object) -> str:
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def check_update(
    cluster: TogetherCluster | ClusterState, update: ClusterUpdate, now: datetime
) -> None:
    """Refuse, before any call, an update Together would refuse or that would do nothing.
    ``cluster`` is the cluster as fetched (or the ClusterState the adapter made of it)."""
    target = _Target.of(cluster)
    changes = update.set_fields()
    if not changes:
        raise RuleViolation(
            "nothing to change: set at least one of " + ", ".join(UPDATE_FIELDS), field=None
        )
    if all(_same(target.current[name], value) for name, value in changes.items()):
        already = ", ".join(f"{name} is already {shown(value)}" for name, value in changes.items())
        raise RuleViolation(f"nothing would change: {already}", field=next(iter(changes)))
    _check_counts(target, update)
    _check_billing(target, update, now)


def _check_counts(target: _Target, update: ClusterUpdate) -> None:
    if update.num_gpus is not None:
        _multiple_of_8("num_gpus", update.num_gpus)
    if update.num_preemptible_gpus is not None:
        _multiple_of_8("num_preemptible_gpus", update.num_preemptible_gpus)
    if update.num_capacity_pool_gpus is not None:
        _multiple_of_8("num_capacity_pool_gpus", update.num_capacity_pool_gpus)
        if not target.capacity_pool_id:
            raise RuleViolation(
                f"num_capacity_pool_gpus applies only to a cluster created from a capacity pool; "
                f"{target.name} has no capacity_pool_id (leave this field empty)",
                field="num_capacity_pool_gpus",
            )
    num_gpus = update.num_gpus if update.num_gpus is not None else target.current["num_gpus"]
    pool = update.num_capacity_pool_gpus
    if pool is not None and num_gpus is not None and pool > num_gpus:
        raise RuleViolation(
            f"num_capacity_pool_gpus cannot exceed num_gpus (got {pool}, num_gpus would be "
            f"{num_gpus}; set it to {num_gpus} or less, or raise num_gpus too)",
            field="num_capacity_pool_gpus",
        )
    current_pool = target.current["num_capacity_pool_gpus"] or 0
    if (
        pool is None
        and update.num_gpus is not None
        and target.capacity_pool_id
        and update.num_gpus < current_pool
    ):
        raise RuleViolation(
            f"num_gpus {update.num_gpus} would be below num_capacity_pool_gpus ({current_pool}); "
            f"keep num_gpus at {current_pool} or more, or lower num_capacity_pool_gpus too",
            field="num_gpus",
        )


def _check_billing(target: _Target, update: ClusterUpdate, now: datetime) -> None:
    billing = target.billing_type or "unknown"
    if update.num_reserved_gpus is not None and billing != BillingType.RESERVED:
        raise RuleViolation(
            f"num_reserved_gpus applies only to RESERVED clusters; {target.name} is billed "
            f"{billing} (leave this field empty, or change num_gpus instead)",
            field="num_reserved_gpus",
        )
    end = update.reservation_end_time
    if end is None:
        return
    if billing not in PREPAID_BILLING:
        raise RuleViolation(
            f"reservation_end_time applies only to prepaid clusters (RESERVED or "
            f"SCHEDULED_CAPACITY); {target.name} is billed {billing} (leave this field empty)",
            field="reservation_end_time",
        )
    if end <= _aware(now):
        raise RuleViolation(
            f"reservation_end_time must be in the future (got {rfc3339(end)}; it is now "
            f"{rfc3339(now.replace(microsecond=0))})",
            field="reservation_end_time",
        )


# -- change kinds --------------------------------------------------------------------------
def classify(cluster: TogetherCluster | ClusterState, update: ClusterUpdate) -> list[str]:
    """The kinds of change an update makes: scale_up, scale_down, change_type,
    extend_reservation, decommission."""
    target = _Target.of(cluster)
    kinds: list[str] = []
    rises = falls = False
    for name in GPU_COUNT_FIELDS:
        new = getattr(update, name)
        old = target.current[name]
        if new is None or old is None:
            continue
        rises = rises or new > old
        falls = falls or new < old
    if rises:
        kinds.append("scale_up")
    if falls:
        kinds.append("scale_down")
    if update.cluster_type is not None and update.cluster_type != target.current["cluster_type"]:
        kinds.append("change_type")
    end = update.reservation_end_time
    if end is not None:
        kinds.append(_end_kind(target.current["reservation_end_time"], end))
    return kinds


def _end_kind(current: datetime | None, new: datetime) -> str:
    """Moving the reservation's end later extends it; earlier (or to an end not known)
    brings the decommission closer."""
    if isinstance(current, datetime) and _aware(new) > _aware(current):
        return "extend_reservation"
    return "decommission"


# -- parsing raw field values (Slack strings or typed values) -------------------------------
def _parse_count(value: object) -> int:
    number = parse_whole_number(value)
    if number < 0:
        raise ValueError(f"must be 0 or more (got {number})")
    return number


def _parse_cluster_type(value: object) -> ClusterType:
    text = str(value.value if isinstance(value, enum.Enum) else value).strip().upper()
    try:
        return ClusterType(text)
    except ValueError:
        raise ValueError(f"must be KUBERNETES or SLURM (got {str(value).strip()!r})") from None


def _time_from_text(text: str) -> datetime:
    if text.isdigit():  # Slack's datetimepicker gives epoch seconds
        try:
            return datetime.fromtimestamp(int(text), UTC)
        except (OverflowError, ValueError, OSError):
            raise ValueError(f"is not a usable time (got {text!r})") from None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"must be an RFC 3339 time such as {example_time()} (got {text!r})"
        ) from None


def _parse_time(value: object) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, int) and not isinstance(value, bool):
        parsed = _time_from_text(str(value))
    elif isinstance(value, str):
        parsed = _time_from_text(value.strip())
    else:
        raise ValueError(f"must be an RFC 3339 time (got {value!r})")
    if parsed.tzinfo is None:
        raise ValueError(
            f"needs a time zone, e.g. {parsed.replace(microsecond=0).isoformat()}Z for UTC"
        )
    return parsed


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "cluster_type": _parse_cluster_type,
    "num_gpus": _parse_count,
    "num_reserved_gpus": _parse_count,
    "num_preemptible_gpus": _parse_count,
    "num_capacity_pool_gpus": _parse_count,
    "reservation_end_time": _parse_time,
}


def parse_update(raw: Mapping[str, object]) -> ClusterUpdate:
    """A ClusterUpdate from raw values; blank means not set. Every bad field is reported at
    once in a ChangeInputError."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, value in raw.items():
        if name not in _PARSERS:
            errors[name] = unknown_field(name, UPDATE_FIELDS, "update")
            continue
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        try:
            values[name] = _PARSERS[name](value)
        except ValueError as exc:
            errors[name] = str(exc)
    if errors:
        raise ChangeInputError(errors)
    return ClusterUpdate(**values)
