"""The policy file (SPEC §3) and the authorization decisions made from it.

Deny by default: a user's role for a project in a channel is the highest role among the
grants that match the user (directly or through a Slack user group), the project (listed
or ``"*"``) and the channel (the grant has no ``channels`` or lists this one). A user with no
such grant learns nothing about the project, not even that it exists.
"""

from __future__ import annotations

import difflib
import enum
import functools
import logging
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, cast

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from bot.config import check_http_url
from bot.core.guardrails.config import ApprovalRule, Freeze, Limits, Prices, WeeklyWindow
from bot.core.watch.config import WatchConfig
from bot.errors import GpuopsError
from bot.providers import catalog
from bot.providers.base import ProviderDescriptor, ProviderSection

logger = logging.getLogger(__name__)

# --- change kinds, by provider (each provider's descriptor says its own) -------------------

KINDS_BY_PROVIDER: Mapping[str, frozenset[str]] = {
    d.name: frozenset(d.kinds) for d in catalog.descriptors()
}
_ALL_KINDS: frozenset[str] = frozenset().union(*KINDS_BY_PROVIDER.values())


class Role(enum.IntEnum):
    """Each role includes every power of the ones below it."""

    viewer = 1
    operator = 2
    approver = 3
    admin = 4

    def __str__(self) -> str:
        return self.name


# --- field types ------------------------------------------------------------------------

_PROJECT_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _project_key(value: str) -> str:
    if not _PROJECT_KEY.fullmatch(value):
        raise PydanticCustomError(
            "project_key", "project keys may use only letters, digits, - and _"
        )
    return value


_SLACK_ID_SHAPES: Mapping[str, tuple[str, str]] = {
    # kind: (the id's first letters, how Slack shows that kind)
    "user": ("UW", "U… or W…"),
    "usergroup": ("S", "S…"),
    "channel": ("CG", "C… or G…"),
}


def _slack_id(kind: str) -> AfterValidator:
    """A Slack id of one kind: its letter, then capitals and digits (U04DAVE, S0OPS,
    C0INCIDENT), never a name, a #channel or an @mention."""
    letters, shown = _SLACK_ID_SHAPES[kind]
    shape = re.compile(f"[{letters}][A-Z0-9]+")

    def check(value: str) -> str:
        if not shape.fullmatch(value):
            raise PydanticCustomError(
                "slack_id",
                "use the Slack {kind} id ({shown}), not a name or mention: '{value}'",
                {"kind": kind, "shown": shown, "value": value},
            )
        return value

    return AfterValidator(check)


def _http_url(value: str) -> str:
    try:
        return check_http_url(value)
    except ValueError as exc:
        raise PydanticCustomError("url", str(exc)) from None


def _parse_role(value: object) -> Role:
    if isinstance(value, Role):
        return value
    if isinstance(value, str) and value.strip().lower() in Role.__members__:
        return Role[value.strip().lower()]
    raise PydanticCustomError(
        "role",
        "unknown role '{role}'{hint}; use viewer, operator, approver or admin",
        {"role": str(value), "hint": did_you_mean(str(value).strip().lower(), Role.__members__)},
    )


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """`` (did you mean 'approver'?)`` for the option closest to a typo, or ``""``."""
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


ProjectKey = Annotated[str, AfterValidator(_project_key)]
UserId = Annotated[str, _slack_id("user")]
UsergroupId = Annotated[str, _slack_id("usergroup")]
ChannelId = Annotated[str, _slack_id("channel")]
HttpUrl = Annotated[str, AfterValidator(_http_url)]
RoleName = Annotated[Role, PlainValidator(_parse_role), PlainSerializer(str, return_type=str)]


# --- models -----------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ProjectCommon(_Strict):
    base_url: HttpUrl | None = None
    clusters: list[str] = Field(default_factory=lambda: ["*"])
    notify_channel: ChannelId | None = None
    watch: WatchConfig | None = None  # SPEC §7; omitted = not watched
    limits: Limits | None = None  # SPEC §8

    @model_validator(mode="after")
    def _watch_needs_notify_channel(self) -> Self:
        if self.watch is not None and self.notify_channel is None:
            raise PydanticCustomError(
                "watch_without_channel", "watch needs notify_channel (where to post)"
            )
        return self


def _either(words: Sequence[str]) -> str:
    """``a or b``, ``a, b or c``."""
    return " or ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} or {words[-1]}"


