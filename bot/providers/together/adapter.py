"""Together AI Instant Clusters: the provider-neutral adapter (bot.providers.base).

transport = build_together_transport(api_key, base_url, ClientSettings())
adapter = TogetherAdapter(TogetherClient(transport, project_id="proj-123"), "ml-prod")
state = await adapter.get_cluster("tc-h100-reserved")
plan = adapter.plan(state, "update", {"num_gpus": "24"})
outcome = await adapter.apply(plan)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from pydantic import BaseModel

from bot.providers.base import (
    ApplyOutcome,
    ChangeInputError,
    ChangePlan,
    ClusterState,
    ClusterSummary,
    FieldSpec,
    Inverse,
    PreviewLine,
    ProviderChanges,
    ProviderName,
    example_time,
    same_value,
)
from bot.providers.errors import (
    ProviderNotFound,
)
from bot.providers.together.client import TogetherClient
from bot.providers.together.models import PROVIDER, UPDATE_FIELDS, ClusterType, ClusterUpdate
from bot.providers.together.remediations import RemediationClient
from bot.providers.together.rules import check_update, classify, parse_update, shown
from bot.providers.together.summary import cluster_state, to_summary

# Clusters summarized between two turns of the event loop (a long list is not one block).
SUMMARIES_PER_TURN = 100


# -- the adapter ---------------------------------------------------------------------------
def _utc_now() -> datetime:
    return datetime.now(UTC)


_END_TIME_HINT = "RFC 3339, e.g. {example}; RESERVED or SCHEDULED_CAPACITY only"
_FIELD_SPECS: tuple[FieldSpec, ...] = (
    FieldSpec(
        name="cluster_type",
        label="Cluster type",
        kind="choice",
        choices=(ClusterType.KUBERNETES.value, ClusterType.SLURM.value),
        hint="KUBERNETES or SLURM",
    ),
    FieldSpec(
        name="num_gpus",
        label="Total GPUs",
        kind="int",
        hint="total GPU count, a multiple of 8 (8 per node: 8, 16, 24 …)",
    ),
    FieldSpec(
        name="num_reserved_gpus",
        label="Reserved GPUs",
        kind="int",
        hint="RESERVED billing only",
    ),
    FieldSpec(
        name="num_preemptible_gpus",
        label="Preemptible GPUs",
        kind="int",
        hint="multiple of 8; fulfilled asynchronously",
    ),
    FieldSpec(
        name="num_capacity_pool_gpus",
        label="Capacity-pool GPUs",
        kind="int",
        hint="multiple of 8, at most num_gpus; capacity-pool clusters only",
    ),
    FieldSpec(
        name="reservation_end_time",
        label="Decommission time",
        kind="datetime",
        hint=_END_TIME_HINT.format(example="a future time"),
    ),
)


CHANGES = ProviderChanges(
    provider=PROVIDER,
    title="Together",
    command="update",
    actions=("update",),
    fields={"update": _FIELD_SPECS},
)


class TogetherAdapter:
    """The provider-neutral face (ProviderAdapter) of one project's Together client.

    ``plan`` needs no cached cluster: everything the rules read is in the ClusterState that
    ``get_cluster`` returned (summary + current values), so a state kept across a modal
    round trip, or planned on another replica, is checked the same way."""

    provider: ProviderName = "together"
    reservation_field = "reservation_end_time"  # SupportsReservations

    def __init__(
        self,
        client: TogetherClient,
        project: str,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.client = client
        self.project = project
        self._now = now

    async def list_clusters(self) -> list[ClusterSummary]:
        listed = await self.client.list_clusters()
        summaries: list[ClusterSummary] = []
        for start in range(0, len(listed), SUMMARIES_PER_TURN):
            summaries += [
                to_summary(c, self.project) for c in listed[start : start + SUMMARIES_PER_TURN]
            ]
            if len(listed) > SUMMARIES_PER_TURN:
                await asyncio.sleep(0)  # thousands of clusters: the loop is free between
        return summaries

    async def probe_replies(self) -> list[BaseModel]:
        """The list's clusters, then each one's own GET (SupportsProbe): reads only."""
        listed = await self.client.list_clusters()
        return [*listed, *[await self.client.get_cluster(c.cluster_id) for c in listed]]

    async def get_cluster(self, cluster_id: str) -> ClusterState:
        cluster = await self.client.get_cluster(cluster_id)
        wanted = self.client.project_id
        if wanted and cluster.project_id != wanted:
            # The key may reach other projects' clusters; the policy project is only the
            # one its list shows, so another project's cluster cannot be shown or changed.
            raise ProviderNotFound(
                f"cluster {cluster_id} not found in project {wanted}", provider=PROVIDER
            )
        return cluster_state(cluster, self.project)

    def actions(self) -> list[str]:
        return list(CHANGES.actions)

    def remediations(self) -> RemediationClient:
        """Its node remediations (SupportsRemediations), on this client's HTTP transport."""
        return RemediationClient(self.client.transport)

    def fields_for(self, action: str) -> list[FieldSpec]:
        """The update's fields; the end time's hint has an example computed from now."""
        self._require_update(action)
        hint = _END_TIME_HINT.format(example=example_time(self._now()))
        return [
            spec.model_copy(update={"hint": hint}) if spec.name == "reservation_end_time" else spec
            for spec in CHANGES.fields[action]
        ]

    def plan(self, state: ClusterState, action: str, raw: Mapping[str, object]) -> ChangePlan:
        self._require_update(action)
        update = parse_update(raw)
        check_update(state, update, self._now())
        return ChangePlan(
            provider=self.provider,
            project=self.project,
            cluster_id=state.summary.cluster_id,
            cluster_name=state.summary.name,
            action="update",
            body=update.to_body(),
            kinds=classify(state, update),
            lines=self._preview(state, update),
            fingerprint=self.fingerprint(state),
        )

    async def apply(self, plan: ChangePlan) -> ApplyOutcome:
        if plan.provider != self.provider or plan.action != "update":
            raise ValueError(f"not a Together update plan: {plan.provider}/{plan.action}")
        update = ClusterUpdate.model_validate(plan.body)
        cluster = await self.client.update_cluster(plan.cluster_id, update)
        return ApplyOutcome(
            message="Together accepted the update", summary=to_summary(cluster, self.project)
        )

    def inverse(self, plan: ChangePlan, prior: Mapping[str, object]) -> Inverse | None:
        """Each changed field back to its value just before the change (all must be known)."""
        inputs = {name: prior.get(name) for name in plan.body}
        if not inputs or any(value is None for value in inputs.values()):
            return None
        return Inverse(action="update", inputs={k: shown(v) for k, v in inputs.items()})

    def shows(self, plan: ChangePlan, state: ClusterState) -> bool:
        return all(same_value(state.current.get(k), v) for k, v in plan.body.items())

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- internals ----------------------------------------------------------------------
    @staticmethod
    def _require_update(action: str) -> None:
        if action != "update":
            raise ChangeInputError(
                {"action": f"Together has only the 'update' action (got {action!r})"}
            )

    @staticmethod
    def _preview(state: ClusterState, update: ClusterUpdate) -> list[PreviewLine]:
        lines = []
        for name, value in update.set_fields().items():
            before = state.current.get(name)
            lines.append(
                PreviewLine(
                    field=name,
                    before=None if before is None else str(before),
                    after=shown(value),
                )
            )
        return lines

    @staticmethod
    def fingerprint(state: ClusterState) -> dict[str, object]:
        """What must not have changed between the preview and the execution."""
        # The settable fields only: a cluster that merely finished provisioning since the
        # preview (status moved on) still matches what the approver saw.
        return {name: state.current.get(name) for name in UPDATE_FIELDS}
