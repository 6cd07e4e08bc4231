"""``gpuops demo``: a terminal Slack over the real app.

Everything runs in this process on 127.0.0.1 — both provider simulators, a stand-in for
Slack's Web API, and the bot in HTTP mode. What you type is sent to the bot as correctly
signed Slack requests, exactly as Slack would send them; what the bot posts to "Slack" is
drawn here as text. Like Errbot's text backend or Hubot's shell adapter, but through the
real handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from bot.core.policy import load_policy
from bot.core.store import TERMINAL_STATES
from bot.local.demo.render_text import (
    Button,
    ButtonBoard,
    TextRenderer,
    file_lines,
    initial_values,
)
from bot.local.demo.stack import (
    CHANNELS,
    DEMO_WATCH_EVERY_SECONDS,
    ROLES,
    USERGROUP_HANDLES,
    USERS,
    WATCHED_DEMO_POLICY,
    LocalStack,
    StackOptions,
    handlers_finished,
)
from bot.local.simulators.together_remediations import NewRemediation
from bot.local.slack.models import (
    BlockInputError,
    EphemeralPosted,
    ErrorShown,
    FunctionCompleted,
    MessageEdited,
    MessagePosted,
    SlackCall,
    View,
    ViewClosed,
    ViewOpened,
    ViewUpdated,
    block_elements,
    entry_from_input,
)
from bot.local.slack.sender import SenderInputError, SenderResult
from bot.metrics import WATCH_POLLS
from bot.providers.installed import load_catalog

TOUR = """\
gpuops demo — a local Slack workspace with the gpuops bot, over simulated Together AI and
E2E Networks clusters. Nothing leaves this machine; no accounts are needed.

