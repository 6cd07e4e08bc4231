"""E2E Networks TIR training clusters: the provider-neutral adapter (bot.providers.base)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

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
    same_value,
)
from bot.providers.e2e.client import E2EClient
from bot.providers.e2e.models import (
    ACTION_ADAPTER,
    ACTIONS,
    PROVIDER,
    E2ECluster,
    E2EClusterDetail,
)
from bot.providers.e2e.rules import (
    ACTION_FIELDS,
    FIELD_SPECS,
    ActionValue,
    check_field_rules,
    parse_action_fields,
    parse_cluster_id,
    require_running,
)
from bot.providers.e2e.summary import nodes_text, to_summary
from bot.providers.errors import (
    ProviderError,
)

log = logging.getLogger(__name__)

# -- adapter --------------------------------------------------------------------------------


def _ids_text(ids: Sequence[object]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def _ids(value: ActionValue) -> list[int]:
    return value if isinstance(value, list) else [value]


def _preview(
    action: str, values: Mapping[str, ActionValue], state: ClusterState
) -> list[PreviewLine]:
    current = state.current
    nodes = current.get("no_of_nodes")
    node_text = f"({nodes_text(nodes)})" if nodes is not None else ""
    if action == "scale_cluster":
        added = values["additional_nodes"]
        assert isinstance(added, int)  # an "int" field
        after = str(nodes + added) if isinstance(nodes, int) else f"+{added}"
        before = str(nodes) if isinstance(nodes, int) else None
        return [PreviewLine(field="scale_cluster:", before=before, after=after, unit="nodes")]
    if action == "update_image":
        before_image = current.get("image_version_id")
        return [
            PreviewLine(
                field="update_image: image",
                before=None if before_image is None else str(before_image),
                after=str(values["image_version_id"]),
            )
        ]
    if action == "update_ssh_keys":
        return [
            PreviewLine(
                field="update_ssh_keys: ssh keys",
                before=_ids_text(current.get("ssh_key_ids") or []),
                after=_ids_text(_ids(values["ssh_key_ids"])),
            )
        ]
    if action in ("restart_cluster", "restart_workers"):
        what = "restart all nodes" if action == "restart_cluster" else "restart the workers"
        return [
            PreviewLine(field=f"{action}:", before=state.summary.status, after=what, unit=node_text)
        ]
    if action == "attach_ip":
        ip = str(values["reserved_ip_id"])
        return [PreviewLine(field="attach_ip: reserved IP", before=None, after=ip)]
    if action == "detach_ip":
        ip = str(values["reserved_ip_id"])
        return [PreviewLine(field="detach_ip: reserved IP", before=ip, after="detached")]
    if action == "add_security_group":
        groups = ", ".join(f"+{i}" for i in _ids(values["security_groups_ids"]))
        return [PreviewLine(field="add_security_group: security groups", before=None, after=groups)]
    group = str(values["security_group_id"])
    return [
        PreviewLine(field="remove_security_group: security group", before=group, after="removed")
    ]


def inverse_action(
    action: str, body: Mapping[str, Any], prior: Mapping[str, Any]
) -> Inverse | None:
    """attach_ip ↔ detach_ip, one security group added ↔ removed, the image and the keys
    back to the ones before (when known); scaling and restarts have none."""
    if action in ("attach_ip", "detach_ip"):
        back = "detach_ip" if action == "attach_ip" else "attach_ip"
        return Inverse(action=back, inputs={"reserved_ip_id": str(body["reserved_ip_id"])})
    if action == "add_security_group" and len(body["security_groups_ids"]) == 1:
        group = str(body["security_groups_ids"][0])
        return Inverse(action="remove_security_group", inputs={"security_group_id": group})
    if action == "remove_security_group":
        group = str(body["security_group_id"])
        return Inverse(action="add_security_group", inputs={"security_groups_ids": group})
    if action == "update_image" and prior.get("image_version_id") is not None:
        image = str(prior["image_version_id"])
        return Inverse(action="update_image", inputs={"image_version_id": image})
    if action == "update_ssh_keys" and prior.get("ssh_key_ids"):
        keys = ",".join(str(key) for key in prior["ssh_key_ids"])
        return Inverse(action="update_ssh_keys", inputs={"ssh_key_ids": keys})
    return None


def _current_of(cluster: E2EClusterDetail) -> dict[str, object]:
    return {
        "status": cluster.status,
        "no_of_nodes": cluster.no_of_nodes,
        "image_version_id": cluster.image_version.id if cluster.image_version else None,
        "ssh_key_ids": cluster.ssh_key_ids,
    }


CHANGES = ProviderChanges(
    provider=PROVIDER,
    title="E2E",
    command="action",
    actions=ACTIONS,
    fields={
        action: tuple(FIELD_SPECS[name] for name in names)
        for action, names in ACTION_FIELDS.items()
    },
)


class E2EAdapter:
    """The provider-neutral face (bot.providers.base.ProviderAdapter) of one E2E project."""

    provider: ProviderName = PROVIDER

    def __init__(self, client: E2EClient, project: str) -> None:
        self.client = client
        self.project = project

    async def list_clusters(self) -> list[ClusterSummary]:
        items = await self.client.list_clusters()
        return [self._summary(item) for item in items]

    async def probe_replies(self) -> list[BaseModel]:
        """The list's clusters, then each one's own GET (SupportsProbe): reads only."""
        listed = await self.client.list_clusters()
        return [*listed, *[await self.client.get_cluster(item.id) for item in listed]]

    async def get_cluster(self, cluster_id: str) -> ClusterState:
        cluster = await self.client.get_cluster(parse_cluster_id(cluster_id))
        return ClusterState(summary=self._summary(cluster), current=_current_of(cluster))

    def actions(self) -> list[str]:
        return list(ACTIONS)

    def fields_for(self, action: str) -> list[FieldSpec]:
        if action not in ACTION_FIELDS:
            raise ChangeInputError(
                {"action": f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}"}
            )
        return list(CHANGES.fields[action])

    def plan(self, state: ClusterState, action: str, raw: Mapping[str, object]) -> ChangePlan:
        if action not in ACTION_FIELDS:
            raise ChangeInputError(
                {"action": f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}"}
            )
        parse_cluster_id(state.summary.cluster_id)
        require_running(state.summary.status)
        values = parse_action_fields(action, raw)
        check_field_rules(values)
        request = ACTION_ADAPTER.validate_python({"action": action, **values})
        return ChangePlan(
            provider=PROVIDER,
            project=self.project,
            cluster_id=state.summary.cluster_id,
            cluster_name=state.summary.name,
            action=action,
            body=request.model_dump(mode="json"),
            kinds=[action],
            lines=_preview(action, values, state),
            fingerprint=self.fingerprint(state),
            node_price=state.summary.node_price,
        )

    @staticmethod
    def fingerprint(state: ClusterState) -> dict[str, object]:
        """What must not have changed between the preview and the execution."""
        current = state.current
        return {
            "status": state.summary.status,
            "no_of_nodes": current.get("no_of_nodes"),
            "image_version_id": current.get("image_version_id"),
            "ssh_key_ids": list(current.get("ssh_key_ids") or []),
        }

    async def apply(self, plan: ChangePlan) -> ApplyOutcome:
        cluster_id = parse_cluster_id(plan.cluster_id)
        try:
            request = ACTION_ADAPTER.validate_python(plan.body)
        except ValidationError:
            raise ChangeInputError(
                {"action": f"the stored request for {plan.action} is not a valid E2E action"}
            ) from None
        reply = await self.client.run_action(cluster_id, request)
        message = reply.text or reply.message
        if reply.cluster is not None:
            return ApplyOutcome(message=message, summary=self._summary(reply.cluster))
        try:
            cluster = await self.client.get_cluster(cluster_id)
        except ProviderError as exc:
            # The action succeeded; only the follow-up read failed.
            log.warning("e2e: %s done, but reading the cluster failed: %s", plan.action, exc)
            note = f"{message} (the cluster could not be read afterwards: {exc.user_message})"
            return ApplyOutcome(message=note, summary=None)
        return ApplyOutcome(message=message, summary=self._summary(cluster))

    def inverse(self, plan: ChangePlan, prior: Mapping[str, Any]) -> Inverse | None:
        return inverse_action(plan.action, plan.body, prior)

    def shows(self, plan: ChangePlan, state: ClusterState) -> bool:
        # Only the image and the keys are visible on the cluster; an IP or a security group
        # that is gone is refused by E2E itself when the inverse is sent.
        return all(
            same_value(state.current.get(name), plan.body[name])
            for name in ("image_version_id", "ssh_key_ids")
            if name in plan.body
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    def _summary(self, cluster: E2ECluster) -> ClusterSummary:
        return to_summary(cluster, self.project, location=self.client.location)
