"""The Home tab's content for one person, chat-neutral: approvals waiting for them, their
open requests, their recent results, and the clusters of every project they hold a grant on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.core.access import Access, Refusal
from bot.core.answers import ClusterCard, Reply, store_unavailable
from bot.core.authorizer import Authorizer
from bot.core.fleet import FleetSnapshots
from bot.core.guardrails.approvals import requirement_for
from bot.core.oncall import OnCallGate
from bot.core.policy import Role
from bot.core.registry import MissingCredential
from bot.core.requests.deciders import Decision
from bot.core.requests.decisions import NeedsBreakGlass
from bot.core.requests.view import approval_state, request_price_line
from bot.core.store import ChangeRequestRecord, Store, StoreUnavailable
from bot.core.store.home_queries import (
    FINISHED_STATES,
    OPEN_STATES,
    pending_approvals,
    requests_of,
)
from bot.core.store.tokens import TokenStore
from bot.providers.base import ChangePlan, ClusterSummary, ProviderAdapter
from bot.providers.errors import ProviderError
from bot.redact import redact

log = logging.getLogger(__name__)


class HomeLimits(BaseModel):
    """How much the Home tab holds; what is left off is counted, never dropped silently."""

    model_config = ConfigDict(frozen=True)

    approvals: int = 10
    open_requests: int = 10
    recent: int = 5
    clusters_per_project: int = 10
    # Pending requests read to find the ones this person may approve (channel checks).
    pending_scan: int = 500
    # A slow provider shows as such on its project instead of holding up the whole tab.
    list_seconds: float = 8.0


class HomeRequest(BaseModel):
    """A change request as the Home tab lists it."""

    model_config = ConfigDict(frozen=True)

    id: str
    state: str
    provider: str
    project: str
    cluster_id: str
    cluster_name: str
    action: str
    preview: list[str]
    requester: str
    channel: str
    reason: str | None = None
    decided_by: str | None = None
    result_message: str | None = None
    updated_at: datetime
    price_line: str | None = None
    run_at: datetime | None = None  # a scheduled change runs then
    # Where its approvals stand, as the approval prompt shows them (see approval_state).
    approvers: tuple[str, ...] = ()
    uncounted: tuple[str, ...] = ()
    approvals_needed: int = 1
    approval_groups: tuple[str, ...] = ()
    approval_kinds: tuple[str, ...] = ()
    approval_by_rule: bool = False
    approval_budget: tuple[str, ...] = ()  # past a budget's approval_at: its figures
    glass_by: str | None = None
    glass_reason: str | None = None

    @property
    def counted(self) -> tuple[str, ...]:
        """The approvers whose approval counts."""
        return tuple(u for u in self.approvers if u not in self.uncounted)


class HomeCluster(BaseModel):
    model_config = ConfigDict(frozen=True)

    cluster_id: str
    name: str
    status: str
    steady: bool
    size: str  # "16 GPUs" or "2 nodes"
    gpu_type: str | None = None


class HomeProject(BaseModel):
    """One project the person holds a grant on; ``error`` when its provider did not answer."""

    model_config = ConfigDict(frozen=True)

    name: str
    provider: str
    clusters: list[HomeCluster]
    total_clusters: int
    error: str | None = None
    as_of_seconds: float | None = None  # the age of the fleet snapshot shown (bot.core.fleet)


class HomeToken(BaseModel):
    """One of the person's live tokens for agents (SPEC §15): never the token itself."""

    model_config = ConfigDict(frozen=True)

    name: str
    expires_at: datetime
    last_used_at: datetime | None = None
    last_client: str | None = None


class HomeData(BaseModel):
    """Everything the Home view shows; each list carries the total it was cut from."""

    model_config = ConfigDict(frozen=True)

    user: str
    approvals: list[HomeRequest]
    approvals_total: int
    approvals_more_possible: bool = False  # more pending than were scanned
    approval_channels: list[str] = []  # where all the waiting approvals are, shown or not
    open_requests: list[HomeRequest]
    open_total: int
    open_total_bounded: bool = False  # more than open_total (counted only so far)
    recent: list[HomeRequest]
    recent_total: int
    recent_total_bounded: bool = False  # more than recent_total (counted only so far)
    projects: list[HomeProject]
    requests_error: str | None = None  # the requests could not be read (the store failed)
    tokens: list[HomeToken] = []  # the person's live tokens for agents, newest first


AdapterLookup = Callable[[str], ProviderAdapter]
STORE_UNAVAILABLE = (
    "The state store is unavailable: approvals and requests cannot be shown now (nothing was "
    "changed). Open this tab again in a moment."
)


