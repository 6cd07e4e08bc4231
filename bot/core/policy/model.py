"""The policy's schema (SPEC §3), built from the provider catalog it is given, and the
authorization decisions made from a validated policy.

Deny by default: a user's role for a project in a channel is the highest role among the
grants that match the user (directly or through a Slack user group), the project (listed
or ``"*"``) and the channel (the grant has no ``channels`` or lists this one). A user with no
such grant learns nothing about the project, not even that it exists.
"""

from __future__ import annotations

import difflib
import enum
import functools
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    create_model,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bot.config import check_http_url
from bot.core.policy.guardrails import ApprovalRule, Freeze, Limits, Prices
from bot.core.policy.oncall import OnCallConfig
from bot.core.policy.spend import Budget, Digest, ExchangeRates, Team, team_problems
from bot.core.policy.staged import StagedDefaults
from bot.core.policy.watch import WatchConfig
from bot.providers.catalog import Catalog, CatalogError
from bot.providers.descriptor import ProviderDescriptor, ProviderSection


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


def either(words: Sequence[str]) -> str:
    """``a or b``, ``a, b or c``."""
    return " or ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} or {words[-1]}"


# The keys of ``limits`` that cap a cluster's size; a descriptor's ``size_limit`` names one.
_SIZE_LIMITS = ("max_gpus", "max_nodes")


def _limit_refusal(catalog: Catalog, provider: str, limits: Limits) -> str | None:
    """Why a limit of another size unit than this provider's does not apply to its
    projects (each descriptor names the one of ``limits`` that applies to it)."""
    applies = catalog.descriptor(provider).size_limit
    for other in _SIZE_LIMITS:
        if other == applies or getattr(limits, other) is None:
            continue
        owners = [d.title for d in catalog if d.size_limit == other]
        return f"limits.{other} applies to {either(owners) or 'no'} projects; use {applies}"
    return None


class ProjectCommon(_Strict):
    """The keys every project has, whichever its provider; a provider's own keys (its
    section, from its descriptor) are added to make that provider's project model."""

    base_url: HttpUrl | None = None
    clusters: list[str] = Field(default_factory=lambda: ["*"])
    notify_channel: ChannelId | None = None
    watch: WatchConfig | None = None  # SPEC §7; omitted = not watched
    limits: Limits | None = None  # SPEC §8
    budget: Budget | None = None  # SPEC §13
    # Set on each provider's project model (``PolicySchema``): its provider and catalog.
    descriptor: ClassVar[ProviderDescriptor]
    catalog: ClassVar[Catalog]
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
        limits = self.limits
        refusal = None if limits is None else _limit_refusal(self.catalog, self.provider, limits)
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


def _project_model(catalog: Catalog, descriptor: ProviderDescriptor) -> type[ProjectCommon]:
    """The policy model of one provider's projects: its section and the common keys, with
    ``require_approval`` of its own kinds and, when it has no price API, ``prices``."""
    if descriptor.size_limit not in _SIZE_LIMITS:
        raise CatalogError(
            f"provider {descriptor.name}: size_limit '{descriptor.size_limit}' is not a key "
            f"of limits (one of: {', '.join(_SIZE_LIMITS)})"
        )
    kind: Any = Literal.__getitem__(descriptor.kinds)  # the kinds are known only at run time
    fields: dict[str, Any] = {"require_approval": (list[kind] | None, None)}
    if descriptor.price_table:
        fields["prices"] = (Prices | None, None)  # SPEC §8: a dated table per GPU-hour
    name = "".join(c for c in descriptor.title if c.isalnum()) + "Project"
    bases: tuple[type[Any], ...] = (descriptor.section, ProjectCommon)
    model = cast(  # ProjectCommon is one of its bases
        type[ProjectCommon], create_model(name, __base__=bases, __module__=__name__, **fields)
    )
    model.descriptor = descriptor
    model.catalog = catalog
    return model


ProjectConfig = ProjectCommon  # a project of the policy, whichever its provider


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


def unknown_kinds(known: frozenset[str], where: str, kinds: Iterable[object]) -> list[str]:
    """A problem line for each of ``kinds`` no provider's plans carry (``*`` is any)."""
    return [
        f"{where}.kinds: unknown change kind '{kind}'{did_you_mean(kind, known)} "
        f"(kinds: {', '.join(sorted(known))})"
        for kind in kinds
        if isinstance(kind, str) and kind != "*" and kind not in known
    ]