def _limit_refusal(provider: str, limits: Limits) -> str | None:
    """Why a limit of the other size unit does not apply to this provider's projects."""
    applies = catalog.descriptor(provider).size_limit
    other = "max_nodes" if applies == "max_gpus" else "max_gpus"
    if getattr(limits, other) is None:
        return None
    owners = [d.title for d in catalog.descriptors() if d.size_limit == other]
    return f"limits.{other} applies to {_either(owners) or 'no'} projects; use {applies}"


class ProjectCommon(_Strict):
    """The keys every project has, whichever its provider; a provider's own keys (its
    section, from its descriptor) are added to make that provider's project model."""

    base_url: HttpUrl | None = None
    clusters: list[str] = Field(default_factory=lambda: ["*"])
    notify_channel: ChannelId | None = None
    watch: WatchConfig | None = None  # SPEC §7; omitted = not watched
    limits: Limits | None = None  # SPEC §8
    if TYPE_CHECKING:
        provider: str  # the section's (each provider model has it)

    @model_validator(mode="after")
    def _watch_needs_notify_channel(self) -> Self:
        if self.watch is not None and self.notify_channel is None:
            raise PydanticCustomError(
                "watch_without_channel", "watch needs notify_channel (where to post)"
            )
        return self

    @model_validator(mode="after")
    def _limit_of_its_unit(self) -> Self:
        refusal = (
            None if self.limits is None else _limit_refusal(self.section.provider, self.limits)
        )
        if refusal is not None:
            raise PydanticCustomError("limit_provider", refusal)
        return self

    @property
    def section(self) -> ProviderSection:
        """The project's provider section (a project model is both)."""
        if not isinstance(self, ProviderSection):
            raise TypeError(f"{type(self).__name__} is not a provider's project model")
        return self

    @property
    def approval_override(self) -> list[str] | None:
        """The policy's ``require_approval`` of this project, if it says one."""
        value = getattr(self, "require_approval", None)
        return None if value is None else list(value)

    @property
    def price_table(self) -> Prices | None:
        """The policy's price table, for a provider without a price API (SPEC §8)."""
        value = self.__dict__.get("prices")
        return value if isinstance(value, Prices) else None


def _project_model(descriptor: ProviderDescriptor) -> type[ProjectCommon]:
    """The policy model of one provider's projects: its section and the common keys, with
    ``require_approval`` of its own kinds and, when it has no price API, ``prices``."""
    kind: Any = Literal.__getitem__(descriptor.kinds)  # the kinds are known only at run time
    fields: dict[str, Any] = {"require_approval": (list[kind] | None, None)}
    if descriptor.price_table:
        fields["prices"] = (Prices | None, None)  # SPEC §8: a dated table per GPU-hour
    name = "".join(c for c in descriptor.title if c.isalnum()) + "Project"
    bases: tuple[type[Any], ...] = (descriptor.section, ProjectCommon)
    model = create_model(name, __base__=bases, __module__=__name__, **fields)
    return cast(type[ProjectCommon], model)  # ProjectCommon is one of its bases


_PROJECT_MODELS: Mapping[str, type[ProjectCommon]] = {
    d.name: _project_model(d) for d in catalog.descriptors()
}
if TYPE_CHECKING:
    ProjectConfig = ProjectCommon
else:  # one model per provider, told apart by ``provider``
    ProjectConfig = Annotated[
        functools.reduce(operator.or_, _PROJECT_MODELS.values()), Field(discriminator="provider")
    ]


def project_model(provider: str) -> type[ProjectCommon]:
    """The policy model of that provider's projects."""
    return _PROJECT_MODELS[provider]


class Grant(_Strict):
    users: list[UserId] = Field(default_factory=list)
    usergroups: list[UsergroupId] = Field(default_factory=list)
    channels: list[ChannelId] | None = None
    projects: list[str] = Field(min_length=1)
    role: RoleName

    @model_validator(mode="after")
    def _has_principal(self) -> Grant:
        if not self.users and not self.usergroups:
            raise PydanticCustomError(
                "no_principal", "a grant needs at least one user or usergroup"
            )
        return self

    def covers(self, project: str) -> bool:
        return "*" in self.projects or project in self.projects

    def holds_in(self, channel: str | None) -> bool:
        return self.channels is None or (channel is not None and channel in self.channels)