def _plan(record: ChangeRequestRecord) -> ChangePlan | None:
    try:
        return ChangePlan.model_validate(record.plan.get("plan"))
    except ValidationError:
        return None


def home_request(record: ChangeRequestRecord) -> HomeRequest:
    """The Home entry of a request, with the price line of its plan (as it was previewed)."""
    plan = _plan(record)
    preview = [line.text() for line in plan.lines] if plan is not None else []
    price = request_price_line(record, plan) if plan else None
    return HomeRequest(
        id=record.id,
        state=str(record.state),
        provider=record.provider,
        project=record.project,
        cluster_id=record.cluster_id,
        cluster_name=record.cluster_name,
        action=record.action,
        preview=preview or [record.action],
        requester=record.requester,
        channel=record.channel,
        reason=record.reason,
        decided_by=record.decided_by,
        result_message=record.result_message,
        updated_at=record.updated_at,
        price_line=price,
        run_at=record.run_at,
        **approval_state(record),
    )


def home_cluster(summary: ClusterSummary) -> HomeCluster:
    return HomeCluster(
        cluster_id=summary.cluster_id,
        name=summary.name,
        status=summary.status,
        steady=summary.steady,
        size=summary.size or "size unknown",
        gpu_type=summary.gpu_type,
    )


class HomeBuilder:
    """Builds HomeData from the policy, the store and the providers' cluster lists."""

    def __init__(
        self,
        authorizer: Authorizer,
        store: Store,
        adapter_for: AdapterLookup,
        limits: HomeLimits | None = None,
        fleet: FleetSnapshots | None = None,
        oncall: OnCallGate | None = None,
    ) -> None:
        self.authorizer = authorizer
        self.oncall = oncall  # SPEC §16: who is on call now decides on-call rules' approvers
        self.store = store
        self.adapter_for = adapter_for
        self.limits = limits or HomeLimits()
        # Shared with the list and the watcher (Access.fleet) when given.
        self.fleet = fleet or FleetSnapshots(adapter_for)

    async def build(self, user: str) -> HomeData:
        # Only grants that hold in every channel show a project here: Home has no channel,
        # so a channel-scoped grant does not (deny by default).
        projects = await self.authorizer.projects_granted(user)
        listed = await asyncio.gather(*(self._clusters(p) for p in projects))
        shown = [self._project(p, *found) for p, found in zip(projects, listed, strict=True)]
        try:
            return await self._with_requests(user, shown)
        except Exception as exc:  # the store failed (any driver's error): clusters still show
            log.warning("home: the state store failed for %s: %s", user, redact(str(exc)))
            return HomeData(
                user=user,
                approvals=[],
                approvals_total=0,
                open_requests=[],
                open_total=0,
                recent=[],
                recent_total=0,
                projects=shown,
                requests_error=STORE_UNAVAILABLE,
            )

    async def _with_requests(self, user: str, projects: list[HomeProject]) -> HomeData:
        approvals, more = await self._approvals(user)
        open_page = await requests_of(self.store, user, OPEN_STATES, self.limits.open_requests)
        recent_page = await requests_of(self.store, user, FINISHED_STATES, self.limits.recent)
        now = datetime.now(UTC)
        tokens = [t for t in await TokenStore(self.store).of_user(user) if t.live(now)]
        return HomeData(
            user=user,
            approvals=[home_request(r) for r in approvals[: self.limits.approvals]],
            approvals_total=len(approvals),
            approvals_more_possible=more,
            approval_channels=sorted({r.channel for r in approvals}),
            open_requests=[home_request(r) for r in open_page.records],
            open_total=open_page.total,
            open_total_bounded=open_page.bounded,
            recent=[home_request(r) for r in recent_page.records],
            recent_total=recent_page.total,
            recent_total_bounded=recent_page.bounded,
            projects=projects,
            tokens=[
                HomeToken(
                    name=t.name,
                    expires_at=t.expires_at,
                    last_used_at=t.last_used_at,
                    last_client=t.last_client,
                )
                for t in tokens
            ],
        )

    async def may_approve(self, user: str, record: ChangeRequestRecord) -> bool:
        """Whether the person may decide this request, checked in the request's own channel
        as a click in its thread would be (never their own request)."""
        if record.requester == user or user in record.approvers:
            return False
        decision = await self.authorizer.check(user, record.project, record.channel, Role.approver)
        if not decision.allowed:
            return False
        requirement = requirement_for(self.authorizer.policy, record.project, record.kinds)
        if requirement is not None and requirement.oncall and self.oncall is not None:
            verdict = await self.oncall.judge(
                user,
                requirement,
                doing=f"approve {record.id}",
                opened_at=record.created_at,
                now=datetime.now(UTC),
            )
            return verdict.allowed
        if requirement is None or not requirement.usergroups:
            return True
        return await self.authorizer.in_any_group(user, requirement.usergroups)

    async def _approvals(self, user: str) -> tuple[list[ChangeRequestRecord], bool]:
        """Pending requests of others that this person may approve where they were asked."""
        approver_of = await self.authorizer.projects_granted(user, Role.approver, anywhere=True)
        page = await pending_approvals(self.store, approver_of, self.limits.pending_scan)
        mine = [r for r in page.records if await self.may_approve(user, r)]
        return mine, page.total > len(page.records)

    async def _clusters(self, project: str) -> tuple[list[ClusterSummary] | str, float | None]:
        """The project's clusters from its fleet snapshot and the snapshot's age, or the
        text of why they could not be listed."""
        try:
            async with asyncio.timeout(self.limits.list_seconds):
                view = await self.fleet.get(project)
        except TimeoutError:
            return f"its clusters did not arrive within {self.limits.list_seconds:g} s", None
        except ProviderError as exc:
            return exc.user_message, None
        except MissingCredential as exc:
            return str(exc), None
        except Exception as exc:  # one project's failure must not blank the whole tab
            log.warning("home: listing %s failed: %s", project, redact(str(exc)))
            return "its clusters could not be listed", None
        allowed = self.authorizer.cluster_allowed
        return [c for c in view.clusters if allowed(project, c.cluster_id)], self.fleet.age(view)

    def _project(
        self, name: str, listed: list[ClusterSummary] | str, as_of: float | None = None
    ) -> HomeProject:
        provider = self.authorizer.policy.project(name).provider
        if isinstance(listed, str):
            return HomeProject(
                name=name, provider=provider, clusters=[], total_clusters=0, error=listed
            )
        shown = listed[: self.limits.clusters_per_project]
        return HomeProject(
            name=name,
            provider=provider,
            clusters=[home_cluster(c) for c in shown],
            total_clusters=len(listed),
            as_of_seconds=as_of,
        )


