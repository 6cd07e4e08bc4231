"""The platform-agnostic face of gpuops: what a command, a button, a modal or a mention
asks for, and what the person should see. Handlers translate Slack payloads to these
calls and deliver the results; nothing here parses a Slack payload."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.core.grammar import (
    ActionCommand,
    AuditCommand,
    Command,
    ListCommand,
    ShowCommand,
    UpdateCommand,
    UsageError,
    parse_command,
)
from bot.core.pacing import Pacer
from bot.core.policy import Authorizer, Policy, Role
from bot.core.requests.workflow import ChangeWorkflow, Refusal, Reply
from bot.core.store.db import Store
from bot.metrics import COMMANDS
from bot.providers.base import ClusterState, ClusterSummary, FieldSpec
from bot.providers.errors import ProviderError
from bot.providers.registry import MissingCredential
from bot.slack import blocks as render
from bot.slack.blocks import SlackMessage

log = logging.getLogger(__name__)

ModalKind = Literal["update", "action"]
SUBMIT_TIMEOUT = 2.0  # seconds to re-fetch a cluster while Slack waits for the modal's ack


@dataclass(frozen=True)
class ModalRequest:
    """A command that lacks parameters: open a modal (callback_id gpu_update / gpu_action)."""

    kind: ModalKind
    project: str
    cluster_id: str
    channel: str
    action: str | None = None
    prefill: dict[str, str] = field(default_factory=dict)
    reason: str | None = None

    def metadata(self) -> dict[str, Any]:
        return {"project": self.project, "cluster_id": self.cluster_id, "channel": self.channel}


@dataclass(frozen=True)
class SubmissionErrors:
    errors: dict[str, str]


@dataclass(frozen=True)
class ReadySubmission:
    project: str
    cluster_id: str
    channel: str
    action: str
    inputs: dict[str, str]
    reason: str | None


CommandOutcome = Reply | ModalRequest


def parse_metadata(raw: str | None) -> dict[str, str]:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: str(v) for k, v in data.items() if k in ("project", "cluster_id", "channel")}


def shown_values(current: Mapping[str, Any], specs: list[FieldSpec]) -> dict[str, Any]:
    """The cluster's values a form was prefilled with (kept in its private_metadata): a
    prefilled input submitted as it was is not a change, even if the cluster changed while
    the form was open."""
    shown: dict[str, Any] = {}
    for spec in specs:
        value = current.get(spec.name)
        if isinstance(value, list | tuple):
            shown[spec.name] = [str(v) for v in value]
        elif value is not None:
            shown[spec.name] = str(value)
    return shown


def parse_shown(raw: str | None) -> dict[str, Any]:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    shown = data.get("shown") if isinstance(data, dict) else None
    if not isinstance(shown, dict):
        return {}
    return {
        str(k): v
        for k, v in shown.items()
        if isinstance(v, str) or (isinstance(v, list) and all(isinstance(i, str) for i in v))
    }


class GpuOps:
    def __init__(
        self, *, policy: Policy, authorizer: Authorizer, store: Store, workflow: ChangeWorkflow
    ) -> None:
        self.policy = policy
        self.authorizer = authorizer
        self.store = store
        self.workflow = workflow
        self._states: dict[tuple[str, str], ClusterState] = {}
        # Commands' work after the ack, a few at a time (see bot.core.pacing).
        self.pacer = Pacer()

    # -- commands ---------------------------------------------------------------------
    async def handle_command(self, user: str, channel: str, text: str) -> CommandOutcome:
        try:
            command = parse_command(text)
        except UsageError as exc:
            COMMANDS.labels("usage", "refused").inc()
            return Reply(render.error(str(exc)))
        try:
            outcome = await self._dispatch(user, channel, command)
        except Refusal as refusal:
            COMMANDS.labels(command.name, "refused").inc()
            return await self.workflow.refuse(
                user,
                channel,
                refusal,
                project=getattr(command, "project", None),
                cluster_id=getattr(command, "cluster_id", None),
                command=text[:200],
            )
        COMMANDS.labels(command.name, "ok").inc()
        return outcome

    async def _dispatch(self, user: str, channel: str, command: Command) -> CommandOutcome:
        if isinstance(command, ListCommand):
            return await self.list_clusters(user, channel, command.project)
        if isinstance(command, ShowCommand):
            return await self.show(user, channel, command.project, command.cluster_id)
        if isinstance(command, UpdateCommand | ActionCommand):
            return await self._change(user, channel, command)
        if isinstance(command, AuditCommand):
            return await self.audit(user, channel, command.project, command.limit)
        return Reply(await self.help(user, channel))

    async def help(self, user: str, channel: str) -> SlackMessage:
        roles: dict[str, Role] = {}
        for project in await self.authorizer.projects_for(user, channel):
            role = await self.authorizer.role_for(user, project, channel)
            if role is not None:
                roles[project] = role
        if not roles:
            return render.notice(
                "gpuops: you have no access to any project in this channel. Ask a gpuops admin "
                "for a grant (the policy file maps Slack users and groups to projects)."
            )
        top = max(roles.values())
        lines = [
            "*What you can do here*",
            "• `/gpu help` — this help",
            "• `/gpu list [project]` — clusters you can see (only you see the answer)",
            "• `/gpu show <project> <cluster_id>` — post a cluster summary here",
        ]
        if top >= Role.operator:
            lines += [
                '• `/gpu update <project> <cluster_id> [field=value …] [reason="…"]` — '
                "Together: num_gpus, num_reserved_gpus, num_preemptible_gpus, "
                "num_capacity_pool_gpus, cluster_type, reservation_end_time (no fields: a form)",
                "• `/gpu action <project> <cluster_id> [<action>] [field=value …]` — E2E: "
                "update_ssh_keys, update_image, restart_workers, restart_cluster, scale_cluster, "
                "attach_ip, detach_ip, add_security_group, remove_security_group (missing: a form)",
                "  Risky changes wait for a second person's approval in the thread.",
            ]
        if top >= Role.approver:
            lines.append("• Approve or deny others' requests with the buttons in their thread")
        if top >= Role.admin:
            lines.append("• `/gpu audit [project] [limit]` — the audit trail")
        lines.append(
            "Values: integers as digits, lists comma-separated (`ssh_key_ids=11,12`), "
            "times RFC 3339 (`reservation_end_time=2026-12-31T00:00:00Z`)."
        )
        lines.append(
            "Your projects: "
            + ", ".join(f"{render.escape(p)} ({r.name})" for p, r in sorted(roles.items()))
        )
        text = "\n".join(lines)
        return SlackMessage(text=text, blocks=[render.section(text)])

    async def list_clusters(self, user: str, channel: str, project: str | None) -> Reply:
        if project is not None:
            await self.workflow.require(user, project, channel, Role.viewer)
            projects = [project]
        else:
            projects = await self.authorizer.projects_for(user, channel)
            if not projects:
                raise Refusal(
                    "you have no projects you can view in this channel.", kind="not_authorized"
                )
        results = await asyncio.gather(*(self._list_one(p) for p in projects))
        return Reply(render.cluster_list(dict(zip(projects, results, strict=True))))

    async def _list_one(self, project: str) -> list[ClusterSummary] | str:
        try:
            clusters = await self.workflow.adapter_for(project).list_clusters()
        except ProviderError as exc:
            return exc.user_message
        except MissingCredential as exc:
            return str(exc)
        return [c for c in clusters if self.authorizer.cluster_allowed(project, c.cluster_id)]

    async def cluster(self, user: str, channel: str, project: str, cluster_id: str) -> ClusterState:
        await self.workflow.require(user, project, channel, Role.viewer)
        self.workflow.require_cluster_allowed(project, cluster_id)
        state = await self.workflow.fetch(project, cluster_id)
        self._states[(project, cluster_id)] = state
        return state

    async def show(self, user: str, channel: str, project: str, cluster_id: str) -> Reply:
        state = await self.cluster(user, channel, project, cluster_id)
        return Reply(render.cluster_summary(state.summary, shown_by=user), public=True)

    async def audit(self, user: str, channel: str, project: str | None, limit: int) -> Reply:
        if project is not None:
            await self.workflow.require(user, project, channel, Role.admin)
            entries = await self.store.list_audit(project=project, limit=limit)
        else:
            projects = await self.authorizer.projects_for(user, channel, Role.admin)
            if not projects:
                raise Refusal(
                    "reading the audit trail needs the admin role.", kind="not_authorized"
                )
            batches = [await self.store.list_audit(project=p, limit=limit) for p in projects]
            entries = sorted((e for b in batches for e in b), key=lambda e: e.at, reverse=True)[
                :limit
            ]
        return Reply(render.audit_list(entries))

    async def _change(
        self, user: str, channel: str, command: UpdateCommand | ActionCommand
    ) -> CommandOutcome:
        provider = self._provider(command.project)
        expected = "together" if isinstance(command, UpdateCommand) else "e2e"
        await self.workflow.require(user, command.project, channel, Role.operator)
        self.workflow.require_cluster_allowed(command.project, command.cluster_id)
        if provider != expected:
            verb = "update" if provider == "together" else "action"
            raise Refusal(
                f"{command.project} is an {_provider_label(provider)} project: use `/gpu {verb}`.",
                kind="usage",
            )
        kind: ModalKind = "update" if isinstance(command, UpdateCommand) else "action"
        action = "update" if isinstance(command, UpdateCommand) else command.action
        if (
            action is None
            or (not command.fields and kind == "update")
            or self._missing_fields(command.project, action, command.fields)
        ):
            return ModalRequest(
                kind=kind,
                project=command.project,
                cluster_id=command.cluster_id,
                channel=channel,
                action=None if kind == "update" else action,
                prefill=dict(command.fields),
                reason=command.reason,
            )
        return await self.workflow.request_change(
            user=user,
            channel=channel,
            project=command.project,
            cluster_id=command.cluster_id,
            action=action,
            inputs=command.fields,
            reason=command.reason,
            command=f"{kind} {command.project} {command.cluster_id}",
        )

    def _provider(self, project: str) -> str:
        cfg = self.policy.projects.get(project)
        return cfg.provider if cfg is not None else "unknown"

    def _missing_fields(self, project: str, action: str, fields: Mapping[str, str]) -> bool:
        adapter = self.workflow.adapter_for(project)
        if action not in adapter.actions():
            return False  # planning will say the action is unknown
        return any(s.required and not fields.get(s.name) for s in adapter.fields_for(action))

    # -- modals -----------------------------------------------------------------------
    async def build_modal(self, user: str, request: ModalRequest) -> dict[str, Any]:
        callback = "gpu_update" if request.kind == "update" else "gpu_action"
        try:
            state = await self.cluster(user, request.channel, request.project, request.cluster_id)
        except Refusal as refusal:
            return render.message_modal(callback, "gpuops", refusal.message, request.metadata())
        prefill = {**request.prefill, **({"reason": request.reason} if request.reason else {})}
        return self._modal(request.kind, state, request.action, prefill, request.metadata())

    def _modal(
        self,
        kind: ModalKind,
        state: ClusterState,
        action: str | None,
        prefill: Mapping[str, str],
        metadata: Mapping[str, Any],
    ) -> dict[str, Any]:
        adapter = self.workflow.adapter_for(state.summary.project)
        current: dict[str, Any] = {**state.current, **prefill}
        specs: list[FieldSpec]
        if kind == "update":
            specs = adapter.fields_for("update")
        else:
            specs = adapter.fields_for(action) if action in adapter.actions() else []
        meta = {**metadata, "shown": shown_values(state.current, specs)}
        if kind == "update":
            return render.update_modal(state.summary, specs, current, meta)
        return render.action_modal(state.summary, adapter.actions(), action, specs, current, meta)

    async def rebuild_action_modal(
        self, user: str, metadata_raw: str | None, action: str, values: Mapping[str, str | None]
    ) -> dict[str, Any]:
        meta = parse_metadata(metadata_raw)
        request = ModalRequest(
            kind="action",
            project=meta.get("project", ""),
            cluster_id=meta.get("cluster_id", ""),
            channel=meta.get("channel", ""),
            action=action,
        )
        try:
            state = await self._state_for_submit(
                user, request.channel, request.project, request.cluster_id
            )
        except Refusal as refusal:
            return render.message_modal("gpu_action", "gpuops", refusal.message, request.metadata())
        typed = {k: v for k, v in values.items() if v and k not in ("action", "reason")}
        return self._modal("action", state, action, typed, request.metadata())

    async def _state_for_submit(
        self, user: str, channel: str, project: str, cluster_id: str
    ) -> ClusterState:
        """The cluster as fresh as Slack's 3-second budget allows."""
        await self.workflow.require(user, project, channel, Role.operator)
        self.workflow.require_cluster_allowed(project, cluster_id)
        cached = self._states.get((project, cluster_id))
        try:
            state = await asyncio.wait_for(self.workflow.fetch(project, cluster_id), SUBMIT_TIMEOUT)
        except TimeoutError:
            if cached is None:
                raise Refusal(
                    f"{project} did not answer in time; try again.", kind="provider_timeout"
                ) from None
            return cached
        self._states[(project, cluster_id)] = state
        return state

    async def check_submission(
        self,
        user: str,
        callback_id: str,
        metadata_raw: str | None,
        values: Mapping[str, str | None],
    ) -> SubmissionErrors | ReadySubmission:
        meta = parse_metadata(metadata_raw)
        project, cluster_id, channel = (
            meta.get("project", ""),
            meta.get("cluster_id", ""),
            meta.get("channel", ""),
        )
        first_block = "action" if callback_id == "gpu_action" else "num_gpus"
        if not (project and cluster_id and channel):
            return SubmissionErrors(
                {first_block: "This form lost its context; run the command again."}
            )
        action = "update" if callback_id == "gpu_update" else (values.get("action") or "")
        if not action:
            return SubmissionErrors({"action": "Choose an action."})
        try:
            state = await self._state_for_submit(user, channel, project, cluster_id)
            adapter = self.workflow.adapter_for(project)
            if action not in adapter.actions():
                return SubmissionErrors({"action": f"Unknown action {action}."})
            specs = adapter.fields_for(action)
            shown = parse_shown(metadata_raw)
            inputs, unchanged = self._changed_inputs(specs, state.current, values, shown)
            missing = [s.name for s in specs if s.required and s.name not in inputs]
            if missing:
                return SubmissionErrors(
                    {
                        name: "Already the cluster's current value: change it."
                        if name in unchanged
                        else "Required for this action."
                        for name in missing
                    }
                )
            if action == "update" and not inputs:
                return SubmissionErrors(
                    {first_block: "Nothing changed: every field is the cluster's current value."}
                )
            self.workflow.make_plan(project, state, action, inputs)
        except Refusal as refusal:
            block = (
                refusal.field
                if refusal.field in {s.name for s in specs_or_empty(self, project, action)}
                else first_block
            )
            return SubmissionErrors({block: refusal.message[:1900]})
        reason = (values.get("reason") or "").strip() or None
        return ReadySubmission(
            project=project,
            cluster_id=cluster_id,
            channel=channel,
            action=action,
            inputs=inputs,
            reason=reason,
        )

    @staticmethod
    def _changed_inputs(
        specs: list[FieldSpec],
        current: Mapping[str, Any],
        values: Mapping[str, str | None],
        shown: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, str], set[str]]:
        inputs: dict[str, str] = {}
        unchanged: set[str] = set()
        for spec in specs:
            raw = (values.get(spec.name) or "").strip()
            if not raw:
                continue
            if _same_value(raw, current.get(spec.name)) or _same_value(
                raw, (shown or {}).get(spec.name)
            ):
                unchanged.add(spec.name)
                continue
            inputs[spec.name] = raw
        return inputs, unchanged

    async def submit(self, user: str, ready: ReadySubmission) -> Reply:
        return await self.workflow.request_change(
            user=user,
            channel=ready.channel,
            project=ready.project,
            cluster_id=ready.cluster_id,
            action=ready.action,
            inputs=ready.inputs,
            reason=ready.reason,
            command=f"modal {ready.action}",
        )

    # -- mentions ---------------------------------------------------------------------
    async def handle_mention(self, user: str, channel: str, text: str) -> Reply:
        try:
            command = parse_command(text)
        except UsageError as exc:
            COMMANDS.labels("mention", "refused").inc()
            return Reply(render.error(str(exc)))
        if isinstance(command, ShowCommand):
            try:
                reply = await self.show(user, channel, command.project, command.cluster_id)
            except Refusal as refusal:
                COMMANDS.labels("mention", "refused").inc()
                return await self.workflow.refuse(
                    user,
                    channel,
                    refusal,
                    project=command.project,
                    cluster_id=command.cluster_id,
                    command="mention show",
                )
            COMMANDS.labels("mention", "ok").inc()
            return reply
        COMMANDS.labels("mention", "ok").inc()
        if command.name == "help":  # it lists the person's projects and roles: only for them
            return Reply(await self.help(user, channel))
        return Reply(
            render.notice(
                "In a thread I answer `@gpuops show <project> <cluster_id>` and `@gpuops help`. "
                f"For `{command.name}`, use `/gpu {command.name} …` in the channel."
            ),
            public=True,
        )


def specs_or_empty(ops: GpuOps, project: str, action: str) -> list[FieldSpec]:
    try:
        adapter = ops.workflow.adapter_for(project)
        return adapter.fields_for(action) if action in adapter.actions() else []
    except (KeyError, MissingCredential):
        return []


def _same_value(raw: str, current: Any) -> bool:
    if current is None:
        return False
    if isinstance(current, list | tuple):
        shown = ",".join(str(v) for v in current)
        return raw.replace(" ", "") == shown
    return raw == str(current)


def _provider_label(provider: str) -> str:
    return {"together": "Together", "e2e": "E2E"}.get(provider, provider)
