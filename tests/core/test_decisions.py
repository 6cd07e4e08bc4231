"""Decisions on change requests, on the core harness (SPEC §3-§4): approve runs the change
once with the story told in order; refusals change nothing and say why; deny, cancel,
expiry, a stale preview, the requester's grant checked again, break glass."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.core.requests import readback
from bot.core.requests.decisions import NeedsBreakGlass
from bot.core.store import ChangeRequestRecord, StoreUnavailable
from bot.core.store import RequestState as S
from bot.local.demo.stack import DEMO_POLICY
from tests.core.conftest import CoreFactory
from tests.support.core_harness import (
    ALICE,
    BOB,
    CAROL,
    DAVE,
    ERIN,
    MALLORY,
    NOTIFY_CHANNEL,
    Core,
    reply_text,
)
from tests.support.workflow_kit import poll_until

SCALE = {"additional_nodes": "2"}
_BOB_GRANT = '  - users: [U02BOB]\n    projects: ["*"]\n    role: approver\n'
assert _BOB_GRANT in DEMO_POLICY and "break_glass: true" in DEMO_POLICY
# Bob approves only in #incident, and nobody may approve their own request.
STRICT_POLICY = DEMO_POLICY.replace(
    _BOB_GRANT, _BOB_GRANT + "    channels: [C0INCIDENT]\n"
).replace("break_glass: true", "break_glass: false")


async def test_an_approved_change_runs_once_and_is_told_in_order(any_core: Core) -> None:
    core = any_core
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    assert "is waiting for approval in the thread" in opened.text
    assert "scale_cluster: 2 → 4 nodes" in opened.text
    assert core.e2e.script.of("apply") == []
    assert await core.approve(BOB, opened.id) is None
    [call] = core.e2e.script.of("apply")
    assert call.cluster_id == "101"
    assert call.body == {"action": "scale_cluster", "additional_nodes": 2}
    assert core.e2e.clusters["101"]["nodes"] == 4
    record = await core.record(opened.id)
    assert record.state is S.SUCCEEDED and record.decided_by == BOB and not record.break_glass
    assert record.result_message == "Adding 2 node(s)"
    # the summary is shown (told below) and, steady, never edited again: its ts is not kept
    assert record.root_ts and record.prompt_ts and record.summary_ts is None
    assert await core.trail(opened.id) == [
        (DAVE, "requested", "pending"),
        (BOB, "approved", "approved"),
        (BOB, "executing", None),
        (DAVE, "result", "succeeded"),
    ]
    told = core.notifier
    assert told.methods(opened.id) == [
        "request_opened",
        "approval_requested",
        "mirror",
        "request_changed",
        "request_changed",
        "request_changed",
        "result",
        "mirror_edit",  # the first copy shows it done, then the last copy says so
        "mirror",
    ]
    assert told.events(opened.id) == ["approved", "executing", "finished"]
    assert [t.state for t in told.of(opened.id, "request_changed")] == [
        S.APPROVED,
        S.EXECUTING,
        S.SUCCEEDED,
    ]
    [result] = told.of(opened.id, "result")
    assert result.summary is not None and result.summary.size == "4 nodes"
    assert told.mirrors(opened.id)[0] == "Change requested"
    assert all(t.channel == NOTIFY_CHANNEL for t in told.of(opened.id, "mirror"))
    # a late click is told who decided and how it ended; nothing runs again
    late = reply_text(await core.approve(CAROL, opened.id))
    assert f"{opened.id} was already approved by <@{BOB}>" in late and "(done)" in late
    assert len(core.e2e.script.of("apply")) == 1


async def test_a_change_that_needs_no_approval_runs_at_once(core: Core) -> None:
    opened = await core.open(
        DAVE, "together-prod", "tc-h200-ondemand", "update", {"num_gpus": "16"}
    )
    assert "ran — see the thread for the result (done: Together accepted the update)" in opened.text
    record = await core.record(opened.id)
    assert record.state is S.SUCCEEDED and record.needs_approval is False
    assert record.prompt_ts is None and record.expires_at is None
    assert [c.body for c in core.together.script.of("apply")] == [{"num_gpus": 16}]
    assert core.together.clusters["tc-h200-ondemand"]["num_gpus"] == 16
    # One copy in the notify channel, once the change has ended.
    assert core.notifier.mirrors(opened.id) == ["Change done (no approval needed)"]
    assert "approval_requested" not in core.notifier.methods(opened.id)


@pytest.mark.parametrize(
    ("user", "requester", "cluster", "channel", "why", "outcome"),
    [
        (
            DAVE,
            DAVE,
            "101",
            "C0INCIDENT",
            "you are operator on e2e-delhi; approving a request needs approver",
            "not_authorized",
        ),
        (ERIN, DAVE, "101", "C0INCIDENT", "you are viewer on e2e-delhi", "not_authorized"),
        (
            MALLORY,
            DAVE,
            "101",
            "C0INCIDENT",
            "no such project or no access: e2e-delhi",
            "not_authorized",
        ),
        (BOB, BOB, "103", "C0INCIDENT", "; another approver", "self_approval"),
        (ALICE, ALICE, "104", "C0INCIDENT", "; another approver", "self_approval"),
        (DAVE, ALICE, "104", "C0INCIDENT", "you are operator on e2e-delhi", "not_authorized"),
        (
            BOB,
            DAVE,
            "105",
            "C0RANDOM",
            "your grant on e2e-delhi holds only in <#C0INCIDENT>",
            "not_authorized",
        ),
    ],
)
async def test_a_refused_approval_changes_nothing_and_says_why(
    make_core: CoreFactory,
    database_url: str,
    user: str,
    requester: str,
    cluster: str,
    channel: str,
    why: str,
    outcome: str,
) -> None:
    core = await make_core(policy_yaml=STRICT_POLICY, database_url=database_url)
    opened = await core.open(requester, "e2e-delhi", cluster, "restart_workers", channel=channel)
    told = await core.approve(user, opened.id, channel=channel)
    assert not isinstance(told, NeedsBreakGlass)  # break glass is off: no form
    assert why in reply_text(told)
    record = await core.record(opened.id)
    assert record.state is S.PENDING and record.decided_by is None
    assert (await core.trail(opened.id))[-1] == (user, "refused", outcome)
    assert core.e2e.script.of("apply") == []
    # the refusal left it approvable by the right person
    assert await core.approve(CAROL, opened.id, channel=channel) is None
    assert (await core.record(opened.id)).state is S.SUCCEEDED


async def test_a_viewer_elsewhere_is_told_she_lacks_the_role_not_sent_elsewhere(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "105", "restart_workers", channel="C0RANDOM")
    told = reply_text(await core.approve(ERIN, opened.id, channel="C0RANDOM"))
    assert (
        "you are viewer on e2e-delhi (in <#C0INCIDENT>); approving a request needs approver, "
        "which you hold in no channel"
    ) in told
    assert "ask there" not in told


async def test_a_decision_is_checked_in_the_requests_channel_not_the_clicks(
    make_core: CoreFactory,
) -> None:
    core = await make_core(policy_yaml=STRICT_POLICY)
    opened = await core.open(DAVE, "e2e-delhi", "105", "restart_workers", channel="C0RANDOM")
    told = reply_text(await core.approve(BOB, opened.id, channel="C0INCIDENT"))
    assert "holds only in <#C0INCIDENT>" in told
    assert (await core.record(opened.id)).state is S.PENDING


async def test_deny_ends_it_with_the_reason_everywhere(any_core: Core) -> None:
    core = any_core
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    reason = "not during the <@U0EVIL> freeze"
    assert await core.ops.may_deny(user=BOB, channel="C0INCIDENT", request_id=opened.id) is None
    assert await core.deny(BOB, opened.id, reason=reason) is None
    record = await core.record(opened.id)
    assert record.state is S.DENIED and record.decided_by == BOB
    assert record.decision_note == reason
    [denied] = core.notifier.of(opened.id, "request_changed")
    assert denied.kind == "denied" and denied.actor == BOB and denied.text == reason
    assert denied.left_pending
    assert core.notifier.mirrors(opened.id)[-1] == f"Change denied: {reason}"
    [entry] = [e for e in await core.store.list_audit(request_id=opened.id) if e.event == "denied"]
    assert entry.detail["reason"] == reason
    late = reply_text(await core.approve(CAROL, opened.id))
    assert f"{opened.id} was already denied by <@{BOB}>" in late
    assert core.e2e.script.of("apply") == []
    assert await core.events(opened.id) == ["requested", "denied", "refused"]


async def test_a_deny_without_a_reason_and_one_refused_before_its_form(any_core: Core) -> None:
    core = any_core
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    refused = await core.ops.may_deny(user=ERIN, channel="C0INCIDENT", request_id=opened.id)
    assert refused is not None and "you are viewer on e2e-delhi" in reply_text(refused)
    assert await core.deny(BOB, opened.id, reason="   ") is None
    record = await core.record(opened.id)
    assert record.state is S.DENIED and record.decision_note is None
    assert core.notifier.of(opened.id, "request_changed")[0].text is None
    assert core.notifier.mirrors(opened.id)[-1] == "Change denied"


async def test_cancel_by_the_requester_or_an_admin_but_not_another(any_core: Core) -> None:
    core = any_core
    by_dave = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    assert await core.cancel(DAVE, by_dave.id) is None
    assert (await core.record(by_dave.id)).decided_by == DAVE
    assert core.notifier.events(by_dave.id) == ["cancelled"]

    again = await core.open(DAVE, "e2e-delhi", "103", "restart_workers")
    assert await core.cancel(ALICE, again.id) is None  # an admin may cancel anyone's
    record = await core.record(again.id)
    assert record.state is S.CANCELLED and record.decided_by == ALICE

    by_alice = await core.open(ALICE, "e2e-delhi", "104", "restart_workers")
    for other in (DAVE, BOB):  # an operator, and an approver who is not an admin
        told = reply_text(await core.cancel(other, by_alice.id))
        assert f"or an admin of e2e-delhi can cancel {by_alice.id}" in told
    assert (await core.record(by_alice.id)).state is S.PENDING
    late = reply_text(await core.approve(BOB, by_dave.id))
    assert f"{by_dave.id} was already cancelled by" in late
    assert core.e2e.script.of("apply") == []


async def test_an_undecided_request_expires_once_and_cannot_be_approved_after(
    any_core: Core,
) -> None:
    core = any_core
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    assert await core.workflow.expire_due() == 0  # not yet due
    core.clock.advance(minutes=31)
    assert await core.workflow.expire_due() == 1
    assert await core.workflow.expire_due() == 0  # once
    record = await core.record(opened.id)
    assert record.state is S.EXPIRED and record.decided_by is None
    [expired] = core.notifier.of(opened.id, "request_changed")
    assert expired.kind == "expired" and expired.left_pending
    assert expired.text == (
        f"Expired: nobody approved {opened.id} within 30 minutes. Nothing was changed."
    )
    assert core.notifier.mirrors(opened.id)[-1] == "Change request expired"
    late = reply_text(await core.approve(BOB, opened.id))
    assert f"{opened.id} is already expired" in late
    assert core.e2e.script.of("apply") == []
    assert await core.events(opened.id) == ["requested", "expired", "refused"]


async def test_a_click_after_the_deadline_expires_it_before_the_sweeper_does(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    core.clock.advance(minutes=31)  # the sweeper has not run
    told = reply_text(await core.approve(BOB, opened.id))
    assert f"{opened.id} is already expired" in told
    record = await core.record(opened.id)
    assert record.state is S.EXPIRED and record.decided_by is None
    assert core.notifier.events(opened.id) == ["expired"]
    [expired] = core.notifier.of(opened.id, "request_changed")
    assert expired.text is not None and expired.text.startswith("Expired: nobody approved")
    assert core.e2e.script.of("apply") == []


async def test_a_cluster_changed_since_the_preview_is_refused_as_stale(any_core: Core) -> None:
    core = any_core
    e2e = await core.open(DAVE, "e2e-delhi", "104", "scale_cluster", {"additional_nodes": "1"})
    core.e2e.clusters["104"]["nodes"] = 3  # scaled in the provider's console
    told = reply_text(await core.approve(BOB, e2e.id))
    stale = "stale at approval: the cluster changed since the preview"
    assert f"{e2e.id} failed — {stale}" in told
    [refused] = core.notifier.of(e2e.id, "request_changed")
    assert refused.kind == "refused" and refused.state is S.FAILED
    assert refused.text is not None and "no_of_nodes was 1, now 3" in refused.text
    assert core.notifier.mirrors(e2e.id)[-1].startswith("Change failed — stale at approval")
    late = reply_text(await core.approve(CAROL, e2e.id))
    assert f"{e2e.id} already failed, stale at approval" in late

    together = await core.open(
        DAVE, "together-prod", "tc-h100-reserved", "update", {"num_gpus": "8"}
    )
    core.together.clusters["tc-h100-reserved"]["num_gpus"] = 24
    await core.approve(CAROL, together.id)
    [refused] = core.notifier.of(together.id, "request_changed")
    assert refused.text is not None and "num_gpus was 16, now 24" in refused.text
    for opened in (e2e, together):
        record = await core.record(opened.id)
        assert record.state is S.FAILED and record.decision_note == "stale"
        assert ("refused", "stale") in [t[1:] for t in await core.trail(opened.id)]
    assert core.e2e.script.of("apply") == [] and core.together.script.of("apply") == []


async def test_a_cluster_that_finished_provisioning_is_not_a_stale_preview(core: Core) -> None:
    opened = await core.open(DAVE, "together-prod", "tc-booting", "update", {"num_gpus": "0"})
    core.together.clusters["tc-booting"]["status"] = "Ready"
    assert await core.approve(BOB, opened.id) is None
    assert (await core.record(opened.id)).state is S.SUCCEEDED
    assert [c.body for c in core.together.script.of("apply")] == [{"num_gpus": 0}]


async def test_a_second_request_on_a_cluster_is_told_of_the_first(any_core: Core) -> None:
    core = any_core
    first = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    second = await core.open(BOB, "e2e-delhi", "101", "restart_workers")
    beside = f"{first.id} (pending approval) is also open on train-h100-a (101)"
    assert (
        beside in second.text and "fails as stale at approval if the first changed" in second.text
    )
    [note] = core.notifier.of(second.id, "follow_up_note")
    assert note.text is not None and beside in note.text and note.tone == "warning"
    assert core.notifier.notes(first.id) == []  # the first was alone


async def test_a_second_restart_is_refused_while_the_first_is_open(core: Core) -> None:
    """The re-check at approval cannot see a restart (it leaves the cluster as it was): two
    approved restart_workers both ran. The second is refused, naming the first, until the
    first has ended."""
    first = await core.open(DAVE, "e2e-delhi", "101", "restart_workers")
    second = await core.open(ALICE, "e2e-delhi", "101", "restart_workers")
    assert second.id == first.id  # the refusal names the first; no request was opened
    assert f"{first.id} already asks for this on train-h100-a (101)" in second.text
    assert "(pending approval)" in second.text and "Approve or cancel it" in second.text
    assert await core.approve(BOB, first.id) is None
    assert len(core.e2e.script.of("apply")) == 1
    third = await core.open(ALICE, "e2e-delhi", "101", "restart_workers")  # the first ended
    assert third.id != first.id and "waiting for approval" in third.text


async def test_the_requesters_grant_is_checked_again_at_approval(core: Core) -> None:
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    dave = "  - users: [U04DAVE]\n    projects: [together-prod, e2e-delhi]\n"
    core.reload(DEMO_POLICY.replace(dave, "  - users: [U04DAVE]\n    projects: [together-prod]\n"))
    told = reply_text(await core.approve(BOB, opened.id))
    assert f"{opened.id} failed — refused at approval: the requester no longer may" in told
    record = await core.record(opened.id)
    assert record.state is S.FAILED and record.decision_note == "requester_revoked"
    assert core.notifier.mirrors(opened.id)[-1].startswith("Change failed — refused at approval")
    assert core.e2e.script.of("apply") == []


async def test_break_glass_asks_why_then_runs_with_the_reason_told(any_core: Core) -> None:
    core = any_core
    opened = await core.open(ALICE, "e2e-delhi", "103", "scale_cluster", {"additional_nodes": "1"})
    asked = await core.approve(ALICE, opened.id)
    assert asked == NeedsBreakGlass(opened.id)
    assert (await core.record(opened.id)).state is S.PENDING
    assert core.e2e.script.of("apply") == []
    reason = "GPU node wedged during the incident, no approver awake"
    assert await core.approve(ALICE, opened.id, break_glass_reason=reason) is None
    record = await core.record(opened.id)
    assert record.state is S.SUCCEEDED and record.break_glass
    assert record.decided_by == ALICE and record.decision_note == reason
    assert [c.body for c in core.e2e.script.of("apply")] == [
        {"action": "scale_cluster", "additional_nodes": 1}
    ]
    [glass] = [t for t in core.notifier.of(opened.id, "request_changed") if t.kind == "break_glass"]
    assert glass.text == f"Break glass: <@{ALICE}> approved their own request. Reason: {reason}"
    assert glass.text in core.notifier.mirrors(opened.id)
    [approved] = [
        e for e in await core.store.list_audit(request_id=opened.id) if e.event == "approved"
    ]
    assert approved.detail == {"break_glass": True, "reason": reason} | {
        k: v for k, v in approved.detail.items() if k not in ("break_glass", "reason")
    }


async def test_a_decision_on_an_unknown_request_is_refused(core: Core) -> None:
    told = reply_text(await core.approve(BOB, "CR-NOSUCH"))
    assert "there is no change request CR-NOSUCH" in told
    [entry] = await core.store.list_audit(limit=5)
    assert (entry.actor, entry.event, entry.outcome) == (BOB, "refused", "unknown_request")


# Scale on e2e-delhi needs two approvers; bob and carol (through S0PLATFORM) may give them.
_TWO_FOR_SCALE = DEMO_POLICY.replace(
    "  break_glass: true\n",
    "  break_glass: true\n  rules:\n"
    "    - projects: [e2e-delhi]\n      kinds: [scale_cluster]\n      approvers: 2\n",
)
_TWO_WITHOUT_BOB = _TWO_FOR_SCALE.replace(_BOB_GRANT, "")


async def test_an_approval_that_stops_counting_is_no_longer_shown_as_counted(
    core: Core,
) -> None:
    """A reload that takes an approver's grant away, the requirement itself unchanged:
    the request's messages stop counting and naming that approval (never "1 of 2: @bob"
    while bob counts no more), the next approver's count agrees, and the result names only
    the approvals that counted."""
    from bot.core.requests.view import view_of
    from bot.slack.render.requests import approval_progress, request_root

    core.reload(_TWO_FOR_SCALE)
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    assert reply_text(await core.approve(BOB, opened.id)).endswith("1 of 2.")
    assert approval_progress(view_of(await core.record(opened.id))) == "1 of 2: <@U02BOB>"

    core.reload(_TWO_WITHOUT_BOB)
    assert await core.workflow.policy_reloaded() == 1  # the requirement did not change
    record = await core.record(opened.id)
    assert record.approvers == [BOB] and record.uncounted == [BOB] and record.counted == []
    assert approval_progress(view_of(record)) == "0 of 2: none yet (no longer counted: <@U02BOB>)"
    [changed] = core.notifier.of(opened.id, "request_changed")[-1:]
    assert (changed.kind, changed.actor, changed.text) == ("rule_changed", "gpuops", None)
    assert changed.record.uncounted == [BOB]  # what the prompt is drawn from
    assert await core.workflow.policy_reloaded() == 0  # said once

    assert reply_text(await core.approve(CAROL, opened.id)).endswith("1 of 2.")
    record = await core.record(opened.id)
    assert record.state is S.PENDING and record.counted == [CAROL]
    assert approval_progress(view_of(record)) == (
        "1 of 2: <@U03CAROL> (no longer counted: <@U02BOB>)"
    )
    assert core.e2e.script.of("apply") == []
    assert await core.approve(ALICE, opened.id) is None  # the second that counts: sent
    record = await core.record(opened.id)
    assert record.state is S.SUCCEEDED and len(core.e2e.script.of("apply")) == 1
    line = str(request_root(view_of(record)).blocks)
    assert "approved by <@U03CAROL> and <@U01ALICE>" in line and "U02BOB" not in line


async def test_an_approval_the_store_stays_silent_about_is_told_so_and_shown_once_back(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #32.1: bob's approval commits, the answer is lost, and the store stays silent
    past the read-back's bound: bob is told it is not known yet whether it was recorded
    (never "nothing was changed"); once the store answers, his approval is told and the
    prompt redrawn (``approval_added``), once."""
    monkeypatch.setattr(readback, "READ_BACK_SECONDS", 0.2)
    core.reload(_TWO_FOR_SCALE)
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    store = core.store
    real_decide, real_get = store.decide_approval, store.get_request
    back = asyncio.Event()

    async def committed_then_silent(*args: Any, **kwargs: Any) -> ChangeRequestRecord | None:
        await real_decide(*args, **kwargs)
        monkeypatch.setattr(store, "get_request", silent_until_back)
        raise StoreUnavailable(store.database, "ConnectionResetError (after COMMIT)")

    async def silent_until_back(request_id: str) -> ChangeRequestRecord | None:
        if not back.is_set():
            raise StoreUnavailable(store.database, "ConnectionRefusedError (test)")
        return await real_get(request_id)

    monkeypatch.setattr(store, "decide_approval", committed_then_silent)
    told = reply_text(await core.approve(BOB, opened.id))
    assert "cannot say yet whether it was recorded" in told, told
    assert "nothing was changed" not in told
    assert core.notifier.events(opened.id) == []
    back.set()
    await poll_until(lambda: core.notifier.events(opened.id) == ["approval_added"], within=20)
    record = await core.record(opened.id)
    assert record.state is S.PENDING and record.approvers == [BOB]
    assert [event for _, event, _ in await core.trail(opened.id)] == [
        "requested",
        "approval_added",
    ]