class Approvals(_Strict):
    expire_after_minutes: int = Field(default=30, ge=1)
    break_glass: bool = False
    rules: list[ApprovalRule] = Field(default_factory=list)  # SPEC §8
    revert_window_hours: float = Field(default=24, gt=0)  # a result offers its revert so long


def _unknown_kinds(where: str, kinds: Iterable[object]) -> list[str]:
    return [
        f"{where}.kinds: unknown change kind '{kind}'{did_you_mean(kind, _ALL_KINDS)} "
        f"(kinds: {', '.join(sorted(_ALL_KINDS))})"
        for kind in kinds
        if isinstance(kind, str) and kind != "*" and kind not in _ALL_KINDS
    ]


def _raw_kinds(data: dict[Any, Any]) -> list[str]:
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
        for problem in _unknown_kinds(where, entry["kinds"])
    ]


def _as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


class Policy(_Strict):
    projects: dict[ProjectKey, ProjectConfig] = Field(min_length=1)
    grants: list[Grant] = Field(default_factory=list)
    approvals: Approvals = Field(default_factory=Approvals)
    freezes: list[Freeze] = Field(default_factory=list)  # SPEC §8

    @model_validator(mode="after")
    def _grants_name_known_projects(self) -> Policy:
        known = ", ".join(sorted(self.projects))
        named = [(f"grants[{i}]", g.projects) for i, g in enumerate(self.grants)]
        named += [(f"approvals.rules[{i}]", r.projects) for i, r in enumerate(self.approvals.rules)]
        named += [(f"freezes[{i}]", f.projects) for i, f in enumerate(self.freezes)]
        problems = [
            f"{where}.projects: unknown project '{name}' (known: {known})"
            for where, projects in named
            for name in projects
            if name != "*" and name not in self.projects
        ]
        for i, rule in enumerate(self.approvals.rules):
            problems += _unknown_kinds(f"approvals.rules[{i}]", rule.kinds)
        for i, freeze in enumerate(self.freezes):
            problems += _unknown_kinds(f"freezes[{i}]", freeze.kinds)
        if problems:
            # A model-level error has no location of its own: the paths are in the text.
            raise PydanticCustomError(
                "unknown_project", "{problems}", {"problems": "\n".join(problems)}
            )
        return self

    def project(self, name: str) -> ProjectCommon:
        try:
            return self.projects[name]
        except KeyError:
            raise KeyError(f"no project '{name}' in the policy") from None

    def approval_kinds(self, project: str) -> frozenset[str]:
        """The change kinds that need a second person's approval on this project."""
        config = self.project(project)
        override = config.approval_override
        if override is not None:
            return frozenset(override)
        return catalog.descriptor(config.provider).approval_by_default

    def requires_approval(self, project: str, kinds: Iterable[str]) -> bool:
        config = self.project(project)
        wanted = set(kinds)
        unknown = wanted - KINDS_BY_PROVIDER[config.provider]
        if unknown:
            raise ValueError(
                f"unknown change kind(s) for {config.provider}: {', '.join(sorted(unknown))}"
            )
        return bool(wanted & self.approval_kinds(project))


# --- loading ----------------------------------------------------------------------------


class PolicyError(GpuopsError):
    """The policy file cannot be used; each problem names the file and the key path."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: a second ``together-prod:`` or ``role:``
    silently replacing the first would change who may do what."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
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


def load_policy(path: Path) -> Policy:
    """Read and validate the policy file, or raise PolicyError saying what is wrong where."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError([f"{path}: policy file not found (GPUOPS_POLICY names it)"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError([f"{path}: cannot read the policy file ({type(exc).__name__})"]) from None
    return parse_policy(text, path)


