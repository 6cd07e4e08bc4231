"""A staged change as it is asked (SPEC §14): its plan made at request from the cluster as
it is now and the change's size and price, stored with the request; the words that name it
where a plain change shows its preview."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from bot.core.access import Access, Refusal
from bot.core.answers import Reply, notice
from bot.core.guardrails.checks import ChangeSize
from bot.core.staged.plan import StagedPlan, Staging, StagingError, build_plan
from bot.core.store import TERMINAL_STATES, ChangeRequestRecord
from bot.providers.base import ChangePlan, ClusterState


def plan_staged(
    staging: Staging,
    access: Access,
    state: ClusterState,
    plan: ChangePlan,
    inputs: Mapping[str, object],
    size: ChangeSize,
) -> StagedPlan:
    """The steps of a staged change (a Refusal saying why when it cannot be staged)."""
    descriptor = access.catalog.descriptor(plan.provider)
    stepping = descriptor.stepping
    if stepping is None:
        raise Refusal(f"{descriptor.title} changes cannot be sent in steps.", kind="usage")
    start: object = (
        size.nodes_before
        if stepping.additive
        else state.current.get(_field(stepping.fields, inputs))
    )
    if not isinstance(start, int):
        raise Refusal(
            f"the size of {plan.cluster_name} is not known: it cannot be sent in steps.",
            kind="usage",
        )
    defaults = access.policy.staged
    try:
        return build_plan(
            stepping,
            plan.action,
            inputs,
            start=start,
            staging=staging,
            soak=staging.soak or defaults.soak,
            steady_within=defaults.steady_within,
            hourly_total=size.hourly,
            currency=size.currency,
        )
    except StagingError as exc:
        raise Refusal(str(exc), kind="usage", field="step") from None


def _field(fields: tuple[str, ...], inputs: Mapping[str, object]) -> str:
    return next((name for name in inputs if name in fields), fields[0])


def staged_preview(stored: Mapping[str, object], plan: ChangePlan | None) -> str:
    """A request's preview in one line: the plan's, with its steps when it has them."""
    raw = stored.get("staged")
    if not isinstance(raw, dict):
        return (
            ChangePlan.model_validate(stored["plan"]).preview_text()
            if plan is None
            else plan.preview_text()
        )
    staged = StagedPlan.of_json(raw)
    return f"{staged.field} {staged.sizes_text()} in {len(staged.steps)} steps"


def staged_lines(stored: Mapping[str, object]) -> list[str]:
    """The preview's lines of a staged request (its headline and every step with its price);
    none for a plain one."""
    raw = stored.get("staged")
    if not isinstance(raw, dict):
        return []
    staged = StagedPlan.of_json(raw)
    return [f"In steps: {staged.headline()}", *staged.step_lines()]


def progress_of(record: ChangeRequestRecord) -> tuple[str | None, tuple[str, ...]]:
    """A running plan's progress and buttons (RequestView's), as its runner shows them;
    none once the request has ended (its result says how the plan ended)."""
    raw = record.plan.get("progress")
    if not isinstance(raw, dict) or record.state in TERMINAL_STATES:
        return None, ()
    return str(raw.get("text", "")), tuple(str(b) for b in raw.get("buttons", ()))


async def run_staged(
    execute: Callable[..., Awaitable[object]],
    record: ChangeRequestRecord,
    user: str,
    posted: object,
    beside: str | None,
) -> Reply:
    """A staged change that needs no approval: its plan starts in the background (its
    execution), and the person hears where each step will be told."""
    await execute(record.id, actor=user, record=record, posted=posted)
    said = f"Request {record.id} runs in steps: {staged_preview(record.plan, None)}"
    return notice(f"{said}; the thread tells each step." + (f"\n{beside}" if beside else ""))
