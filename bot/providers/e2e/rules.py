"""E2E Networks TIR training clusters: action field specs, input parsing and the action rules
(SPEC §1.2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

from bot.providers.base import (
    ChangeInputError,
    FieldSpec,
    parse_whole_number,
    unknown_field,
)
from bot.providers.e2e.models import (
    ACTIONS,
    RUNNING,
)
from bot.providers.errors import (
    RuleViolation,
)

# -- rules and input parsing ------------------------------------------------------------------

# A parsed action field: a whole number, or a list of them (an ``int_list`` field).
ActionValue: TypeAlias = int | list[int]

FIELD_SPECS: dict[str, FieldSpec] = {
    "additional_nodes": FieldSpec(
        name="additional_nodes",
        label="Nodes to add",
        kind="int",
        required=True,
        hint="How many nodes to ADD (1 or more), not the new total.",
    ),
    "ssh_key_ids": FieldSpec(
        name="ssh_key_ids",
        label="SSH key ids",
        kind="int_list",
        required=True,
        hint="Comma-separated SSH key ids, e.g. 11,12. Replaces the keys on every node.",
    ),
    "image_version_id": FieldSpec(
        name="image_version_id",
        label="Image version id",
        kind="int",
        required=True,
        hint="The image_version_id to run, e.g. 5.",
    ),
    "reserved_ip_id": FieldSpec(
        name="reserved_ip_id",
        label="Reserved IP id",
        kind="int",
        required=True,
        hint="The id of a reserved IP of this project, e.g. 501.",
    ),
    "security_group_id": FieldSpec(
        name="security_group_id",
        label="Security group id",
        kind="int",
        required=True,
        hint="The id of the security group to remove, e.g. 601.",
    ),
    "security_groups_ids": FieldSpec(
        name="security_groups_ids",
        label="Security group ids",
        kind="int_list",
        required=True,
        hint="Comma-separated security group ids to add, e.g. 602,603.",
    ),
}

# Fields an action's body always has with one value (not asked for, accepted as given).
FIXED_FIELDS: dict[str, dict[str, str]] = {"detach_ip": {"ip_type": "reserved"}}

ACTION_FIELDS: dict[str, tuple[str, ...]] = {
    "update_ssh_keys": ("ssh_key_ids",),
    "update_image": ("image_version_id",),
    "restart_workers": (),
    "restart_cluster": (),
    "scale_cluster": ("additional_nodes",),
    "attach_ip": ("reserved_ip_id",),
    "detach_ip": ("reserved_ip_id",),
    "remove_security_group": ("security_group_id",),
    "add_security_group": ("security_groups_ids",),
}


def require_running(status: str) -> None:
    """Actions run on a Running cluster only (the status compared as is_steady does: any case,
    surrounding blanks ignored)."""
    if status.strip().lower() != RUNNING.lower():
        raise RuleViolation(
            f"the cluster is {status}; E2E runs actions only on a {RUNNING} cluster. "
            "Wait until it is Running and try again."
        )


def parse_cluster_id(cluster_id: str | int) -> int:
    text = str(cluster_id).strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ChangeInputError(
        {"cluster_id": f"E2E cluster ids are positive whole numbers such as 101, not {text!r}"}
    )


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _parse_int_list(name: str, value: object) -> list[int]:
    if isinstance(value, str):
        parts: Sequence[object] = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        parts = value
    else:
        parts = [value]
    numbers = []
    for part in parts:
        try:
            numbers.append(parse_whole_number(part))
        except ValueError:
            raise ValueError(
                f"takes comma-separated whole numbers such as 11,12; {part!r} is not one"
            ) from None
    return numbers


def parse_action_fields(action: str, raw: Mapping[str, object]) -> dict[str, ActionValue]:
    """Typed values for the action's fields; ChangeInputError names every bad one."""
    if action not in ACTION_FIELDS:
        raise ChangeInputError(
            {"action": f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}"}
        )
    wanted = ACTION_FIELDS[action]
    errors: dict[str, str] = {}
    values: dict[str, ActionValue] = {}
    for name in wanted:
        value = raw.get(name)
        if _blank(value):
            errors[name] = f"required for {action} ({FIELD_SPECS[name].hint})"
            continue
        try:
            if FIELD_SPECS[name].kind == "int_list":
                values[name] = _parse_int_list(name, value)
            else:
                values[name] = parse_whole_number(value)
        except ValueError as exc:
            errors[name] = str(exc)
    fixed = FIXED_FIELDS.get(action, {})
    for name, value in raw.items():
        if name in fixed and value == fixed[name]:
            continue  # the body's own constant, as a stored request carries it
        if name != "action" and name not in wanted and not _blank(value):
            errors[name] = unknown_field(name, wanted, action)
    if errors:
        raise ChangeInputError(errors)
    return values


def check_field_rules(values: Mapping[str, ActionValue]) -> None:
    """Provider rules on parsed values: at least one node to add, non-empty id lists,
    positive ids."""
    for name, value in values.items():
        if isinstance(value, int) and name == "additional_nodes":
            if value < 1:
                raise RuleViolation(
                    f"additional_nodes is the number of nodes to ADD and must be at least 1 "
                    f"(got {value}); to shrink a cluster, use the E2E console.",
                    field=name,
                )
        elif isinstance(value, list):
            if not value:
                raise RuleViolation(f"{name} needs at least one id, e.g. 11,12", field=name)
            bad = [item for item in value if item < 1]
            if bad:
                raise RuleViolation(
                    f"{name}: ids are positive numbers; {bad[0]} is not", field=name
                )
        elif value < 1:
            raise RuleViolation(f"{name} must be a positive id, not {value}", field=name)
