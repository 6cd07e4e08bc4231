"""The chat-neutral entry point: commands, forms, decisions and mentions.

Surfaces translate their payloads to these calls and render the answers; nothing here
knows a chat platform."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Unpack

from bot.core.access import Access, Refusal, invalid_change
from bot.core.agents.tokens import DEFAULT_CALLS_PER_MINUTE, Tokens
from bot.core.answers import Reply, error, notice, store_unavailable
from bot.core.ask.change import AgentOrigin, ChangeAsk
from bot.core.ask.forms import FormKind, FormRequest, Forms, SubmissionErrors
from bot.core.ask.grammar import (
    AuditCommand,
    ChangeCommand,
    Command,
    ListCommand,
    PolicyCommand,
    ShowCommand,
    SpendCommand,
    TimelineCommand,
    TokenCommand,
    UsageError,
    parse_command,
)
from bot.core.ask.reading import ReadCommand, Reader
from bot.core.authorizer import one_authorization
from bot.core.policy import Role
from bot.core.queries import Queries
from bot.core.requests.deciders import DecisionClick
from bot.core.requests.decisions import NeedsBreakGlass
from bot.core.requests.workflow import ChangeWorkflow
from bot.core.spend.report import SpendReport
from bot.core.staged.controls import PlanVerb
from bot.core.store import StoreUnavailable
from bot.core.store.tokens import TokenStore
from bot.core.timeline import Timeline, TimelineRequest
from bot.logs import log_context
from bot.metrics import COMMANDS
from bot.pacing import Pacer

log = logging.getLogger(__name__)

CommandOutcome = Reply | FormRequest | TimelineRequest
# Answered from the policy and the providers alone: they work while the store is down.
_READ_ONLY = frozenset({"help", "list", "show", "policy"})
DEDUP_SECONDS = 2.0  # a command's de-dup write is given up after this (its answer waits)


class CommandService:
    """Runs what people ask of gpuops: commands, form submissions, decisions, mentions.

    Queries answer read-only commands, Forms check change forms, the ChangeWorkflow runs
    change requests; every refusal is audited through Access."""

    def __init__(
        self,
        *,
        access: Access,
        workflow: ChangeWorkflow,
        calls_per_minute: int = DEFAULT_CALLS_PER_MINUTE,
    ) -> None:
        self.access = access
        self.workflow = workflow
        self.tokens = Tokens(
            access,
            TokenStore(access.store),
            calls_per_minute=calls_per_minute,
            clock=lambda: workflow.clock(),
        )
        self.queries = Queries(access)
        self.forms = Forms(access, lambda: workflow.clock())
        self.reader = Reader(self.forms)
        self.timeline = Timeline(access)
        self.spend = SpendReport(access, lambda: workflow.clock())
        # Commands' work after the ack, a few at a time (see bot.pacing).
        self.pacer = Pacer()
        self._late: set[asyncio.Task[bool]] = set()  # de-dup writes given up on

    async def first_delivery(self, key: str, command_text: str | None = None) -> bool:
        """True the first time a delivery key is seen (a redelivery must act once). With
        the store down or silent (no answer within DEDUP_SECONDS), a read-only command's
        ``command_text`` is answered anyway (a repeat of it is harmless); anything else
        raises StoreUnavailable."""
        try:
            return await self._remember_soon(key)
        except StoreUnavailable as exc:
            if not isinstance(command_text, str) or _command_word(command_text) not in _READ_ONLY:
                raise
            log.warning("answering a read-only command without de-duplication: %s", exc)
            return True

    async def _remember_soon(self, key: str) -> bool:
        # Left to finish alone when late: cancelling a query on a silent database would
        # itself wait on it.
        store = self.access.store
        task = asyncio.ensure_future(store.remember_delivery(key))
        done, _ = await asyncio.wait({task}, timeout=DEDUP_SECONDS)
        if task in done:
            return task.result()
        self._late.add(task)
        task.add_done_callback(_forget_late(self._late))
        raise StoreUnavailable(store.database, f"no answer within {DEDUP_SECONDS:g} s")

    async def decide(self, **click: Unpack[DecisionClick]) -> Reply | NeedsBreakGlass | None:
        """Approve, deny or cancel a request (ChangeWorkflow.decide)."""
        try:
            with one_authorization():
                return await self.workflow.decide(**click)
        except StoreUnavailable as exc:
            return _store_down("a decision", exc)

    async def confirm(self, *, user: str, channel: str, request_id: str) -> Reply:
        """Its requester confirms an agent's proposal (bot.core.requests.confirm)."""
        try:
            with one_authorization():
                return await self.workflow.confirm(
                    user=user, channel=channel, request_id=request_id
                )
        except StoreUnavailable as exc:
            return _store_down("a confirmation", exc)

    async def may_deny(self, *, user: str, channel: str, request_id: str) -> Reply | None:
        """None when the person may deny the request here (ask them why next), else why not."""
        try:
            return await self.workflow.decisions.may_deny(
                user=user, channel=channel, request_id=request_id
            )
        except StoreUnavailable as exc:
            return _store_down("a decision", exc)

    async def revert(self, *, user: str, channel: str, request_id: str) -> Reply:
        """Request the inverse of a change (ChangeWorkflow.revert)."""
        try:
            with one_authorization():
                return await self.workflow.revert(user=user, channel=channel, request_id=request_id)
        except StoreUnavailable as exc:
            return _store_down("a revert", exc)

    async def steer_plan(
        self, *, user: str, channel: str, request_id: str, verb: PlanVerb
    ) -> Reply:  # Pause, Resume, Abort, Revert to start (ChangeWorkflow.steer_plan)
        asked = {"user": user, "channel": channel, "request_id": request_id}
        try:
            with one_authorization():
                return await self.workflow.steer_plan(**asked, verb=verb)
        except StoreUnavailable as exc:
            return _store_down("a plan's button", exc)

    # -- commands ---------------------------------------------------------------------
    def read(self, channel: str, text: str) -> ReadCommand:
        """``/gpu text`` read once (bot.core.ask.reading): a surface learns from it whether
        a form opens before doing the work, then hands it to ``handle_command``."""
        return self.reader.read(channel, text)

    async def handle_command(
        self, user: str, channel: str, text: str | ReadCommand
    ) -> CommandOutcome:
        """Answer ``/gpu text`` (its text, or the command as ``read`` read it)."""
        read = self.read(channel, text) if isinstance(text, str) else text
        try:
            with one_authorization():
                return await self._handle_command(user, channel, read)
        except StoreUnavailable as exc:
            COMMANDS.labels("store", "unavailable").inc()
            return _store_down("a command", exc)

    async def handle_change(
        self,
        user: str,
        channel: str,
        read: ReadCommand,
        *,
        step: str | None = None,
        agent: AgentOrigin | None = None,
    ) -> Reply | FormRequest:
        """A change read elsewhere (a workflow step's inputs: ``Reader.read_change``; an
        agent's proposal), run as ``/gpu`` runs it; ``step`` is linked to the request it
        makes; an ``agent``'s waits for its requester's Confirm."""
        if not isinstance(read.command, ChangeCommand):
            raise TypeError("handle_change takes a change command")
        try:
            with one_authorization():
                outcome = await self._run(user, channel, read, read.command, step, agent)
        except StoreUnavailable as exc:
            COMMANDS.labels("store", "unavailable").inc()
            return _store_down("an agent's proposal" if agent else "a workflow step", exc)
        if not isinstance(outcome, Reply | FormRequest):
            raise TypeError(f"a change command answered with {type(outcome).__name__}")
        return outcome

    async def _handle_command(self, user: str, channel: str, read: ReadCommand) -> CommandOutcome:
        if read.command is None:
            COMMANDS.labels("usage", "refused").inc()
            return error(str(read.usage))
        return await self._run(user, channel, read, read.command)

    async def _run(
        self,
        user: str,
        channel: str,
        read: ReadCommand,
        command: Command,
        step: str | None = None,
        agent: AgentOrigin | None = None,
    ) -> CommandOutcome:
        try:
            with log_context(
                project=getattr(command, "project", None),
                cluster=getattr(command, "cluster_id", None),
            ):
                outcome = await self._dispatch(user, channel, read, command, step, agent)
        except Refusal as refusal:
            COMMANDS.labels(command.name, "refused").inc()
            return await self.access.refuse(
                user,
                channel,
                refusal,
                project=getattr(command, "project", None),
                cluster_id=getattr(command, "cluster_id", None),
                command=read.text[:200],
            )
        COMMANDS.labels(command.name, "ok").inc()
        return outcome

    async def _dispatch(
        self,
        user: str,
        channel: str,
        read: ReadCommand,
        command: Command,
        step: str | None = None,
        agent: AgentOrigin | None = None,
    ) -> CommandOutcome:
        if isinstance(command, ListCommand):
            return await self.queries.list_clusters(user, channel, command.project, command.page)
        if isinstance(command, ShowCommand):
            return await self.queries.show(user, channel, command.project, command.cluster_id)
        if isinstance(command, ChangeCommand):
            return await self._change(user, channel, read, command, step, agent)
        if isinstance(command, TimelineCommand):
            return await self.timeline.prepare(user, channel, command.since)
        if isinstance(command, PolicyCommand):
            now = self.workflow.clock()
            return await self.queries.policy(user, channel, command.project, now)
        if isinstance(command, TokenCommand):
            return await self._token(user, command)
        if isinstance(command, SpendCommand):
            return await self.spend.answer(user, channel, command.target, command.month)
        if isinstance(command, AuditCommand):
            return await self.queries.audit(
                user, channel, command.project, command.limit, command.page
            )
        return await self.queries.help(user, channel)

    async def _change(
        self,
        user: str,
        channel: str,
        read: ReadCommand,
        command: ChangeCommand,
        step: str | None = None,
        agent: AgentOrigin | None = None,
    ) -> CommandOutcome:
        """The one check of a change command (its role and cluster here, its grammar and
        fields as it was read), then its form or its ask to the workflow."""
        provider = self.access.provider_of(command.project)
        await self.access.require(user, command.project, channel, Role.operator)
        self.access.require_cluster_allowed(command.project, command.cluster_id)
        owner = self.access.catalog.descriptor(provider)
        if owner.verb != command.name:
            raise Refusal(
                f"{command.project} is {owner.article} {owner.title} project: "
                f"use `/gpu {owner.verb}`.",
                kind="usage",
            )
        if read.unknown:  # refused for every action alike, never dropped on the way to a form
            raise invalid_change(read.unknown)
        if read.form is not None:
            return read.form
        return await self.workflow.request_change(
            ChangeAsk.of_command(user, channel, command, step=step, agent=agent)
        )

    async def revoke_token(self, user: str, name: str) -> Reply:
        """Home's Revoke: the person's own token of that name (the refusal audited)."""
        try:
            return await self.tokens.revoke(user, name)
        except Refusal as refusal:
            return await self.access.refuse(user, "home", refusal, command="home revoke_token")
        except StoreUnavailable as exc:
            return _store_down("a token revoke", exc)

    async def _token(self, user: str, command: TokenCommand) -> Reply:
        if command.verb == "new":
            return await self.tokens.issue(user, command.ttl, command.token_name)
        if command.verb == "revoke":
            assert command.token_name is not None  # the grammar requires it
            return await self.tokens.revoke(user, command.token_name)
        return await self.tokens.list_reply(user)

    # -- forms ----------------------------------------------------------
    async def check_submission(
        self, user: str, kind: FormKind, metadata_raw: str | None, values: Mapping[str, str | None]
    ) -> SubmissionErrors | ChangeAsk:
        """A submitted form checked once: per-field errors, or the change it asks for."""
        return await self.forms.check(user, kind, metadata_raw, values)

    async def submit(self, ask: ChangeAsk) -> Reply:
        """Request the change a checked form asks for."""
        try:
            return await self.workflow.request_change(ask)
        except StoreUnavailable as exc:
            return _store_down("a form", exc)

    # -- mentions ---------------------------------------------------------------------
    async def handle_mention(self, user: str, channel: str, text: str) -> Reply | TimelineRequest:
        try:
            with one_authorization():
                return await self._handle_mention(user, channel, text)
        except StoreUnavailable as exc:
            return _store_down("a mention", exc)

    async def _handle_mention(self, user: str, channel: str, text: str) -> Reply | TimelineRequest:
        try:
            command = parse_command(text, self.access.catalog)
        except UsageError as exc:
            COMMANDS.labels("mention", "refused").inc()
            return error(str(exc))
        if isinstance(command, TimelineCommand):
            return await self._mentioned_timeline(user, channel, command)
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
            "In a thread I answer `@gpuops show <project> <cluster_id>`, "
            "`@gpuops timeline [since]` and `@gpuops help`. "
            f"For `{command.name}`, use `/gpu {command.name} …` in the channel.",
            public=True,
        )

    async def _mentioned_timeline(
        self, user: str, channel: str, command: TimelineCommand
    ) -> Reply | TimelineRequest:
        try:
            request = await self.timeline.prepare(user, channel, command.since)
        except Refusal as refusal:
            COMMANDS.labels("mention", "refused").inc()
            return await self.access.refuse(user, channel, refusal, command="mention timeline")
        COMMANDS.labels("mention", "ok").inc()
        return request


def _command_word(text: str) -> str:
    words = text.split()
    return words[0].lower() if words else "help"


def _store_down(what: str, exc: StoreUnavailable) -> Reply:
    log.warning("refused %s: %s", what, exc)
    return store_unavailable()


def _forget_late(late: set[asyncio.Task[bool]]) -> Callable[[asyncio.Task[bool]], None]:
    def forget(task: asyncio.Task[bool]) -> None:
        late.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("a late de-dup write failed too: %s", type(task.exception()).__name__)

    return forget