class Policy(_Strict):
    """A validated policy; its class is its catalog's (``PolicySchema.model``), whose
    ``projects`` are told apart by ``provider``."""

    catalog: ClassVar[Catalog]  # the providers its schema was built from
    projects: dict[ProjectKey, ProjectCommon] = Field(min_length=1)
    grants: list[Grant] = Field(default_factory=list)
    approvals: Approvals = Field(default_factory=Approvals)
    freezes: list[Freeze] = Field(default_factory=list)  # SPEC §8
    oncall: OnCallConfig | None = None  # SPEC §16

    @model_validator(mode="after")
    def _rules_name_known_schedules(self) -> Policy:
        known = self.oncall.names if self.oncall is not None else []
        problems = [
            f"approvals.rules[{i}].approvers[{j}].oncall: unknown schedule '{slot.oncall}'"
            + (did_you_mean(slot.oncall, known) if known else "")
            + (f" (oncall schedules: {', '.join(known)})" if known else " (no oncall section)")
            for i, rule in enumerate(self.approvals.rules)
            for j, slot in enumerate(rule.oncall)
            if slot.oncall not in known
        ]
        if problems:
            raise PydanticCustomError(
                "unknown_schedule", "{problems}", {"problems": "\n".join(problems)}
            )
        return self

    staged: StagedDefaults = Field(default_factory=StagedDefaults)  # SPEC §14
    teams: dict[ProjectKey, Team] = Field(default_factory=dict)  # SPEC §13
    digest: Digest | None = None
    exchange_rates: ExchangeRates = Field(default_factory=dict)  # USD per unit of each

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
        kinds = self.catalog.all_kinds
        for i, rule in enumerate(self.approvals.rules):
            problems += unknown_kinds(kinds, f"approvals.rules[{i}]", rule.kinds)
        for i, freeze in enumerate(self.freezes):
            problems += unknown_kinds(kinds, f"freezes[{i}]", freeze.kinds)
        problems += team_problems(self.teams, self.projects)
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

    def provider_title(self, project: str | None) -> str:
        """How people name the project's provider (its descriptor's title); "the
        provider" for a project no longer in the policy."""
        config = self.projects.get(project or "")
        return config.descriptor.title if config is not None else "the provider"

    def approval_kinds(self, project: str) -> frozenset[str]:
        """The change kinds that need a second person's approval on this project."""
        config = self.project(project)
        override = config.approval_override
        if override is not None:
            return frozenset(override)
        return self.catalog.descriptor(config.provider).approval_by_default

    def requires_approval(self, project: str, kinds: Iterable[str]) -> bool:
        config = self.project(project)
        wanted = set(kinds)
        unknown = wanted - self.catalog.kinds(config.provider)
        if unknown:
            raise ValueError(
                f"unknown change kind(s) for {config.provider}: {', '.join(sorted(unknown))}"
            )
        return bool(wanted & self.approval_kinds(project))


@dataclass(frozen=True, eq=False)
class PolicySchema:
    """The policy's models for one catalog: a project model per provider (told apart by
    ``provider``) and the policy model holding them."""

    catalog: Catalog
    model: type[Policy]
    projects: Mapping[str, type[ProjectCommon]]

    def project_model(self, provider: str) -> type[ProjectCommon]:
        """The policy model of that provider's projects."""
        return self.projects[provider]


@functools.cache  # one schema per catalog (a catalog is compared by identity)
def policy_schema(catalog: Catalog) -> PolicySchema:
    """The policy's schema for the providers of ``catalog`` (CatalogError when a
    descriptor names a size limit the policy does not have)."""
    projects = {d.name: _project_model(catalog, d) for d in catalog}
    union: Any = functools.reduce(operator.or_, projects.values())
    config: Any = Annotated[union, Field(discriminator="provider")]
    model = cast(
        type[Policy],
        create_model(
            "Policy",
            __base__=Policy,
            __module__=__name__,
            projects=(dict[ProjectKey, config], Field(min_length=1)),
        ),
    )
    model.catalog = catalog
    return PolicySchema(catalog, model, projects)