DecideFn = Callable[..., Awaitable[Reply | NeedsBreakGlass | None]]
MayDenyFn = Callable[..., Awaitable[Reply | None]]


class HomeActions:
    """What a Home button does. A Home click has no channel: a decision is checked in the
    request's own channel (as a click in its thread), a cluster is shown only on a grant that
    holds in every channel (as the tab lists it)."""

    def __init__(self, access: Access, decide: DecideFn, may_deny: MayDenyFn) -> None:
        self.access = access
        self._decide = decide
        self._may_deny = may_deny

    async def decide(
        self, user: str, request_id: str, decision: Decision
    ) -> Reply | NeedsBreakGlass | None:
        try:
            record = await self.access.store.get_request(request_id)
        except StoreUnavailable as exc:  # before anything was decided
            log.warning("refused a Home decision: %s", exc)
            return store_unavailable()
        channel = record.channel if record is not None else ""  # unknown: refused in decide
        return await self._decide(
            user=user, channel=channel, request_id=request_id, decision=decision
        )

    async def may_deny(self, user: str, request_id: str) -> tuple[str, Reply | None]:
        """The request's channel, and None when ``user`` may deny it there (a form asks why
        next) or the refusal (audited) — before a form is opened for nothing."""
        try:
            record = await self.access.store.get_request(request_id)
            channel = record.channel if record is not None else ""  # unknown: refused
            return channel, await self._may_deny(user=user, channel=channel, request_id=request_id)
        except StoreUnavailable as exc:
            log.warning("refused a Home deny: %s", exc)
            return "", store_unavailable()

    async def request_channel(self, request_id: str) -> str | None:
        record = await self.access.store.get_request(request_id)
        return record.channel if record is not None else None

    async def show(self, user: str, project: str, cluster_id: str) -> Reply:
        """The cluster's summary for the person, or the refusal (audited)."""
        try:
            if project not in await self.access.authorizer.projects_granted(user):
                raise Refusal(
                    f"you have no grant on {project} that holds outside its channels; "
                    f"use `/gpu show {project} {cluster_id}` where your grant holds.",
                    kind="not_authorized",
                )
            self.access.require_cluster_allowed(project, cluster_id)
            state = await self.access.fetch(project, cluster_id)
        except Refusal as refusal:
            return await self.access.refuse(
                user, "home", refusal, project=project, cluster_id=cluster_id, command="home show"
            )
        return Reply(ClusterCard(state.summary, shown_by=user))
