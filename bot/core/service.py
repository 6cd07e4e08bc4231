"""The chat-neutral entry point: commands, forms, decisions and mentions.

Surfaces translate their payloads to these calls and render the answers; nothing here
knows a chat platform."""

from __future__ import annotations

from collections.abc import Mapping

from bot.core.access import Access, Refusal
from bot.core.answers import Reply, error, notice
from bot.core.forms import FormKind, FormRequest, Forms, ReadySubmission, SubmissionErrors
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
from bot.core.policy import Role
from bot.core.queries import Queries
from bot.core.requests.workflow import ChangeWorkflow
from bot.metrics import COMMANDS
from bot.pacing import Pacer

CommandOutcome = Reply | FormRequest
_PROVIDER_LABELS = {"together": "Together", "e2e": "E2E"}


class CommandService:
    """Runs what people ask of gpuops: commands, form submissions, decisions, mentions.

    Queries answer read-only commands, Forms check change forms, the ChangeWorkflow runs
    change requests; every refusal is audited through Access."""

    def __init__(self, *, access: Access, workflow: ChangeWorkflow) -> None:
        self.access = access
        self.workflow = workflow
        self.queries = Queries(access)
        self.forms = Forms(access)
        self.decide = workflow.decide  # approve, deny or cancel a request (ChangeWorkflow)
        # Commands' work after the ack, a few at a time (see bot.pacing).
        self.pacer = Pacer()

    async def first_delivery(self, key: str) -> bool:
        """True the first time a delivery key is seen (a redelivery must act once)."""
        return await self.access.store.remember_delivery(key)

    # -- commands ---------------------------------------------------------------------
    async def handle_command(self, user: str, channel: str, text: str) -> CommandOutcome:
        try:
            command = parse_command(text)
        except UsageError as exc:
            COMMANDS.labels("usage", "refused").inc()
            return error(str(exc))
        try:
            outcome = await self._dispatch(user, channel, command)
        except Refusal as refusal:
            COMMANDS.labels(command.name, "refused").inc()
            return await self.access.refuse(
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
            return await self.queries.list_clusters(user, channel, command.project, command.page)
        if isinstance(command, ShowCommand):
            return await self.queries.show(user, channel, command.project, command.cluster_id)
        if isinstance(command, UpdateCommand | ActionCommand):
            return await self._change(user, channel, command)
        if isinstance(command, AuditCommand):
            return await self.queries.audit(
                user, channel, command.project, command.limit, command.page
            )
        return await self.queries.help(user, channel)

    async def _change(
        self, user: str, channel: str, command: UpdateCommand | ActionCommand
    ) -> CommandOutcome:
        provider = self.access.provider_of(command.project)
        expected = "together" if isinstance(command, UpdateCommand) else "e2e"
        await self.access.require(user, command.project, channel, Role.operator)
        self.access.require_cluster_allowed(command.project, command.cluster_id)
        if provider != expected:
            verb = "update" if provider == "together" else "action"
            label = _PROVIDER_LABELS.get(provider, provider)
            raise Refusal(
                f"{command.project} is an {label} project: use `/gpu {verb}`.", kind="usage"
            )
        form = self.forms.request_for(channel, command)
        if form is not None:
            return form
        action = "update" if isinstance(command, UpdateCommand) else str(command.action)
        return await self.workflow.request_change(
            user=user,
            channel=channel,
            project=command.project,
            cluster_id=command.cluster_id,
            action=action,
            inputs=command.fields,
            reason=command.reason,
            command=f"{command.name} {command.project} {command.cluster_id}",
        )

    # -- forms ----------------------------------------------------------
    async def check_submission(
        self, user: str, kind: FormKind, metadata_raw: str | None, values: Mapping[str, str | None]
    ) -> SubmissionErrors | ReadySubmission:
        return await self.forms.check(user, kind, metadata_raw, values)

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
            return error(str(exc))
        if isinstance(command, ShowCommand):
            try:
                reply = await self.queries.show(user, channel, command.project, command.cluster_id)
            except Refusal as refusal:
                COMMANDS.labels("mention", "refused").inc()
                return await self.access.refuse(
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
            return await self.queries.help(user, channel)
        return notice(
            "In a thread I answer `@gpuops show <project> <cluster_id>` and `@gpuops help`. "
            f"For `{command.name}`, use `/gpu {command.name} …` in the channel.",
            public=True,
        )
