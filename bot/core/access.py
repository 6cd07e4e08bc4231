"""The guard every command and change request goes through.

Who may do what on which cluster, refusals (shown and audited), fetching a cluster and
planning a change with a refusal a person can act on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from bot.core.answers import Reply, error
from bot.core.authorizer import Authorizer
from bot.core.fleet import FleetSnapshots
from bot.core.oncall import OnCallGate
from bot.core.oncall.copies import OnCallCopies
from bot.core.policy import Policy, Role
from bot.core.spend.book import SpendBook
from bot.core.store import Store, StoreUnavailable
from bot.core.store.usage import UsageStore
from bot.errors import GpuopsError
from bot.providers.base import ChangeInputError, ChangePlan, ClusterState, ProviderAdapter
from bot.providers.catalog import Catalog
from bot.providers.errors import ProviderError, RuleViolation
from bot.redact import redact

log = logging.getLogger(__name__)

AdapterLookup = Callable[[str], ProviderAdapter]


class Refusal(GpuopsError):
    """A request refused before anything changed; the text is shown and audited."""

    def __init__(
        self,
        message: str,
        *,
        kind: str = "refused",
        field: str | None = None,
        mentions: tuple[str, ...] = (),
    ) -> None:
        self.message = message
        self.kind = kind
        self.field = field
        self.mentions = mentions  # user ids in the text shown as real mentions
        super().__init__(message)

    def reply(self) -> Reply:
        return error(self.message, mentions=self.mentions)


def invalid_change(errors: Mapping[str, str]) -> Refusal:
    """The one refusal for fields that cannot be used: ``invalid change — name: why; …``."""
    lines = "; ".join(f"{k}: {v}" for k, v in errors.items())
    return Refusal(f"invalid change — {lines}", kind="invalid", field=next(iter(errors), None))


class Access:
    """Authorization, the cluster allowlist, the audit trail and the provider lookups that
    the command service and the change workflow share."""

    def __init__(
        self,
        *,
        authorizer: Authorizer,
        store: Store,
        adapter_for: AdapterLookup,
        oncall: OnCallGate | None = None,
    ) -> None:
        self.authorizer = authorizer
        # Who is on call now, for approval rules with on-call approvers (SPEC §16); None:
        # no on-call tool is reachable from here (a rule naming one then takes its fallback).
        self.oncall = oncall
        # The prompt's DM copies to on-call approvers and their escalation (set by the
        # composition root once the workflow's clock and Slack are at hand).
        self.oncall_copies: OnCallCopies | None = None
        self.store = store
        self.adapter_for = adapter_for
        # The clusters of each project, shared by the list, Home and the watcher.
        self.fleet = FleetSnapshots(adapter_for)
        # Month-to-date from the usage ledger, rates and GPUs from the fleet (SPEC §13).
        self.spend = SpendBook(UsageStore(store), self.fleet, lambda: self.policy)

    @property
    def policy(self) -> Policy:
        """The policy in force (its holder's, which a reload swaps)."""
        return self.authorizer.holder.current

    @property
    def catalog(self) -> Catalog:
        """The providers this process knows (the policy's schema is built from them)."""
        return self.authorizer.holder.catalog

    def provider_of(self, project: str) -> str:
        cfg = self.policy.projects.get(project)
        return cfg.provider if cfg is not None else "unknown"

    async def audit(
        self,
        actor: str,
        event: str,
        *,
        project: str | None = None,
        cluster_id: str | None = None,
        request_id: str | None = None,
        outcome: str | None = None,
        **detail: object,
    ) -> None:
        await self.store.append_audit(
            actor=actor,
            event=event,
            project=project,
            cluster_id=cluster_id,
            request_id=request_id,
            outcome=outcome,
            detail={k: redact(v) if isinstance(v, str) else v for k, v in detail.items()},
        )

    async def refuse(
        self,
        user: str,
        channel: str,
        refusal: Refusal,
        *,
        project: str | None = None,
        cluster_id: str | None = None,
        request_id: str | None = None,
        command: str = "",
    ) -> Reply:
        """Audit a refusal and return what the person sees (even when the store, and so the
        audit trail, cannot be reached: the refusal changed nothing)."""
        try:
            await self.audit(
                user,
                "refused",
                project=project,
                cluster_id=cluster_id,
                request_id=request_id,
                outcome=refusal.kind,
                reason=refusal.message,
                channel=channel,
                command=command,
            )
        except StoreUnavailable as exc:
            log.error("could not audit a refusal of %s (%s): %s", user, refusal.kind, exc)
        return refusal.reply()

    async def require(
        self, user: str, project: str, channel: str, needed: Role, *, doing: str = "this"
    ) -> Role:
        decision = await self.authorizer.check(user, project, channel, needed, action=doing)
        if not decision.allowed or decision.role is None:
            raise Refusal(decision.reason, kind="not_authorized")
        return decision.role

    def require_cluster_allowed(self, project: str, cluster_id: str) -> None:
        if not self.authorizer.cluster_allowed(project, cluster_id):
            raise Refusal(
                f"cluster {cluster_id} is not in the allowlist of project {project}.",
                kind="cluster_not_allowed",
            )

    async def fetch(self, project: str, cluster_id: str) -> ClusterState:
        try:
            return await self.adapter_for(project).get_cluster(cluster_id)
        except ChangeInputError as exc:  # e.g. an E2E cluster id that is not a number
            raise Refusal(
                "; ".join(exc.errors.values()) or f"{cluster_id} is not a valid cluster id",
                kind="invalid",
                field="cluster_id",
            ) from None
        except ProviderError as exc:
            raise Refusal(
                f"could not fetch {cluster_id}: {exc.user_message}",
                kind=f"provider_{exc.kind}",
                field=exc.field,
            ) from None

    def make_plan(
        self, project: str, state: ClusterState, action: str, inputs: Mapping[str, object]
    ) -> ChangePlan:
        try:
            return self.adapter_for(project).plan(state, action, inputs)
        except ChangeInputError as exc:
            raise invalid_change(exc.errors) from None
        except RuleViolation as exc:
            raise Refusal(exc.message, kind="rule", field=exc.field) from None
