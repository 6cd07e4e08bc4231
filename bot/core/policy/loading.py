"""Reading the policy file (SPEC §3): strict YAML, validated against the schema of the
catalog it is given, every problem named with the file and the key path."""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from bot.core.policy.guardrails import ApprovalRule, Freeze, Limits, Prices, WeeklyWindow
from bot.core.policy.model import (
    Approvals,
    Grant,
    Policy,
    PolicySchema,
    did_you_mean,
    either,
    policy_schema,
    unknown_kinds,
)
from bot.core.policy.oncall import OnCallApprover, OnCallConfig, OpsgenieSource, PagerDutySource
from bot.errors import GpuopsError
from bot.providers.catalog import Catalog


class PolicyError(GpuopsError):
    """The policy file cannot be used; each problem names the file and the key path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: a second ``together-prod:`` or ``role:``
    silently replacing the first would change who may do what."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Hashable, object]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_policy(path: Path, catalog: Catalog) -> Policy:
    """Read and validate the policy file against the schema of ``catalog``'s providers, or
    raise PolicyError saying what is wrong where."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError([f"{path}: policy file not found (GPUOPS_POLICY names it)"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError([f"{path}: cannot read the policy file ({type(exc).__name__})"]) from None
    return parse_policy(text, path, catalog)


def parse_policy(text: str, path: Path, catalog: Catalog) -> Policy:
    """Validate the policy file's text (read from ``path``, which problems name) against
    the schema of ``catalog``'s providers, or raise PolicyError saying what is wrong where."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise PolicyError([f"{path}: {_yaml_problem(exc)}"]) from None
    except yaml.YAMLError as exc:
        raise PolicyError([f"{path}: YAML error: {exc}"]) from None
    if data is None:
        raise PolicyError([f"{path}: the policy file is empty; it needs at least 'projects'"])
    schema = policy_schema(catalog)
    try:
        return schema.model.model_validate(data)
    except ValidationError as exc:
        problems = [line for error in exc.errors() for line in _describe_error(schema, error)]
        problems += [p for p in _cross_checks(catalog, data) if p not in problems]
        raise PolicyError([f"{path}: {problem}" for problem in problems]) from None


def _cross_checks(catalog: Catalog, data: object) -> list[str]:
    """The checks pydantic makes only once a model's own fields are valid (a grant's
    principal, watch's channel, the projects grants name), made on the raw file, so that
    one run reports every error of a file, not the next few."""
    if not isinstance(data, dict):
        return []
    projects = data.get("projects")
    projects = projects if isinstance(projects, dict) else {}
    problems = [
        f"projects.{name}: watch needs notify_channel (where to post)"
        for name, project in projects.items()
        if isinstance(project, dict) and project.get("watch") is not None
        if project.get("notify_channel") is None
    ]
    grants = data.get("grants")
    known = sorted(str(name) for name in projects)
    for i, grant in enumerate(grants if isinstance(grants, list) else []):
        if not isinstance(grant, dict):
            continue
        if not grant.get("users") and not grant.get("usergroups"):
            problems.append(f"grants[{i}]: a grant needs at least one user or usergroup")
        named = grant.get("projects")
        problems += [
            f"grants[{i}].projects: unknown project '{name}' (known: {', '.join(known)})"
            for name in (named if isinstance(named, list) else [])
            if isinstance(name, str) and name != "*" and name not in projects
        ]
    return problems + _raw_kinds(catalog, data)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = exc.problem or exc.context or "invalid YAML"
    return f"YAML error{where}: {problem}"


_UNION_TAGS = frozenset({"constrained-int", "int"})


def _describe_error(schema: PolicySchema, error: ErrorDetails) -> list[str]:
    """One pydantic error as ``dotted.key.path: message`` lines."""
    providers = list(schema.projects)
    loc: list[int | str] = list(error["loc"])
    tag: str | None = None
    if len(loc) >= 3 and loc[0] == "projects" and loc[2] in schema.projects:
        tag = str(loc.pop(2))  # the discriminator's branch, not a key in the file
    if loc and loc[-1] == "[key]":
        loc.pop()
    if any(str(part) in _UNION_TAGS or str(part).startswith("list[") for part in loc):
        # A rule's approvers are a count or a list of on-call entries: only the error of
        # the form that was written means anything.
        if str(loc[-1]) in _UNION_TAGS and isinstance(error.get("input"), list):
            return []  # a list was written: not the count's error
        if str(loc[-1]).startswith("list[") and error["type"] == "list_type":
            return []  # a count was written: not the list's error
        loc = [p for p in loc if str(p) not in _UNION_TAGS and not str(p).startswith("list[")]
    kind = error["type"]
    message = error["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(schema, loc[:-1], tag)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1) if loc else []
        hint = f"; did you mean '{close[0]}'?" if close else ""
        message = f"unknown key (allowed: {', '.join(allowed)}){hint}" if allowed else "unknown key"
    elif kind == "union_tag_not_found":
        loc.append("provider")
        message = f"missing; set {either([f'provider: {n}' for n in providers])}"
    elif kind == "union_tag_invalid":
        loc.append("provider")
        found = (error.get("ctx") or {}).get("tag", "")
        hint = did_you_mean(str(found), providers)
        message = f"unknown provider '{found}'{hint}; use {either(providers)}"
    elif kind == "model_type" and not loc:
        message = "the policy must be a mapping with projects, grants and approvals"
    path = _dotted(loc)
    if not path:
        return message.splitlines()
    return [f"{path}: {message}"]


def _allowed_keys(
    schema: PolicySchema, container: Sequence[int | str], tag: str | None
) -> list[str]:
    model: type[BaseModel] | None = None
    if not container:
        model = Policy
    elif container[0] == "projects" and len(container) == 2 and tag:
        model = schema.project_model(tag)
    elif container[0] == "grants" and len(container) == 2:
        model = Grant
    elif container[0] == "approvals" and len(container) == 1:
        model = Approvals
    elif container[:2] == ["approvals", "rules"] and len(container) == 3:
        model = ApprovalRule
    elif container[:2] == ["approvals", "rules"] and len(container) == 5:
        model = OnCallApprover
    elif container == ["oncall"]:
        model = OnCallConfig
    elif container[0] == "oncall" and len(container) == 2:
        model = PagerDutySource if container[1] == "pagerduty" else OpsgenieSource
    elif container[0] == "freezes" and len(container) == 2:
        model = Freeze
    elif container[0] == "freezes" and len(container) == 3 and container[2] == "weekly":
        model = WeeklyWindow
    elif container[0] == "projects" and len(container) == 3:
        sub: dict[str, type[BaseModel]] = {"limits": Limits, "prices": Prices}
        model = sub.get(str(container[2]))
    return [field.alias or name for name, field in model.model_fields.items()] if model else []


def _dotted(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _raw_kinds(catalog: Catalog, data: Mapping[object, object]) -> list[str]:
    """The unknown kinds of the raw file's rules and freezes (each checked however
    broken the rest of its entry is)."""
    approvals = data.get("approvals")
    rules = approvals.get("rules") if isinstance(approvals, dict) else None
    entries = [(f"approvals.rules[{i}]", r) for i, r in enumerate(_as_list(rules))]
    entries += [(f"freezes[{i}]", f) for i, f in enumerate(_as_list(data.get("freezes")))]
    return [
        problem
        for where, entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("kinds"), list)
        for problem in unknown_kinds(catalog.all_kinds, where, entry["kinds"])
    ]


def _as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else []