You are dave (operator) in #incident. A short tour:
  1. /gpu show together-prod tc-h100-reserved        a cluster summary, posted in the channel
  2. /gpu update together-prod tc-h200-ondemand num_gpus=16
                                                     a scale-up: needs no approval, runs at once
  3. /gpu action e2e-delhi 101 restart_workers       a restart: waits for a second person
  4. as bob                                          become bob, an approver
  5. press the number shown on the Approve button    the change runs; the result lands in the thread
  6. degrade tc-h100-reserved, then remediate tc-h100-reserved
                                                     gpuops speaks first in #gpu-audit: a health
                                                     alert, then a node remediation bob can approve
                                                     (degrade 106: an E2E cluster, watched too)
  7. /gpu timeline 1h                                the channel's record as a Markdown file
  8. /gpu update together-prod tc-h200-ondemand num_gpus=128
                                                     refused: over the project's GPU limit
  9. /gpu update together-prod tc-h100-reserved reservation_end_time=2027-06-30T00:00:00Z
                                                     a decommission: two approvers (bob, carol)
 10. /gpu action e2e-delhi 101 restart_cluster       frozen; as alice add override="why"
                                                     (announced in #gpu-audit; then bob approves)
 11. /gpu update together-prod tc-h200-ondemand num_gpus=24 in=2h, then clock +2h
                                                     a scheduled change: sent at its time (the
                                                     demo's clock jumps ahead; production's never)
 12. press Revert on its result, then as bob approve  the revert: num_gpus back as it was
/gpu policy shows the guardrails.
Also try: /gpu update together-prod tc-h100-reserved (a form), /gpu list, /gpu help,
as erin (a viewer), as alice then /gpu audit.  Type `help` for the console's commands.
"""

HELP = """\
Console commands:
  /gpu …                 a slash command, as the current user in the current channel
  @gpuops …              mention the bot in the channel;  thread <n> @gpuops …  in msg n's thread
  <n>  or  press <n>     press button number n
  submit [field=value …] fill the open form (unset fields keep their values) and submit it
  cancel                 close the open form
  as <user>              switch user: alice (admin), bob, carol (approvers), dave (operator),
                         erin (viewer in #incident), mallory (no access)
  in <channel>           switch channel: incident, gpu-audit, random
  home                   open your App Home tab (its buttons get numbers like the rest)
  users                  who is who;  wait <seconds>  let background work run
  degrade <cluster> [status] / restore <cluster>      a cluster turns unhealthy / healthy
  remediate <cluster>    Together proposes a node remediation (it awaits approval)
  agent <project> <cluster> [<action>] [field=value …]   a scripted MCP client runs
                         `gpuops mcp` over stdio as you and proposes the change: it
                         waits for your Confirm in the channel
  step <project> <cluster> <change…>   a Workflow Builder step (request_gpu_change) asks
                         for the change as you, here: e.g. step together-prod c-1 num_gpus=16
  clock +<N>m|+<N>h      the demo's clock jumps ahead (scheduled changes come due); the
                         demo only: a production gpuops always runs on the real time
  expect <text> / expect-not <text>   (scripts) check what the last step showed
  help, quit
"""

_QUIET_SECONDS = 0.35
_CLOCK_JUMP = re.compile(r"^\+([0-9]{1,4})([mh])$")
_HOME_PREFIX = "home:"  # the "channel" of a button drawn from a Home tab
_HOME_TS = "home"  # … and its "message"
_SETTLE_LIMIT = 10.0
_WATCH_LIMIT = 30.0  # the longest a provider event waits for the watcher to have looked
# A script's step waits this long at most for what it expects (GPUOPS_DEMO_WAIT_SECONDS
# shortens it: a script expected to fail need not wait the whole limit for each failure).
WAIT_ENV = "GPUOPS_DEMO_WAIT_SECONDS"


def wait_limit() -> float:
    try:
        return max(float(os.environ.get(WAIT_ENV, _WATCH_LIMIT)), 0.0)
    except ValueError:
        return _WATCH_LIMIT


class DemoConsole:
    def __init__(self, stack: LocalStack, console: Console, *, interactive: bool) -> None:
        self.stack = stack
        self.console = console
        self.interactive = interactive
        self.user = "U04DAVE"
        self.channel = "C0INCIDENT"
        self.board = ButtonBoard()
        self.text = TextRenderer(USERS, CHANNELS, USERGROUP_HANDLES)
        self.roots: dict[tuple[str, str], int] = {}
        self.transcript: list[str] = []
        self.mark = 0
        self.failures: list[str] = []
        self.quitting = False  # "quit" typed at a form prompt: close it, then stop
        self.steps = 0
        self.clock_ahead = timedelta()  # how far `clock` moved the demo bot's clock
        self._last_event = 0.0
        self._emitted = asyncio.Event()  # set by every line shown
        self._handled_views: set[tuple[str, str]] = set()
        self._shown: dict[tuple[str, str], list[str]] = {}
        stack.slack.subscribe(self.on_event)

    # -- output -------------------------------------------------------------------------
    def emit(self, line: str, style: str | None = None) -> None:
        self.transcript.append(line)
        self._emitted.set()
        self.console.print(Text(line, style=style or ""), soft_wrap=True)

    def _where(self, channel: str, ts: str, thread_ts: str | None) -> str:
        name = _channel_label(channel)
        if thread_ts and thread_ts != ts:
            root = self.roots.get((channel, thread_ts))
            return f"{name} ↳ thread of msg {root}" if root else f"{name} ↳ thread"
        number = self.roots.setdefault((channel, ts), len(self.roots) + 1)
        return f"{name} · msg {number}"

    def on_event(self, event: Any) -> None:
        self._last_event = asyncio.get_running_loop().time()
        if isinstance(event, MessagePosted | MessageEdited):
            message = event.message
            if message.source == "user":
                return
            where = self._where(message.channel, message.ts, message.thread_ts)
            edited = isinstance(event, MessageEdited)
            self._show(
                f"[{where}] gpuops {'updated' if edited else 'says'}:",
                message.blocks,
                message.text,
                channel=message.channel,
                ts=message.ts,
                thread_ts=message.thread_ts,
                style="dim" if edited else "bold",
                only_changes=edited,
            )
            if not edited:
                self._show_files(message.files)
        elif isinstance(event, EphemeralPosted):
            eph = event.ephemeral
            if eph.user != self.user:
                return
            where = _channel_label(eph.channel)
            self._show(
                f"[{where} · only visible to you] gpuops:",
                eph.blocks,
                eph.text,
                channel=eph.channel,
                ts=eph.ts,
                thread_ts=eph.thread_ts,
                style="yellow",
            )
        elif isinstance(event, ViewOpened | ViewUpdated) and event.view.user == self.user:
            self._show_view(event.view)
        elif isinstance(event, ViewClosed) and event.view.user == self.user:
            self.emit(f"(form closed: {event.view.closed_reason or 'done'})", "dim")
        elif isinstance(event, ErrorShown):  # the bot answered Slack too late or failed
            self.fail(f"Slack showed {event.user} an error ({event.where}): {event.text}")
        elif isinstance(event, FunctionCompleted):
            self._show_step_end(event)

    def _show_step_end(self, event: FunctionCompleted) -> None:
        head = f"[workflow step {event.callback_id}]"
        if event.success and event.outputs is not None:
            outputs = event.outputs
            self.emit(f"{head} ended: {outputs.get('state')} — {outputs.get('summary')}", "green")
        else:
            self.emit(f"{head} failed: {event.error}", "red")

    def _show(
        self,
        head: str,
        blocks: list[dict[str, Any]] | None,
        text: str,
        *,
        channel: str,
        ts: str,
        thread_ts: str | None,
        style: str,
        only_changes: bool = False,
    ) -> None:
        lines = self.text.blocks(
            blocks, text, self.board, channel=channel, ts=ts, thread_ts=thread_ts or ts
        )
        before = self._shown.get((channel, ts), [])
        self._shown[(channel, ts)] = lines
        if only_changes and before:
            lines = [line for line in lines if line not in before]
            if not lines:
                return
        self.emit(head, style)
        for line in lines:
            self.emit(f"    {line}")

    def _show_files(self, files: list[dict[str, Any]]) -> None:
        for shared in files:
            uploaded = self.stack.slack.files.get(str(shared.get("id")))
            if uploaded is not None:
                for line in file_lines(uploaded.filename, uploaded.text):
                    self.emit(f"    {line}")

    def _show_view(self, view: View) -> None:
        values = {**initial_values(view.view), **_entered_text(view)}
        for line in self.text.view(view.view, view.errors, values):
            self.emit(f"    {line}", "cyan")
        has_inputs = any(b.get("type") == "input" for b in view.blocks)
        if view.errors and self.interactive:
            self.emit("    (fix the marked fields)", "red")
        elif view.errors:
            self.emit("    (fix the marked fields: submit field=value …, or cancel)", "red")
        elif has_inputs and not self.interactive:
            self.emit("    (fill it with: submit field=value …   or: cancel)", "dim")

    # -- steps --------------------------------------------------------------------------
    async def settle(self) -> None:
        """Wait until the bot's listeners have finished (they work on after acking: a form
        opens after the command's ack) and it has then been quiet for a moment."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        await handlers_finished(within=_SETTLE_LIMIT)
        self._last_event = max(self._last_event, started)
        while loop.time() - started < _SETTLE_LIMIT:
            await asyncio.sleep(0.05)
            if loop.time() - self._last_event >= _QUIET_SECONDS:
                return

    def fail(self, why: str) -> None:
        self.failures.append(why)
        self.emit(f"✗ {why}", "red")

    def _check(self, result: SenderResult | None, what: str) -> None:
        if result is not None and not result.ok:
            self.fail(f"{what}: the bot answered HTTP {result.status}")

    async def run_line(self, line: str) -> bool:
        """Run one console line; False when the console should stop."""
        line = line.strip()
        if not line or line.startswith("#"):
            return True
        word, _, rest = line.partition(" ")
        word = word.lower()
        if word in ("quit", "exit"):
            return False
        if word in ("expect", "expect-not"):
            await self._expect(rest.strip(), present=word == "expect")
            return True
        self.steps += 1
        self.mark = len(self.transcript)
        try:
            await self._dispatch(word, rest.strip(), line)
        except SenderInputError as exc:
            self.fail(f"Slack would not allow that: {exc}")
        await self.settle()
        if self.interactive:
            await self._maybe_fill_form()
        return not self.quitting

    async def _dispatch(self, word: str, rest: str, line: str) -> None:
        if line.startswith("/"):
            command, _, text = line.partition(" ")
            result = await self.stack.sender.command(self.user, self.channel, text, command=command)
            self._check(result, command)
        elif word == "@gpuops":
            await self._mention(rest, None)
        elif word == "thread":
            number, _, text = rest.partition(" ")
            await self._mention(text.removeprefix("@gpuops").strip(), number)
        elif word.isdigit() or word == "press":
            await self.press(rest if word == "press" else word)
        elif word == "submit":
            await self.submit(_assignments(rest))
        elif word == "cancel":
            await self.cancel_form()
        elif word == "as":
            self.switch_user(rest)
        elif word == "in":
            self.switch_channel(rest)
        elif word == "home":
            await self.open_home()
        elif word == "users":
            self._users()
        elif word == "wait":
            await self._wait(rest)
        elif word in ("degrade", "restore", "remediate"):
            polls = _watch_polls()
            provider = self.provider_event(word, rest)
            if provider is not None:
                await self._watched_since(provider, polls)
        elif word == "step":
            await self.run_step(rest)
        elif word == "agent":
            await self.run_agent(rest)
        elif word == "clock":
            await self.jump_clock(rest)
        elif word == "help":
            self.console.print(HELP, markup=False, highlight=False)
        else:
            self.fail(f"unknown console command {word!r} (type help)")

    async def _mention(self, text: str, thread_number: str | None) -> None:
        thread_ts = None
        if thread_number is not None:
            wanted = {n: key for key, n in self.roots.items()}
            key = wanted.get(int(thread_number)) if thread_number.isdigit() else None
            if key is None:
                self.fail(f"there is no msg {thread_number}")
                return
            thread_ts = key[1]
        await self.stack.slack.post_user_message(
            self.channel, self.user, f"<@UBOT> {text}", thread_ts=thread_ts
        )
        result = await self.stack.sender.mention(
            self.user, self.channel, f"<@UBOT> {text}", thread_ts=thread_ts
        )
        self._check(result, "mention")

    async def run_step(self, rest: str) -> None:
        """A workflow reaches gpuops's step with the current user and channel as inputs."""
        parts = rest.split(maxsplit=2)
        if len(parts) < 3:
            self.fail("usage: step <project> <cluster_id> <change…>")
            return
        project, cluster_id, change = parts
        who, where = USERS[self.user], CHANNELS.get(self.channel, self.channel)
        self.emit(f"(a workflow runs the step request_gpu_change for {who} in #{where})", "dim")
        inputs = {
            "project": project,
            "cluster_id": cluster_id,
            "change": change,
            "requester": self.user,
            "channel": self.channel,
        }
        _, result = await self.stack.sender.function_executed("request_gpu_change", inputs)
        self._check(result, "the workflow step")

    async def run_agent(self, rest: str) -> None:
        """An agent proposes a change as the current user, over MCP (bot.local.demo.agent)."""
        from bot.local.demo.agent import parse_proposal, run_agent

        try:
            proposal = parse_proposal(rest, self.channel)
        except ValueError as exc:
            self.fail(str(exc))
            return
        if await run_agent(self.stack, self.user, proposal, lambda t: self.emit(t, "dim")) is None:
            self.fail("the agent's proposal was refused")

    async def open_home(self) -> None:
        """Open the current user's App Home tab and draw it as published for them."""
        before = self.stack.slack.home_of(self.user)
        seen = len(before.history) + 1 if before else 0
        calls = len(self.stack.slack.calls_to("views.publish"))
        result = await self.stack.sender.app_home_opened(self.user)
        self._check(result, "opening the Home tab")

        def published() -> View | SlackCall | None:
            home = self.stack.slack.home_of(self.user)
            if home is not None and len(home.history) + 1 > seen:
                return home
            refused = self.stack.slack.calls_to("views.publish")[calls:]
            return next((c for c in refused if not c.ok and c.error != "ratelimited"), None)

        try:
            home: View | SlackCall = await self.stack.slack.wait_for(
                published, within=_SETTLE_LIMIT
            )
        except TimeoutError:
            self.fail("the Home tab was not published (the bot sent nothing)")
            return
        if isinstance(home, SlackCall):
            self.fail(f"the Home tab was not published: Slack refused it ({home.error})")
            return
        self.emit(f"[Home tab of {USERS[self.user]}]", "bold")
        where = _HOME_PREFIX + self.user
        # One "message" per person's tab: a button keeps its number when the tab is redrawn.
        for line in self.text.blocks(
            home.blocks, "", self.board, channel=where, ts=_HOME_TS, thread_ts=None
        ):
            self.emit(f"    {line}", "cyan")

    async def press(self, which: str) -> None:
        number = int(which) if which.strip().isdigit() else None
        if number is not None and not self.interactive:  # a script's button may be on its way
            await self._wait_until(lambda: number in self.board.buttons)
        button = self.board.buttons.get(number) if number is not None else None
        if button is None:
            self.fail(f"there is no button {which!r}")
            return
        self.emit(f"({USERS[self.user]} presses {button.label})", "dim")
        if button.channel.startswith(_HOME_PREFIX):
            await self._press_on_home(button.channel.removeprefix(_HOME_PREFIX), button)
            return
        result = await self.stack.sender.block_action(
            self.user,
            button.channel,
            action_id=button.action_id,
            value=button.value,
            message_ts=button.message_ts,
            thread_ts=button.thread_ts,
        )
        self._check(result, f"button {button.label}")

    async def _press_on_home(self, owner: str, button: Button) -> None:
        if owner != self.user:
            self.fail(
                f"button {button.number} is on {USERS.get(owner, owner)}'s Home tab, not "
                f"{USERS[self.user]}'s: type home to draw yours"
            )
            return
        if not _on_home(self.stack.slack.home_of(owner), button):
            self.fail(
                f"button {button.number} ({button.label}) is no longer on your Home tab: "
                "type home to draw it as it is now"
            )
            return
        result = await self.stack.sender.home_action(
            self.user, action_id=button.action_id, value=button.value
        )
        self._check(result, f"button {button.label} on the Home tab")

    def _open_view(self) -> View | None:
        return self.stack.slack.last_view_for(self.user, open_only=True)

    async def submit(self, values: dict[str, str]) -> None:
        view = self._open_view()
        if view is None:
            self.fail("no form is open")
            return
        action = values.pop("action", None)
        if action is not None and _has_dispatch_select(view, "action"):
            result = await self.stack.sender.view_block_action(
                self.user, view.id, action_id="action", block_id="action", selected_value=action
            )
            self._check(result, "choosing the action")
            await self.settle()
            view = self._open_view()
            if view is None:
                self.fail("the form closed")
                return
        self._handled_views.add((view.id, view.hash))
        submitted: dict[str, Any] = {k: (v or None) for k, v in values.items()}
        result = await self.stack.sender.view_submission(self.user, view.id, submitted)
        self._check(result, "submitting the form")

    async def cancel_form(self) -> None:
        view = self._open_view()
        if view is None:
            self.fail("no form is open")
            return
        await self.stack.sender.view_closed(self.user, view.id)

    def switch_user(self, who: str) -> None:
        key = who.strip().lstrip("@").lower()
        for user_id, name in USERS.items():
            if key in (name, user_id.lower()):
                self.user = user_id
                self.emit(f"(you are now {name}: {ROLES[user_id]})", "dim")
                return
        self.fail(f"no such user {who!r}; try: {', '.join(USERS.values())}")

    def switch_channel(self, where: str) -> None:
        key = where.strip().lstrip("#").lower()
        for channel_id, name in CHANNELS.items():
            if key in (name, channel_id.lower()):
                self.channel = channel_id
                self.emit(f"(you are now in #{name})", "dim")
                return
        self.fail(f"no such channel {where!r}; try: {', '.join(CHANNELS.values())}")

    def _users(self) -> None:
        for user_id, name in USERS.items():
            marker = "→" if user_id == self.user else " "
            self.emit(f" {marker} {name:<8} {user_id:<11} {ROLES[user_id]}")

    def provider_event(self, word: str, rest: str) -> str | None:
        """Something happens at a provider (its simulator's /_sim/ controls): a cluster
        degrades or recovers, or Together proposes a node remediation. The provider, or
        None if it could not."""
        cluster_id, _, status = rest.partition(" ")
        simulators = {"together": self.stack.together, "e2e": self.stack.e2e}
        if word == "remediate":
            if cluster_id not in self.stack.together.clusters:
                self.fail(f"no Together cluster {cluster_id!r}")
                return None
            created = self.stack.together.create_remediation(cluster_id, NewRemediation())
            self.emit(f"(Together proposes remediation {created['id']} on {cluster_id})", "dim")
            return "together"
        if word == "degrade":
            changed = (
                p for p, sim in simulators.items() if sim.degrade(cluster_id, status or None)
            )
        else:
            changed = (p for p, sim in simulators.items() if sim.restore(cluster_id))
        provider = next(changed, None)
        if provider is None:
            self.fail(f"no cluster {cluster_id!r}")
            return None
        self.emit(
            f"({cluster_id} {'degrades' if word == 'degrade' else 'recovers'} at its provider)",
            "dim",
        )
        return provider

    async def _watched_since(self, provider: str, polls: dict[str, float]) -> None:
        """Wait until the watcher has finished two polls of ``provider`` after the change
        (the second began after it, and said what it saw), or _WATCH_LIMIT seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _WATCH_LIMIT
        while _watch_polls().get(provider, 0) < polls.get(provider, 0) + 2:
            if loop.time() >= deadline:
                self.fail(f"the watcher did not poll {provider} within {_WATCH_LIMIT:.0f} s")
                return
            await asyncio.sleep(DEMO_WATCH_EVERY_SECONDS / 10)

    async def jump_clock(self, rest: str) -> None:
        """Move the demo bot's clock ahead and let its scheduler look at once."""
        match = _CLOCK_JUMP.match(rest.strip())
        if match is None:
            self.fail(f"clock takes +<N>m or +<N>h, not {rest!r}")
            return
        self.clock_ahead += timedelta(
            minutes=int(match.group(1)) * (60 if match.group(2) == "h" else 1)
        )
        ahead = self.clock_ahead
        workflow = self.stack.runtime.workflow
        workflow.clock = lambda: datetime.now(UTC) + ahead
        self.emit(f"(the demo's clock is now {ahead} ahead)", "dim")
        due = [r.id for r in await self.stack.runtime.store.list_due(workflow.clock())]
        await workflow.scheduler.run_due()
        copies = self.stack.runtime.workflow.deps.access.oncall_copies
        if copies is not None:  # a pending request waited long enough: its next level
            await copies.escalate_due()
        await self._ended(due)

    async def _ended(self, request_ids: list[str]) -> None:
        """Wait (up to the settle limit) for the changes the scheduler started to end: the
        step's output is theirs, however long the provider takes to answer."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        store = self.stack.runtime.store
        while loop.time() - started < _SETTLE_LIMIT:
            records = [await store.get_request(request_id) for request_id in request_ids]
            if all(r is None or r.state in TERMINAL_STATES for r in records):
                return
            await asyncio.sleep(0.05)

    async def _wait(self, rest: str) -> None:
        try:
            seconds = min(max(float(rest or "1"), 0.0), 30.0)
        except ValueError:
            self.fail(f"wait takes seconds, not {rest!r}")
            return
        await asyncio.sleep(seconds)

    async def _expect(self, needle: str, *, present: bool) -> None:
        """Check the last step's output. What is expected may still be on its way (a busy
        machine delays the bot's work past the quiet moment ``settle`` waits for), so it is
        awaited up to the watch limit; what is not expected is judged on what came."""
        needle = needle.strip().strip('"')

        def shown() -> bool:
            return needle in "\n".join(self.transcript[self.mark :])

        if present:
            await self._wait_until(shown)
        if shown() != present:
            self.fail(f"expected {'' if present else 'no '}{needle!r} in the last step's output")

    async def _wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait for what the stack's events make true (each event is a line or a button),
        at most the watch limit."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_limit()):
                while not condition():
                    self._emitted.clear()
                    await self._emitted.wait()

    # -- interactive forms ----------------------------------------------------------------
    async def _maybe_fill_form(self) -> None:
        """Ask for each open form's inputs, again while the app marks fields as wrong."""
        view = self._open_view()
        asked: str | None = None
        while view is not None and (
            (view.id, view.hash) not in self._handled_views or (view.id == asked and view.errors)
        ):
            self._handled_views.add((view.id, view.hash))
            asked = view.id
            try:
                await self._fill_once(view)
            except SenderInputError as exc:  # Slack's client would not send it: ask again
                self.emit(f"    ✗ Slack would not take that: {exc}", "red")
                current = self._open_view()
                if current is not None:
                    self._handled_views.discard((current.id, current.hash))
            await self.settle()
            if self.quitting:
                return
            view = self._open_view()

    async def _fill_once(self, view: View) -> None:
        values = await self._ask_fields(view)
        if values is None:
            await self.cancel_form()
        else:
            await self.submit(values)

    async def _ask_fields(
        self, view: View, chosen: frozenset[str] = frozenset()
    ) -> dict[str, str] | None:
        """Ask each input of the form (but those ``chosen`` already); None to cancel."""
        self.emit("    Fill the form: Enter keeps a value, '-' clears it, 'cancel' closes.", "dim")
        current = {**initial_values(view.view), **_entered_text(view)}
        if view.errors:  # asked again: the action chosen stays (cancel to choose another)
            chosen |= {b for b, value in current.items() if value and _has_dispatch_select(view, b)}
        values: dict[str, str] = {}
        for block in view.blocks:
            block_id = str(block.get("block_id"))
            if block.get("type") != "input" or block_id in chosen:
                continue
            answer = await self._ask_field(block, current.get(block_id, ""))
            if answer is None:
                return None
            if block.get("dispatch_action") and answer and answer != current.get(block_id):
                return await self._dispatch_and_ask(view, block_id, answer, chosen)
            if answer == "-":
                values[block_id] = ""
            elif answer:
                values[block_id] = answer
        answer = (await ask("  submit? [Y/n] ")).strip().lower()
        if answer == "quit":
            self.quitting = True
        return None if answer in ("n", "no", "cancel", "quit") else values

    async def _ask_field(self, block: dict[str, Any], current: str) -> str | None:
        """One input's answer, asked again until Slack's client would take it; None when
        the person cancels (or quits: the form closes, then the console)."""
        block_id = str(block.get("block_id"))
        while True:
            answer = (await ask(f"  {block_id} [{current}]: ")).strip()
            if answer in ("cancel", "quit"):
                self.quitting = answer == "quit"
                return None
            problem = _field_problem(block, answer, current)
            if problem is None:
                return answer
            self.emit(f"    ✗ {problem} — type it again, or cancel", "red")

    async def _dispatch_and_ask(
        self, view: View, block_id: str, answer: str, chosen: frozenset[str]
    ) -> dict[str, str] | None:
        """A select that changes the form (the action): tell the app, then ask the new
        form's other inputs (not the select just chosen)."""
        result = await self.stack.sender.view_block_action(
            self.user, view.id, action_id=block_id, block_id=block_id, selected_value=answer
        )
        self._check(result, f"choosing {answer}")
        await self.settle()
        updated = self._open_view()
        if updated is None:
            return None
        self._handled_views.add((updated.id, updated.hash))
        return await self._ask_fields(updated, chosen | {block_id})


def _field_problem(block: Mapping[str, Any], answer: str, current: str) -> str | None:
    """Why Slack's client would not take ``answer`` in this input (None if it would): a
    required input left empty, a choice not on the list, text in a number input…"""
    block_id = str(block.get("block_id"))
    required = not block.get("optional")
    if answer == "-" or (not answer and not current):
        return f"{block_id} is required" if required else None
    if not answer:
        return None
    element = block.get("element")
    if not isinstance(element, Mapping):
        return None
    try:
        entry_from_input(element, answer)
    except BlockInputError as exc:
        return f"{block_id}: {exc}"
    return None


def _watch_polls() -> dict[str, float]:
    """Polls the watcher finished, per provider, whatever their outcome."""
    done: dict[str, float] = {}
    for metric in WATCH_POLLS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                provider = sample.labels["provider"]
                done[provider] = done.get(provider, 0) + sample.value
    return done


def _channel_label(channel: str) -> str:
    """``#incident``; a DM (``D…``, the stand-in's DM ids) as whose DM it is."""
    if channel in CHANNELS or not channel.startswith("D"):
        return "#" + CHANNELS.get(channel, channel)
    user = "U" + channel[1:]
    return f"DM with {USERS.get(user, user)}"


def _on_home(home: View | None, button: Button) -> bool:
    """Whether the tab as last published still has this button."""
    return home is not None and any(
        element.get("action_id") == button.action_id and element.get("value") == button.value
        for block in home.blocks
        for element in block_elements(block)
    )


def _entered_text(view: View) -> dict[str, str]:
    entered: dict[str, str] = {}
    for block_id, actions in view.entered.items():
        for entry in actions.values():
            value = entry.get("value")
            option = entry.get("selected_option")
            if isinstance(value, str):
                entered[block_id] = value
            elif isinstance(option, dict):
                entered[block_id] = str(option.get("value", ""))
    return entered


def _has_dispatch_select(view: View, block_id: str) -> bool:
    return any(b.get("block_id") == block_id and b.get("dispatch_action") for b in view.blocks)


def _assignments(rest: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for word in shlex.split(rest):
        name, sep, value = word.partition("=")
        if sep:
            values[name] = value
    return values


_session: Any = None


async def ask(prompt: str) -> str:
    """One line from the person: prompt_toolkit (editing, history) on a terminal, plain
    stdin otherwise. EOF reads as 'quit'."""
    global _session
    if sys.stdin.isatty():
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory
        from prompt_toolkit.patch_stdout import patch_stdout

        if _session is None:
            _session = PromptSession(history=InMemoryHistory())
        try:
            with patch_stdout(raw=True):
                return str(await _session.prompt_async(prompt))
        except (EOFError, KeyboardInterrupt):
            return "quit"
    print(prompt, end="", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    return line if line else "quit"


def policy_banner(path: Path, logs: Path | None = None) -> str:
    """Which policy the demo runs with (``path``, the file the bot reads and reloads), what
    in it a newcomer trips over, and where the bot's log lines go (``logs``)."""
    policy = load_policy(path, load_catalog())
    projects = ", ".join(
        f"{name} ({project.provider}{', watched' if project.watch else ''})"
        for name, project in policy.projects.items()
    )
    glass = (
        "on (an admin approving their own request is asked for a reason)"
        if policy.approvals.break_glass
        else "off"
    )
    lines = [
        f"Policy in force: {path}",
        "  a copy of examples/demo-policy.yml: edit and save it to try a live reload "
        "(or type /gpu policy to see what is in force)",
        f"  projects: {projects}",
        f"  approvals expire after {policy.approvals.expire_after_minutes} min; "
        f"break glass {glass}",
    ]
    if logs is not None:
        lines.append(f"Bot log (reloads, warnings): {logs}")
    return "\n".join(lines)


@contextlib.contextmanager
def logs_to_file(path: Path) -> Iterator[None]:
    """Send the process's log lines to ``path`` instead of the terminal while the demo
    runs, so that a reload's or a warning's line never lands in the middle of the chat."""
    root = logging.getLogger()
    moved = [h for h in root.handlers if type(h) is logging.StreamHandler]
    to_file = logging.FileHandler(path, encoding="utf-8")
    if moved:
        to_file.setFormatter(moved[0].formatter)
    for handler in moved:
        root.removeHandler(handler)
    root.addHandler(to_file)
    try:
        yield
    finally:
        root.removeHandler(to_file)
        to_file.close()
        for handler in moved:
            root.addHandler(handler)


def read_script(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


def demo_night() -> datetime:
    """The on-call simulators' clock in the demo: 03:00 UTC today, Bob's night shift (level 1),
    Alice behind him (level 2), whatever the time of the demo."""
    return datetime.now(UTC).replace(hour=3, minute=0, second=0, microsecond=0)


async def run_demo(*, script: str | None = None, tour: bool = True, socket: bool = False) -> int:
    """Start the local stack and run the console; the exit code of ``gpuops demo``. With
    ``socket`` the bot is connected over Socket Mode instead of receiving HTTP requests."""
    interactive = script is None
    console = (
        Console(highlight=False, soft_wrap=True)
        if interactive
        else Console(color_system=None, highlight=False, soft_wrap=True, width=200)
    )
    lines: list[str] = []
    if script is not None:
        try:
            lines = read_script(script)
        except OSError as exc:
            console.print(f"gpuops demo: cannot read {script}: {exc.strerror}", markup=False)
            return 2
    stack = await LocalStack.start(
        StackOptions(
            policy_yaml=WATCHED_DEMO_POLICY,
            poll_seconds=1.0,
            transition_seconds=4.0,
            extra_settings={"gpuops_watch_every_seconds": DEMO_WATCH_EVERY_SECONDS},
            oncall_now=demo_night(),
        )
    )
    demo = DemoConsole(stack, console, interactive=interactive)
    log_file = stack.workdir / "gpuops.log"
    try:
        with logs_to_file(log_file):
            await _run_console(demo, console, lines, interactive, tour, socket, log_file)
    finally:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(15):
                await stack.runtime.workflow.drain()
        await stack.stop()
    if not interactive:
        console.print(script_verdict(demo.steps, len(demo.failures)), markup=False)
    # A typo in a session at the keyboard is shown and forgotten; a script's failures count.
    return 1 if demo.failures and not interactive else 0


async def _run_console(
    demo: DemoConsole,
    console: Console,
    lines: list[str],
    interactive: bool,
    tour: bool,
    socket: bool,
    log_file: Path,
) -> None:
    """The banner, the tour, then the chat at the keyboard or the script's lines."""
    stack = demo.stack
    banner = policy_banner(stack.runtime.settings.gpuops_policy, log_file)
    console.print(banner, markup=False, highlight=False)
    if socket:
        await stack.use_socket_mode()
        console.print("(the bot is connected over Socket Mode)", markup=False)
    if tour:
        console.print(TOUR, markup=False, highlight=False)
    if interactive:
        await _interactive(demo)
    else:
        await _scripted(demo, lines)


def script_verdict(steps: int, failures: int) -> str:
    """``script: 1 step, all passed`` — the last line of a scripted demo."""
    verdict = "all passed" if not failures else f"{failures} failed"
    return f"script: {steps} step{'' if steps == 1 else 's'}, {verdict}"


async def _interactive(demo: DemoConsole) -> None:
    while True:
        name = USERS[demo.user]
        line = await ask(f"{name} in #{CHANNELS[demo.channel]}> ")
        if not await demo.run_line(line):
            return


async def _scripted(demo: DemoConsole, lines: list[str]) -> None:
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and not stripped.startswith("expect"):
            demo.emit(f"{USERS[demo.user]} in #{CHANNELS[demo.channel]}> {stripped}", "green")
        if not await demo.run_line(line):
            return