def parse_policy(text: str, path: Path) -> Policy:
    """Validate the policy file's text (read from ``path``, which problems name), or raise
    PolicyError saying what is wrong where."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise PolicyError([f"{path}: {_yaml_problem(exc)}"]) from None
    except yaml.YAMLError as exc:
        raise PolicyError([f"{path}: YAML error: {exc}"]) from None
    if data is None:
        raise PolicyError([f"{path}: the policy file is empty; it needs at least 'projects'"])
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        problems = [line for error in exc.errors() for line in _describe_error(error)]
        problems += [p for p in _cross_checks(data) if p not in problems]
        raise PolicyError([f"{path}: {problem}" for problem in problems]) from None


def _cross_checks(data: object) -> list[str]:
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
    return problems + _raw_kinds(data)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = exc.problem or exc.context or "invalid YAML"
    return f"YAML error{where}: {problem}"


def _describe_error(error: ErrorDetails) -> list[str]:
    """One pydantic error as ``dotted.key.path: message`` lines."""
    loc: list[int | str] = list(error["loc"])
    tag: str | None = None
    if len(loc) >= 3 and loc[0] == "projects" and loc[2] in _PROJECT_MODELS:
        tag = str(loc.pop(2))  # the discriminator's branch, not a key in the file
    if loc and loc[-1] == "[key]":
        loc.pop()
    kind = error["type"]
    message = error["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], tag)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1) if loc else []
        hint = f"; did you mean '{close[0]}'?" if close else ""
        message = f"unknown key (allowed: {', '.join(allowed)}){hint}" if allowed else "unknown key"
    elif kind == "union_tag_not_found":
        loc.append("provider")
        message = f"missing; set {_either([f'provider: {n}' for n in _PROJECT_MODELS])}"
    elif kind == "union_tag_invalid":
        loc.append("provider")
        found = (error.get("ctx") or {}).get("tag", "")
        hint = did_you_mean(str(found), _PROJECT_MODELS)
        message = f"unknown provider '{found}'{hint}; use {_either(list(_PROJECT_MODELS))}"
    elif kind == "model_type" and not loc:
        message = "the policy must be a mapping with projects, grants and approvals"
    path = _dotted(loc)
    if not path:
        return message.splitlines()
    return [f"{path}: {message}"]


def _allowed_keys(container: Sequence[int | str], tag: str | None) -> list[str]:
    model: type[BaseModel] | None = None
    if not container:
        model = Policy
    elif container[0] == "projects" and len(container) == 2 and tag:
        model = _PROJECT_MODELS[tag]
    elif container[0] == "grants" and len(container) == 2:
        model = Grant
    elif container[0] == "approvals" and len(container) == 1:
        model = Approvals
    elif container[:2] == ["approvals", "rules"] and len(container) == 3:
        model = ApprovalRule
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


# --- rules no one can satisfy ------------------------------------------------------------


def unmeetable_rules(policy: Policy) -> list[str]:
    """Warnings for the approval rules that need more approvers on a project than its
    grants name people who may approve (known offline only when the rule names no user
    group and no approver grant of the project is a group's)."""
    warnings = []
    for i, rule in enumerate(policy.approvals.rules):
        if rule.usergroups:
            continue
        names = sorted(policy.projects) if "*" in rule.projects else rule.projects
        for project in (name for name in names if name in policy.projects):
            eligible = _named_approvers(policy, project)
            if eligible is not None and len(eligible) < rule.approvers:
                who = ", ".join(sorted(eligible)) or "nobody"
                warnings.append(
                    f"approvals.rules[{i}] needs {rule.approvers} approvers on {project} "
                    f"but the grants let only {len(eligible)} approve ({who}): "
                    "no request it matches can ever be approved"
                )
    return warnings


def _named_approvers(policy: Policy, project: str) -> frozenset[str] | None:
    """The users the grants let approve on ``project``; None when a group grants it too
    (its members are not in the file)."""
    grants = [g for g in policy.grants if g.covers(project) and g.role >= Role.approver]
    if any(grant.usergroups for grant in grants):
        return None
    return frozenset(user for grant in grants for user in grant.users)


# --- describing grants ------------------------------------------------------------------


@dataclass(frozen=True)
class GrantRow:
    principal: str  # "user U01ALICE" or "group S0PLATFORM"
    project: str
    role: Role
    channels: tuple[str, ...] | None  # None: any channel


def describe_grants(policy: Policy) -> list[GrantRow]:
    """Every (principal, project) a grant gives, with ``"*"`` expanded to each project,
    sorted by principal then project."""
    rows = []
    for grant in policy.grants:
        principals = [f"user {u}" for u in grant.users] + [f"group {g}" for g in grant.usergroups]
        projects = sorted(p for p in policy.projects if grant.covers(p))
        channels = tuple(grant.channels) if grant.channels is not None else None
        rows += [
            GrantRow(principal, project, grant.role, channels)
            for principal in principals
            for project in projects
        ]
    return sorted(rows, key=lambda r: (r.principal, r.project, -r.role))
