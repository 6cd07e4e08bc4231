"""Change forms as data: the fields a form shows, and checking a submitted one.

Surfaces build the form itself (in Slack, a modal: bot.slack.render.forms.change_form)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from bot.core.access import Access, Refusal
from bot.core.ask.change import ChangeAsk
from bot.core.ask.form_values import (
    CONTEXT_KEYS,
    changed_inputs,
    parse_metadata,
    parse_shown,
    shown_values,
)
from bot.core.ask.grammar import ChangeCommand
from bot.core.ask.justification import justification_problem
from bot.core.guardrails.freezes import freezes_soon, frozen_text
from bot.core.policy import Role
from bot.core.registry import MissingCredential
from bot.core.requests.schedule import Schedule, ScheduleError, parse_at
from bot.providers.base import ClusterState, ClusterSummary, FieldSpec, unknown_field

# "single": the form of a provider with one action (its verb asks for it); "choice": the form
# of one whose actions are chosen in it. (Slack's callback ids for them are SPEC's.)
FormKind = Literal["single", "choice"]
SUBMIT_TIMEOUT = 2.0  # seconds to re-fetch a cluster while the surface waits to acknowledge


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class FormRequest:
    """A command that lacks parameters: ask for them in a form."""

    kind: FormKind
    project: str
    cluster_id: str
    channel: str
    action: str | None = None
    prefill: dict[str, str] = field(default_factory=dict)
    reason: str | None = None
    focus: str | None = None  # the field the cursor starts in (a reminder's "extend")

    def metadata(self) -> dict[str, str]:
        where = {"project": self.project, "cluster_id": self.cluster_id, "channel": self.channel}
        return {**where, "focus": self.focus} if self.focus else where


@dataclass(frozen=True)
class FormView:
    """What a form shows: the cluster, the action (and the choice of actions), its fields
    with their current or typed values, and the context to keep with it."""

    kind: FormKind
    summary: ClusterSummary
    actions: list[str]
    action: str | None
    specs: list[FieldSpec]
    values: dict[str, Any]
    metadata: dict[str, Any]
    title: str  # the provider's form title (its descriptor's)
    freeze: str | None = None  # for an admin during a freeze: what the override input says


@dataclass(frozen=True)
class FormMessage:
    """A form that cannot be filled in (a refusal): only this text."""

    kind: FormKind
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class SubmissionErrors:
    """Per field, what is wrong with a submitted form."""

    errors: dict[str, str]


class Forms:
    """Opens, refreshes and checks change forms for a person."""

    def __init__(self, access: Access, clock: Callable[[], datetime] = _utc_now) -> None:
        self.access = access
        self.clock = clock  # the run_at bounds are checked against it
        self._states: dict[tuple[str, str], ClusterState] = {}

    async def _freeze_for(self, user: str, project: str, channel: str) -> str | None:
        """The freeze an admin may override in this form, in words; None for anyone else
        or when no freeze holds on the project now."""
        now = self.clock()
        windows = [
            w for w in freezes_soon(self.access.policy.freezes, project, now) if w.start <= now
        ]
        if not windows:
            return None
        decision = await self.access.authorizer.check(user, project, channel, Role.admin)
        if not decision.allowed:
            return None
        return f"{frozen_text(project, windows[0])}; give a reason to go ahead."

    def fields_of(self, project: str, action: str) -> list[FieldSpec]:
        """The fields of ``action`` in ``project``; none for an unknown action or project."""
        try:
            adapter = self.access.adapter_for(project)
            return adapter.fields_for(action) if action in adapter.actions() else []
        except (KeyError, MissingCredential):
            return []

    def unknown_fields(
        self, project: str, action: str | None, given: Mapping[str, object]
    ) -> dict[str, str]:
        """Per given field that ``action`` does not take (or no action, when none is
        chosen yet), what is wrong with it — refused, never silently dropped."""
        try:
            adapter = self.access.adapter_for(project)
            actions = adapter.actions()
        except (KeyError, MissingCredential):
            return {}
        if action is not None and action not in actions:
            return {}  # the plan names the unknown action itself
        chosen = [action] if action is not None else actions
        known = list(dict.fromkeys(s.name for a in chosen for s in adapter.fields_for(a)))
        owner = action or f"any {adapter.provider} action"
        return {
            name: unknown_field(name, known, owner)
            for name, value in given.items()
            if name not in known and value not in (None, "")
        }

    def request_for(self, channel: str, command: ChangeCommand) -> FormRequest | None:
        """The form a change command asks for when it lacks parameters; None when the
        command line says everything (the change is requested straight away). For a command
        whose fields its action takes (``unknown_fields``: bot.core.ask.reading reads both)."""
        provider = self.access.catalog.by_verb(command.name)
        kind: FormKind = "single" if provider and provider.single_action() else "choice"
        action = command.action
        fields = command.fields
        missing = action is not None and any(
            s.required and not fields.get(s.name) for s in self.fields_of(command.project, action)
        )
        if action is not None and not missing and (fields or kind == "choice"):
            return None
        return FormRequest(
            kind=kind,
            project=command.project,
            cluster_id=command.cluster_id,
            channel=channel,
            action=None if kind == "single" else action,
            prefill=dict(fields),
            reason=command.reason,
        )

    async def open(self, user: str, request: FormRequest) -> FormView | FormMessage:
        try:
            await self.access.require(user, request.project, request.channel, Role.viewer)
            self.access.require_cluster_allowed(request.project, request.cluster_id)
            state = await self.access.fetch(request.project, request.cluster_id)
        except Refusal as refusal:
            return FormMessage(request.kind, refusal.message, request.metadata())
        self._states[(request.project, request.cluster_id)] = state
        prefill = {**request.prefill, **({"reason": request.reason} if request.reason else {})}
        view = self._view(request.kind, state, request.action, prefill, request.metadata())
        freeze = await self._freeze_for(user, request.project, request.channel)
        return replace(view, freeze=freeze)

    async def with_action(
        self, user: str, metadata_raw: str | None, action: str, values: Mapping[str, str | None]
    ) -> FormView | FormMessage:
        """The action form again after the person chose ``action``, keeping what they typed."""
        meta = parse_metadata(metadata_raw)
        request = FormRequest(
            kind="choice",
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
            return FormMessage("choice", refusal.message, request.metadata())
        typed = {
            k: v
            for k, v in values.items()
            if v and k not in ("action", "reason", "override", "run_at")
        }
        view = self._view("choice", state, action, typed, request.metadata())
        freeze = await self._freeze_for(user, request.project, request.channel)
        return replace(view, freeze=freeze)

    def _view(
        self,
        kind: FormKind,
        state: ClusterState,
        action: str | None,
        prefill: Mapping[str, str],
        metadata: Mapping[str, object],
    ) -> FormView:
        adapter = self.access.adapter_for(state.summary.project)
        actions = [] if kind == "single" else list(adapter.actions())
        single = adapter.actions()[0] if kind == "single" else None
        specs = self.fields_of(state.summary.project, single or action or "")
        return FormView(
            kind=kind,
            summary=state.summary,
            actions=actions,
            action=action,
            specs=specs,
            values={**state.current, **prefill},
            metadata={**metadata, "shown": shown_values(state.current, specs)},
            title=self.access.catalog.descriptor(state.summary.provider).form_title,
        )

    async def _state_for_submit(
        self, user: str, channel: str, project: str, cluster_id: str
    ) -> ClusterState:
        """The cluster as fresh as the surface's time to acknowledge allows."""
        await self.access.require(user, project, channel, Role.operator)
        self.access.require_cluster_allowed(project, cluster_id)
        cached = self._states.get((project, cluster_id))
        try:
            state = await asyncio.wait_for(self.access.fetch(project, cluster_id), SUBMIT_TIMEOUT)
        except TimeoutError:
            if cached is None:
                raise Refusal(
                    f"{project} did not answer in time; try again.", kind="provider_timeout"
                ) from None
            return cached
        self._states[(project, cluster_id)] = state
        return state

    async def check(
        self,
        user: str,
        kind: FormKind,
        metadata_raw: str | None,
        values: Mapping[str, str | None],
    ) -> SubmissionErrors | ChangeAsk:
        """Check a submitted form: per-field errors, or the change ``user`` asks for (their
        role and the cluster checked here, once: ``_state_for_submit``)."""
        meta = parse_metadata(metadata_raw)
        project, cluster_id, channel = (meta.get(k, "") for k in CONTEXT_KEYS)
        if not (project and cluster_id and channel):
            where = "action" if kind == "choice" else "reason"  # a block every form has
            return SubmissionErrors({where: "This form lost its context; run the command again."})
        if kind == "single":
            action = self._single_action(project)  # "": the project is gone (refused below)
        else:
            action = values.get("action") or ""
            if not action:
                return SubmissionErrors({"action": "Choose an action."})
        try:
            state = await self._state_for_submit(user, channel, project, cluster_id)
            if action not in self.access.adapter_for(project).actions():
                return SubmissionErrors({"action": f"Unknown action {action}."})
            specs = self.fields_of(project, action)
            shown = parse_shown(metadata_raw)
            inputs, unchanged = changed_inputs(specs, state.current, values, shown)
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
            if kind == "single" and not inputs:
                return SubmissionErrors(
                    {
                        self._first_field(kind, specs): "Nothing changed: every field is the "
                        "cluster's current value."
                    }
                )
            self.access.make_plan(project, state, action, inputs)
        except Refusal as refusal:
            known = self.fields_of(project, action)
            field = refusal.field
            at = field if field and field in {s.name for s in known} else None
            return SubmissionErrors({at or self._first_field(kind, known): refusal.message[:1900]})
        try:
            schedule = self._schedule(values.get("run_at"))
        except ScheduleError as exc:
            return SubmissionErrors({"run_at": str(exc)})
        reason = (values.get("reason") or "").strip() or None
        override = (values.get("override") or "").strip() or None
        if override is not None:
            problem = justification_problem(override, "An override")
            if problem is not None:
                return SubmissionErrors({"override": problem})
        return ChangeAsk(
            user=user,
            channel=channel,
            project=project,
            cluster_id=cluster_id,
            action=action,
            inputs=inputs,
            reason=reason,
            override=override,
            schedule=schedule,
            origin="form",
            command=f"modal {action}",
        )

    def _single_action(self, project: str) -> str:
        """The one action of the project's provider (its update form's); "" when the
        project is no longer in the policy."""
        try:
            provider = self.access.catalog.descriptor(self.access.provider_of(project))
        except KeyError:
            return ""
        return provider.single_action() or ""

    @staticmethod
    def _first_field(kind: FormKind, specs: list[FieldSpec]) -> str:
        """Where a form shows an error of no field of its own: its first input."""
        return "action" if kind == "choice" or not specs else specs[0].name

    def _schedule(self, run_at: str | None) -> Schedule | None:
        if not run_at or not run_at.strip():
            return None
        schedule = parse_at(run_at)
        schedule.resolve(self.clock())  # within the bounds now; checked again on request
        return schedule
