"""A staged plan (SPEC §14): the steps from a cluster's size now to the target, ``step`` at a
time (up or down), each with what it sends and its price per hour, and how long each step is
soaked and may take to be steady. Pure functions of the ask, the cluster and the prices."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal

from pydantic import BaseModel, ConfigDict

from bot.core.policy.staged import read_duration
from bot.errors import GpuopsError
from bot.providers.pricing import money
from bot.providers.stepping import Stepping

MAX_STEPS = 64
_CENT = Decimal("0.01")


class StagingError(GpuopsError, ValueError):
    """A staged change that cannot be planned; the message says what would."""


def parse_duration(text: str, what: str) -> timedelta:
    """``30s``, ``10m``, ``1h`` as a duration from 1 s up to 24 h (StagingError otherwise)."""
    value = read_duration(text)
    if value is None:
        raise StagingError(
            f"`{what}={text.strip()[:40]}` is not a duration from 1s to 24h; write seconds, "
            f"minutes or hours, e.g. `{what}=30s`, `{what}=10m` or `{what}=1h`."
        )
    return value


def duration_text(value: timedelta) -> str:
    """``45 s``, ``10 min``, ``1 h 30 min``."""
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes else []
    parts += [f"{secs} s"] if secs else []
    return " ".join(parts)


class Staging(BaseModel):
    """What a person asked with ``step=`` and ``soak=`` (None: the policy's default)."""

    model_config = ConfigDict(frozen=True)

    step: int
    soak: timedelta | None = None


def parse_step(text: str) -> int:
    value = text.strip()
    if not value.isdigit() or not 1 <= int(value) <= 1_000_000:
        raise StagingError(f"`step={value[:40]}` is not a step: give a whole number, e.g. step=32.")
    return int(value)


def staging_of(step: str | None, soak: str | None) -> Staging | None:
    """``step=`` with its ``soak=`` as given (SPEC §14); ``soak=`` alone is refused."""
    if step is None:
        if soak is not None:
            raise StagingError(
                "`soak=` goes with `step=`: give the step too, e.g. `step=32 soak=10m`."
            )
        return None
    return Staging(
        step=parse_step(step), soak=None if soak is None else parse_duration(soak, "soak")
    )


class PlanStep(BaseModel):
    """One step: the size before and after it, what it sends (the plan's inputs), and what
    an hour costs more (or less) after it than at the start, where known."""

    model_config = ConfigDict(frozen=True)

    index: int  # 1, 2, …
    before: int
    after: int
    inputs: dict[str, object]
    hourly: Decimal | None = None  # after this step, against the start (signed)
    step_hourly: Decimal | None = None  # this step alone (signed)


class StagedPlan(BaseModel):
    """The whole plan: every step in order, and its timing bounds."""

    model_config = ConfigDict(frozen=True)

    action: str
    field: str
    unit: str
    start: int
    target: int
    step: int
    soak: timedelta
    steady_within: timedelta
    steps: tuple[PlanStep, ...]
    currency: str | None = None

    @property
    def sizes(self) -> list[int]:
        return [self.start, *(s.after for s in self.steps)]

    def sizes_text(self) -> str:
        """``64 → 96 → 128 GPUs``."""
        return " → ".join(str(size) for size in self.sizes) + f" {self.unit}"

    def headline(self) -> str:
        """``num_gpus 64 → 96 → … → 256 GPUs in 6 steps of 32, each soaked 10 min``."""
        n = len(self.steps)
        return (
            f"{self.field} {self.sizes_text()} in {n} steps of {self.step}, each held "
            f"steady for {duration_text(self.soak)} (steady within "
            f"{duration_text(self.steady_within)})"
        )

    def step_lines(self) -> list[str]:
        """One line per step: its sizes and its price per hour."""
        return [self.step_line(step) for step in self.steps]

    def step_line(self, step: PlanStep) -> str:
        line = f"Step {step.index}/{len(self.steps)}: {step.before} → {step.after} {self.unit}"
        if step.step_hourly is not None and step.hourly is not None and self.currency:
            line += (
                f", ≈ {_signed(step.step_hourly, self.currency)}/h "
                f"({_signed(step.hourly, self.currency)}/h in all)"
            )
        else:
            line += ", price per hour not known"
        return line

    def to_json(self) -> dict[str, object]:
        return self.model_dump(mode="json")

    @classmethod
    def of_json(cls, raw: Mapping[str, object]) -> StagedPlan:
        return cls.model_validate(dict(raw))


def _signed(amount: Decimal, currency: str) -> str:
    sign = "-" if amount < 0 else "+"
    return f"{sign}{money(abs(amount), currency)}"


def staged_field(stepping: Stepping, action: str, inputs: Mapping[str, object]) -> str:
    """The one count field a staged change sets (StagingError when it sets none or more)."""
    if action != stepping.action:
        raise StagingError(f"`step=` applies to {stepping.action} only, not {action}.")
    given = [name for name in inputs if inputs[name] not in (None, "")]
    counted = [name for name in given if name in stepping.fields]
    if len(counted) != 1 or len(given) != 1:
        raise StagingError(
            "`step=` sends one count field in steps: give exactly one of "
            + ", ".join(f"`{name}=`" for name in stepping.fields)
            + " and no other field."
        )
    return counted[0]


def sizes_between(start: int, target: int, step: int) -> list[int]:
    """The sizes after each step from ``start`` to ``target`` (the last step may be shorter)."""
    if step <= 0:
        raise StagingError("`step=` must be 1 or more.")
    direction = 1 if target > start else -1
    sizes: list[int] = []
    size = start
    while size != target:
        size = size + direction * min(step, abs(target - size))
        sizes.append(size)
    return sizes


def build_plan(
    stepping: Stepping,
    action: str,
    inputs: Mapping[str, object],
    *,
    start: int,
    staging: Staging,
    soak: timedelta,
    steady_within: timedelta,
    hourly_total: Decimal | None = None,
    currency: str | None = None,
) -> StagedPlan:
    """The plan of a staged change from ``start`` (the size now, in ``stepping.unit``):
    each step's inputs and price. ``hourly_total`` is what the whole change costs an hour
    (signed), shared out in proportion to each step's size (a price per GPU or per node)."""
    field = staged_field(stepping, action, inputs)
    try:
        value = int(str(inputs[field]).strip())
    except ValueError:
        raise StagingError(f"{field} must be a whole number (got {inputs[field]!r}).") from None
    target = start + value if stepping.additive else value
    if stepping.additive and value <= 0:
        raise StagingError(f"{field} must be 1 or more for a staged change.")
    step = staging.step
    if step % stepping.multiple:
        raise StagingError(
            f"`step=` must be a multiple of {stepping.multiple} {stepping.unit} (got {step})."
        )
    total = abs(target - start)
    if total == 0:
        raise StagingError(f"nothing to stage: {field} is already {target}.")
    if step >= total:
        raise StagingError(
            f"`step={step}` covers the whole change ({start} → {target} {stepping.unit}); "
            "send it without `step=`, or give a smaller step."
        )
    sizes = sizes_between(start, target, step)
    if len(sizes) > MAX_STEPS:
        raise StagingError(
            f"`step={step}` makes {len(sizes)} steps; a plan has at most {MAX_STEPS}. "
            "Give a larger step."
        )
    steps: list[PlanStep] = []
    before = start
    for index, after in enumerate(sizes, start=1):
        sent = after - before if stepping.additive else after
        steps.append(
            PlanStep(
                index=index,
                before=before,
                after=after,
                inputs={field: sent},
                hourly=_share(hourly_total, after - start, target - start),
                step_hourly=_share(hourly_total, after - before, target - start),
            )
        )
        before = after
    return StagedPlan(
        action=action,
        field=field,
        unit=stepping.unit,
        start=start,
        target=target,
        step=step,
        soak=soak,
        steady_within=steady_within,
        steps=tuple(steps),
        currency=currency if hourly_total is not None else None,
    )


def _share(total: Decimal | None, part: int, whole: int) -> Decimal | None:
    if total is None or whole == 0:
        return None
    return (total * part / whole).quantize(_CENT)
