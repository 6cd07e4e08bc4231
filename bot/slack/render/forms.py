"""The modals: the change forms (fields from the provider's specs), their loading,
checking and answer views, a submitted form shown again with its problems, and the
forms that ask why (deny, break glass). Their callback ids are here too."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from bot.core.api import MAX_JUSTIFICATION, MIN_JUSTIFICATION, FormKind, FormMessage, FormView
from bot.providers.base import ClusterSummary, FieldSpec
from bot.slack.render.primitives import (
    _PLAIN_TEXT_MAX,
    Block,
    SlackMessage,
    _clip,
    context,
    escape,
    plain,
    section,
)


def _option(value: str) -> Block:
    return {"text": {"type": "plain_text", "text": _clip(plain(value), 75)}, "value": value}


def _input_block(spec: FieldSpec, current: object, *, required: bool) -> Block:
    element: Block
    if spec.kind == "choice":
        element = {
            "type": "static_select",
            "action_id": spec.name,
            "options": [_option(c) for c in spec.choices],
        }
        if current in spec.choices:
            element["initial_option"] = _option(str(current))
    else:
        element = {"type": "plain_text_input", "action_id": spec.name}
        if current not in (None, "", []):
            shown = ",".join(str(v) for v in current) if isinstance(current, list) else str(current)
            element["initial_value"] = shown
    hint = spec.hint
    if current not in (None, "", []):
        now = ",".join(map(str, current)) if isinstance(current, list) else str(current)
        hint = f"Now: {now}. {hint}"
    block: Block = {
        "type": "input",
        "block_id": spec.name,
        "optional": not required,
        "label": {"type": "plain_text", "text": _clip(spec.label, _PLAIN_TEXT_MAX)},
        "element": element,
    }
    if hint.strip():
        block["hint"] = {"type": "plain_text", "text": _clip(plain(hint.strip()), 150)}
    return block


def _reason_block(initial: object = None) -> Block:
    element: Block = {"type": "plain_text_input", "action_id": "reason", "max_length": 500}
    if isinstance(initial, str) and initial:
        element["initial_value"] = initial[:500]
    return {
        "type": "input",
        "block_id": "reason",
        "optional": True,
        "label": {"type": "plain_text", "text": "Reason (recorded in the thread and audit)"},
        "element": element,
    }


def _override_block(freeze: str) -> Block:
    """For an admin during a freeze: the reason to go ahead anyway (SPEC §8)."""
    return {
        "type": "input",
        "block_id": "override",
        "optional": True,
        "label": {"type": "plain_text", "text": "Override the freeze (admins): why"},
        # No min_length: the input is optional (most changes in a freeze are not overridden),
        # and Slack's docs do not say an empty optional input escapes it; the server checks
        # the minimum after trimming (forms.py) and shows it on this input.
        "element": {
            "type": "plain_text_input",
            "action_id": "override",
            "max_length": MAX_JUSTIFICATION,
        },
        "hint": {"type": "plain_text", "text": _clip(plain(freeze), 150)},
    }


def _run_at_block() -> Block:
    """The optional run time of a scheduled change (SPEC §9)."""
    return {
        "type": "input",
        "block_id": "run_at",
        "optional": True,
        "label": {"type": "plain_text", "text": "Run at (optional)"},
        "element": {"type": "datetimepicker", "action_id": "run_at"},
        "hint": {
            "type": "plain_text",
            "text": "Empty: it runs once approved. Else 1 minute to 14 days ahead; approve before.",
        },
    }


def _modal(
    callback_id: str,
    title: str,
    metadata: Mapping[str, object],
    blocks: list[Block],
    *,
    submit: str | None = None,
    close: str = "Close",
) -> Block:
    """A modal view: ``metadata`` goes along as its private metadata."""
    view: Block = {
        "type": "modal",
        "callback_id": callback_id,
        "title": {"type": "plain_text", "text": title},
    }
    if submit is not None:
        view["submit"] = {"type": "plain_text", "text": submit}
    view["close"] = {"type": "plain_text", "text": close}
    view["private_metadata"] = json.dumps(dict(metadata))
    view["blocks"] = blocks
    return view


def loading_modal(callback_id: str, title: str, metadata: Mapping[str, object]) -> Block:
    blocks = [section(":hourglass_flowing_sand: Fetching the cluster…")]
    return _modal(callback_id, _clip(title, 24), metadata, blocks)


def message_modal(callback_id: str, title: str, text: str, metadata: Mapping[str, object]) -> Block:
    return _modal(callback_id, _clip(title, 24), metadata, [section(escape(text))])


def reply_modal(callback_id: str, message: SlackMessage, metadata: Mapping[str, object]) -> Block:
    """A view showing an answer (a refusal, an outcome) where a form was or would be."""
    view = message_modal(callback_id, "gpuops", "", metadata)
    view["blocks"] = [b for b in message.blocks if b.get("type") in _MODAL_ANSWER_BLOCKS][:100]
    if not view["blocks"]:
        view["blocks"] = [section(escape(message.text))]
    return view


_MODAL_ANSWER_BLOCKS = {"section", "context", "header", "divider"}


def checking_modal(callback_id: str, title: str, metadata: Mapping[str, object]) -> Block:
    """The view a slow submission is answered with while its checks go on."""
    view = message_modal(callback_id, title, "", metadata)
    view["blocks"] = [section(":hourglass_flowing_sand: Checking your request…")]
    return view


def form_with_problems(view: Mapping[str, object], problems: Mapping[str, str]) -> Block:
    """A submitted form shown again with what was typed and what is wrong (views.update
    cannot mark fields the way a submission's answer does)."""
    view_state = view.get("state")
    state = view_state.get("values", {}) if isinstance(view_state, dict) else {}
    blocks: list[Block] = [
        section(":warning: " + escape("; ".join(f"{k}: {v}" for k, v in problems.items())))
    ]
    typed_blocks = view.get("blocks")
    for block in typed_blocks if isinstance(typed_blocks, list) else []:
        if not isinstance(block, dict):
            continue
        blocks.append(_with_typed(block, state.get(block.get("block_id", ""), {})))
    shown: Block = {
        k: view[k]
        for k in ("type", "callback_id", "title", "submit", "close", "private_metadata")
        if k in view
    }
    shown["blocks"] = blocks[:100]
    return shown


def _with_typed(block: Mapping[str, object], typed: Mapping[str, object]) -> Block:
    again = dict(block)
    element = block.get("element")
    if block.get("type") != "input" or not isinstance(element, dict):
        return again
    value = typed.get(element.get("action_id", ""), {})
    element = {k: v for k, v in element.items() if k not in ("initial_value", "initial_option")}
    if isinstance(value, dict) and value.get("selected_option"):
        element["initial_option"] = value["selected_option"]
    elif isinstance(value, dict) and value.get("value"):
        element["initial_value"] = value["value"]
    again["element"] = element
    return again


FORM_SUBMIT = "Request change"
# What the submit button does, said where it is pressed: there is no separate preview step.
FORM_SUBMIT_SAYS = (
    f"*{FORM_SUBMIT}* posts the change with its preview in the channel: a change that needs "
    "approval waits there for an approver, any other runs at once."
)


def _form(
    callback_id: str, title: str, blocks: list[Block], metadata: Mapping[str, object]
) -> Block:
    shown = [*blocks, context(FORM_SUBMIT_SAYS)]
    return _modal(callback_id, title, metadata, shown, submit=FORM_SUBMIT, close="Cancel")


# Each form kind's callback id: SPEC's names, kept as Slack knows them.
FORM_CALLBACKS: dict[FormKind, str] = {"single": "gpu_update", "choice": "gpu_action"}
BREAK_GLASS_CALLBACK = "gpu_break_glass"


def form_kind(callback_id: str) -> FormKind:
    """The kind of change form a modal callback id stands for."""
    return "choice" if callback_id == FORM_CALLBACKS["choice"] else "single"


def change_form(form: FormView | FormMessage) -> Block:
    """The modal for a change form, or for the refusal that stands in its place."""
    if isinstance(form, FormMessage):
        return message_modal(FORM_CALLBACKS[form.kind], "gpuops", form.text, form.metadata)
    if form.kind == "single":
        modal = update_modal(form.summary, form.specs, form.values, form.metadata, title=form.title)
    else:
        modal = action_modal(
            form.summary,
            form.actions,
            form.action,
            form.specs,
            form.values,
            form.metadata,
            title=form.title,
        )
    if form.freeze is not None:
        modal["blocks"].append(_override_block(form.freeze))
    return modal


DENY_CALLBACK = "gpu_deny"


def reason_modal(
    callback_id: str,
    title: str,
    submit: str,
    metadata: Mapping[str, object],
    intro: str | None,
    ask: str,
    *,
    block_id: str = "reason",
    min_length: int | None = None,
) -> Block:
    """A modal that asks why before acting: one text input (``min_length``: required)."""
    element: Block = {"type": "plain_text_input", "action_id": block_id, "max_length": 500}
    asking: Block = {
        "type": "input",
        "block_id": block_id,
        "label": {"type": "plain_text", "text": ask},
        "element": element,
    }
    if min_length is None:
        asking["optional"] = True
    else:
        element["min_length"] = min_length
    blocks = [*([section(intro)] if intro else []), asking]
    return _modal(callback_id, title, metadata, blocks, submit=submit, close="Cancel")


def deny_modal(request_id: str, channel: str, thread_ts: str | None) -> Block:
    """Ask a denier why (optional): the reason is audited and shown in the thread."""
    return reason_modal(
        DENY_CALLBACK,
        "Deny request",
        "Deny",
        {"request_id": request_id, "channel": channel, "thread_ts": thread_ts},
        f":no_entry_sign: You are denying `{escape(request_id)}`: nothing is changed.",
        "Why? (recorded in the thread and audit)",
    )


def break_glass_modal(request_id: str, channel: str | None) -> Block:
    """Ask an admin approving their own request why it cannot wait for a second person."""
    return reason_modal(
        BREAK_GLASS_CALLBACK,
        "Break glass",
        "Approve my own",
        {"request_id": request_id, "channel": channel},
        f":rotating_light: You are approving your own request `{escape(request_id)}`."
        " This is announced in the thread and the audit channel.",
        "Why can't this wait for a second person?",
        min_length=MIN_JUSTIFICATION,
    )


def update_modal(
    summary: ClusterSummary,
    specs: Sequence[FieldSpec],
    current: Mapping[str, object],
    metadata: Mapping[str, object],
    *,
    title: str,
) -> Block:
    """The form of a provider's one action; ``title`` is its descriptor's form title."""
    blocks: list[Block] = [
        section(
            f"*{escape(summary.name)}* (`{escape(summary.cluster_id)}`) — "
            f"{escape(summary.status)} · {escape(summary.project)}\n"
            "Change only what should change; fields left as they are are not sent."
        )
    ]
    blocks += [_input_block(s, current.get(s.name), required=False) for s in specs]
    focus = metadata.get("focus")
    for block in blocks:
        if focus and block.get("block_id") == focus and "element" in block:
            block["element"]["focus_on_load"] = True
    blocks.append(_reason_block(current.get("reason")))
    blocks.append(_run_at_block())
    return _form(FORM_CALLBACKS["single"], title, blocks, metadata)


def action_modal(
    summary: ClusterSummary,
    actions: Sequence[str],
    selected: str | None,
    specs: Sequence[FieldSpec],
    current: Mapping[str, object],
    metadata: Mapping[str, object],
    *,
    title: str,
) -> Block:
    """The form to choose a provider's action in; ``title`` is its descriptor's."""
    select: Block = {
        "type": "static_select",
        "action_id": "action",
        "placeholder": {"type": "plain_text", "text": "Choose an action"},
        "options": [_option(a) for a in actions],
    }
    if selected in actions:
        select["initial_option"] = _option(str(selected))
    blocks: list[Block] = [
        section(
            f"*{escape(summary.name)}* (`{escape(summary.cluster_id)}`) — "
            f"{escape(summary.status)} · {escape(summary.project)}"
        ),
        {
            "type": "input",
            "block_id": "action",
            "dispatch_action": True,
            "label": {"type": "plain_text", "text": "Action"},
            "element": select,
        },
    ]
    prefill = {k: v for k, v in current.items() if k in {s.name for s in specs}}
    blocks += [_input_block(s, prefill.get(s.name), required=s.required) for s in specs]
    blocks.append(_reason_block(current.get("reason")))
    blocks.append(_run_at_block())
    return _form(FORM_CALLBACKS["choice"], title, blocks, metadata)