async def test_an_approval_recorded_before_the_store_failed_its_telling_is_told_recorded(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The approval and its audit entry are stored; telling it then meets the store gone
    (as a mirror's failure is audited): bob hears it is recorded, not "nothing was changed"."""
    core.reload(_TWO_FOR_SCALE)
    opened = await core.open(DAVE, "e2e-delhi", "101", "scale_cluster", SCALE)
    store = core.store

    async def store_gone(*_args: Any, **_kwargs: Any) -> None:
        raise StoreUnavailable(store.database, "ConnectionRefusedError (test)")

    monkeypatch.setattr(core.notifier, "request_changed", store_gone)
    told = reply_text(await core.approve(BOB, opened.id))
    assert told == f"Your approval of {opened.id} is recorded: 1 of 2.", told
    record = await core.record(opened.id)
    assert record.approvers == [BOB]


async def test_the_first_copy_in_the_notify_channel_is_edited_to_each_later_state(
    any_core: Core,
) -> None:
    """The notify channel's first copy ("Change requested … pending approval") is edited as
    the thread's root is: after a stale refusal it shows the request failed, not pending."""
    core = any_core
    opened = await core.open(DAVE, "e2e-delhi", "104", "scale_cluster", {"additional_nodes": "1"})
    [first] = core.notifier.of(opened.id, "mirror")
    stored = await core.record(opened.id)
    assert stored.mirror_ts is not None  # where the first copy went is kept
    core.e2e.clusters["104"]["nodes"] = 3  # scaled in the provider's console
    await core.approve(BOB, opened.id)
    [edited] = core.notifier.of(opened.id, "mirror_edit")
    assert edited.channel == first.channel and edited.state is S.FAILED
    assert core.notifier.mirrors(opened.id)[-1].startswith("Change failed — stale at approval")


async def test_a_change_run_at_once_keeps_no_copy_to_edit(any_core: Core) -> None:
    """Mirrored once, when it has ended: nothing to edit later, so nothing is stored."""
    core = any_core
    opened = await core.open(
        DAVE, "together-prod", "tc-h200-ondemand", "update", {"num_gpus": "16"}
    )
    assert core.notifier.mirrors(opened.id) == ["Change done (no approval needed)"]
    assert core.notifier.of(opened.id, "mirror_edit") == []
    assert (await core.record(opened.id)).mirror_ts is None
