"""Whether a new policy file drops a section the policy in force has (SPEC §8 reload).

A file cut short (half written by an editor, a ConfigMap caught mid-update) can still be a
valid policy: a missing ``grants``, ``approvals``, ``freezes`` or ``limits`` reads as empty.
So a section the policy in force has may go only when the new file says so with the key
itself (``freezes: []``, ``limits: null``, ``rules: []``); a key merely absent is a loss."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from bot.core.policy.model import Policy

# The sections, by key, each with the sections inside it (checked when both files have it).
Sections = Mapping[str, "Sections"]
TOP_SECTIONS: Sections = {
    "grants": {},
    "approvals": {"rules": {}},
    "freezes": {},
    "oncall": {},  # SPEC §16
    "teams": {},  # SPEC §13: budgets and quotas live in them
    "digest": {},
}
PROJECT_SECTIONS: Sections = {
    "limits": {"max_gpus": {}, "max_nodes": {}, "max_hourly_increase": {}},
    "require_approval": {},
    "prices": {},
    "budget": {},
}


def lost_sections(in_force: Policy, new: Policy) -> list[str]:
    """The dotted keys the policy in force has and ``new`` drops without saying so (its
    file lacks the key); per project for the projects both have."""
    lost = _lost(in_force, new, TOP_SECTIONS, "")
    for name in sorted(in_force.projects.keys() & new.projects.keys()):
        old_project, new_project = in_force.projects[name], new.projects[name]
        lost += _lost(old_project, new_project, PROJECT_SECTIONS, f"projects.{name}.")
    return lost


def _lost(old: BaseModel, new: BaseModel, sections: Sections, prefix: str) -> list[str]:
    lost: list[str] = []
    for key, inner in sections.items():
        if key not in type(old).model_fields or not _has_content(old, key):
            continue  # not a key of this model (a provider's project), or nothing in it
        had = getattr(old, key)
        if key not in new.model_fields_set:
            lost.append(prefix + key)
            continue
        now = getattr(new, key)
        # ``approvals: {}`` says "all defaults"; a section with keys must keep its own.
        if inner and isinstance(had, BaseModel) and isinstance(now, BaseModel):
            if not now.model_fields_set:
                continue
            lost += _lost(had, now, inner, f"{prefix}{key}.")
    return lost


def _has_content(model: BaseModel, key: str) -> bool:
    """The field says something its default does not (an empty list, a model of defaults
    only, or None say nothing)."""
    value = getattr(model, key)
    default = type(model).model_fields[key].get_default(call_default_factory=True)
    return value != default and _meaningful(value)


def _meaningful(value: object) -> bool:
    if value is None or (isinstance(value, list | dict | tuple) and not value):
        return False
    if isinstance(value, BaseModel):
        return any(_has_content(value, key) for key in type(value).model_fields)
    return True


def where_lost(in_force: Policy, key: str) -> list[str]:
    """The projects of the policy in force that losing ``key`` (a dotted key of
    lost_sections) affects: a project's own section its project; a top-level section the
    projects its entries name ("*": all of them)."""
    every = sorted(in_force.projects)
    if key.startswith("projects."):
        return [key.split(".")[1]]
    if key == "grants":
        named = [p for g in in_force.grants for p in g.projects]
    elif key == "freezes":
        named = [p for f in in_force.freezes for p in f.projects]
    elif key == "teams":
        named = [p for t in in_force.teams.values() for p in t.projects]
    elif key == "approvals.rules":
        named = [p for r in in_force.approvals.rules for p in r.projects]
    elif key == "oncall":
        named = [p for r in in_force.approvals.rules if r.oncall for p in r.projects]
    else:
        return every
    return every if "*" in named else sorted(set(named) & set(every))
