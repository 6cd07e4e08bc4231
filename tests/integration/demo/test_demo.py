"""`gpuops demo --script`: the embedded default, driven end to end as a user would."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from bot.local.demo.console import WAIT_ENV, DemoConsole, logs_to_file, policy_banner, wait_limit
from bot.local.demo.stack import DEMO_POLICY_FILE, LocalStack
from bot.logs import configure_logging

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "examples" / "demo.script"


def run_demo(
    script: Path, *, tour: bool = False, socket: bool = False, wait_seconds: float | None = None
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "bot.cli", "demo", "--script", str(script)]
    if not tour:
        args.append("--no-tour")
    if socket:
        args.append("--socket")
    env = None if wait_seconds is None else {**os.environ, WAIT_ENV: str(wait_seconds)}
    return subprocess.run(  # noqa: S603 - our own CLI
        args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env
    )


def test_the_example_script_passes_and_shows_every_path() -> None:
    done = run_demo(SCRIPT, tour=True)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "gpuops demo — a local Slack workspace" in out  # the tour
    # show and list
    assert "┃ train-h100-reserved (tc-h100-reserved)" in out
    assert "• `tc-b200-pool` train-b200-pool — Ready · 32 GPUs" in out
    # a Together update through the form: the preview, the provider's answer, the summary
    assert "form: Update cluster" in out
    assert "• `num_gpus 8 → 16`" in out
    assert "🟢 Together accepted the update" in out
    assert "┃ infer-h200 (tc-h200-ondemand)" in out
    # an E2E action needing approval, approved by a second user, in the thread
    assert "[1 Revert]" in out  # the form's scale-up can be undone
    assert "[2 Approve]  [3 Deny]  [4 Cancel]" in out
    assert "(bob presses Approve)" in out
    assert "✅ Approved by @bob." in out
    assert "[#incident ↳ thread of msg" in out
    # a validation error and a refusal, each only visible to the person
    assert "❌ num_preemptible_gpus must be a multiple of 8 (got 12; try 8 or 16)" in out
    assert "❌ you are viewer on e2e-delhi; this needs operator" in out
    # follow-up reached a steady status
    assert "infer-h200 is Ready." in out
    # the watcher speaks first in #gpu-audit: a health alert, its recovery in the thread,
    # then a node remediation approved from the channel, followed to its end
    assert "🚨 train-h100-reserved (`tc-h100-reserved`) in together-prod is Degraded" in out
    assert "[#gpu-audit ↳ thread of msg" in out and "✅ Healthy again: Ready" in out
    assert "NVIDIA Xid 79 (3 times)" in out and "[6 Approve]  [7 Reject…]" in out
    assert "✅ Remediation succeeded (SUCCEEDED)" in out
    # provisioning after gpuops's own update is not an incident
    assert "(`tc-h200-ondemand`) in together-prod is" not in out
    # guardrails: a limit refusal, two approvers, a freeze an admin overrides (SPEC §8)
    assert "❌ num_gpus 128 is over together-prod's limit of 64 GPUs per cluster." in out
    assert "decommission needs 2 approvers (approval rule of together-prod)" in out
    assert "✅ Approved by @bob. (1 of 2)" in out and "approved by @bob and @carol" in out
    assert "❌ e2e-delhi is frozen (restart-freeze) until 2030-01-01 00:00 UTC." in out
    assert "Freeze override: @alice overrode restart-freeze" in out
    assert "❄ freeze restart-freeze overridden by @alice" in out
    # the record leaves Slack: #incident's timeline, shared as a file and drawn here
    assert "📎 gpuops-timeline-C0INCIDENT-" in out and "│ # gpuops timeline of C0INCIDENT" in out
    # a Workflow Builder step makes the same request and ends with its outputs
    assert "(a workflow runs the step request_gpu_change for dave in #incident)" in out
    assert "[workflow step request_gpu_change] ended: succeeded — CR-" in out
    # a scheduled change sent at its time (the demo's clock jumps), then reverted
    assert "⏰ scheduled for" in out and "(the demo's clock is now 2:00:00 ahead)" in out
    assert "asked to revert this change" in out and "• `num_gpus 32 → 24`" in out
    assert out.rstrip().endswith("script: 42 steps, all passed")
    # Slack markup reads as a person sees it: groups as handles, no raw mention or shortcode
    assert "Asking @alice, @bob, @platform." in out
    assert "<!subteam^" not in out and "<@U" not in out
    assert not re.search(r"(?<![\w:]):[a-z][a-z0-9_+-]*:(?![\w:])", out), out


def test_the_example_script_passes_over_socket_mode() -> None:
    """gpuops demo --socket: the same script, every request an envelope over Socket Mode."""
    done = run_demo(SCRIPT, socket=True)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "(the bot is connected over Socket Mode)" in out
    assert "🟢 Together accepted the update" in out and "✅ Approved by @bob." in out
    assert "✅ Remediation succeeded (SUCCEEDED)" in out  # the watcher's part, over Socket Mode too
    assert "Freeze override: @alice overrode restart-freeze" in out
    assert "📎 gpuops-timeline-C0INCIDENT-" in out  # the file upload, over Socket Mode too
    assert "[workflow step request_gpu_change] ended: succeeded" in out
    assert out.rstrip().endswith("script: 42 steps, all passed")


def test_a_form_validation_error_is_shown_on_the_field(tmp_path: Path) -> None:
    script = tmp_path / "form.script"
    script.write_text(
        "/gpu update together-prod tc-h200-ondemand\n"
        "submit num_preemptible_gpus=12\n"
        "expect ❌\n"
        "expect multiple of 8\n"
        "submit num_preemptible_gpus=8\n"
        "expect num_preemptible_gpus 0 → 8\n"
    )
    done = run_demo(script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(fix the marked fields" in done.stdout


def test_a_failed_step_makes_the_script_exit_non_zero(tmp_path: Path) -> None:
    script = tmp_path / "bad.script"
    script.write_text("/gpu show together-prod tc-h100-reserved\nexpect no-such-text\npress 9\n")
    done = run_demo(script, wait_seconds=2)  # each failing step waits that long, not 30 s
    assert done.returncode == 1
    assert "✗ expected 'no-such-text' in the last step's output" in done.stdout
    assert "✗ there is no button '9'" in done.stdout
    assert "script: 2 steps, 2 failed" in done.stdout


def test_a_missing_script_is_a_clear_error(tmp_path: Path) -> None:
    done = run_demo(tmp_path / "absent.script")
    assert done.returncode == 2
    assert "cannot read" in done.stdout


def test_the_oncall_script_approves_at_night_and_escalates() -> None:
    """examples/oncall.script (SPEC §16): the on-call approves at 3 a.m. from the DM copy, an
    approver off call is refused, and a request nobody answers escalates to level 2."""
    done = run_demo(ROOT / "examples" / "oncall.script")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "📟 on call now: @bob (level 1)" in out
    assert "you must be on call now on platform-primary (up to level 1)" in out
    assert "[DM with bob" in out and "[DM with alice" in out
    assert "No decision after 10 min: level 2 may approve" in out
    assert "Approved by @alice" in out and "script: 10 steps, all passed" in out


def test_the_home_script_approves_from_the_home_tab() -> None:
    done = run_demo(ROOT / "examples" / "home.script")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "[Home tab of bob]" in out and "(bob presses Approve)" in out
    assert "💰 ≈ +₹3,990.40/h: 2 more nodes at ₹1,995.20/h each, hourly plan" in out
    assert "[Home tab of erin]" in out and "No projects here" in out
    assert out.rstrip().endswith("script: 9 steps, all passed")


def run_interactive(keys: str) -> subprocess.CompletedProcess[str]:
    """``gpuops demo`` at a keyboard (stdin not a terminal: plain lines, EOF is quit)."""
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "demo", "--no-tour"],
        cwd=ROOT,
        input=keys,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_form_asks_again_on_a_choice_not_offered_or_a_required_input_left_empty() -> None:
    """Issue #17 item 1: `foo` at the action prompt, an empty required field (and the
    Reject comment) are asked again; the chosen action is not asked twice (item 16)."""
    keys = [
        "/gpu action e2e-delhi 101",
        "foo",  # not a choice: asked again
        "scale_cluster",
        "",  # additional_nodes is required: asked again
        "2",
        "",  # reason (optional)
        "",  # run_at (optional: it runs once approved)
        "y",
        "remediate tc-h100-reserved",
        "as bob",
        "in gpu-audit",
        "press 8",  # Reject… on the remediation (the request took 1-3, its DM copy 4-6)
        "",  # the comment is required
        "not this node",
        "",
        "quit",
    ]
    done = run_interactive("\n".join(keys) + "\n")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "Traceback" not in out + done.stderr
    assert "✗ action: 'foo' is not an option (options: update_ssh_keys," in out
    assert "✗ additional_nodes is required — type it again, or cancel" in out
    assert "• `scale_cluster: 2 → 4 nodes`" in out
    assert out.count("  action [") == 2  # the typo and the choice; not again after it
    assert "action [scale_cluster]:" not in out
    assert "✗ comment is required — type it again, or cancel" in out
    assert "🚫 Rejected by @bob: “not this node”" in out


def test_a_typo_at_the_keyboard_is_shown_and_quit_still_exits_0() -> None:
    done = run_interactive("press 99\nfrobnicate\nquit\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✗ there is no button '99'" in done.stdout
    assert "✗ unknown console command 'frobnicate'" in done.stdout


def test_home_buttons_keep_their_numbers_and_a_stale_one_says_so() -> None:
    """Item 16: a redrawn tab keeps its numbers; a button gone from the tab, or on someone
    else's, says what to do; a DM is drawn as the person's DM, not as #D…."""
    keys = [
        "/gpu action e2e-delhi 101 restart_workers",
        "as bob",
        "home",
        "home",
        "press 4",  # Approve on bob's Home
        "home",
        "press 4",  # gone from the tab now
        "press 6",  # Show: the summary comes by DM
        "as dave",
        "press 6",
        "quit",
    ]
    done = run_interactive("\n".join(keys) + "\n")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert out.count("[4 Approve]  [5 Deny]") == 2 and "[6 Show]" in out
    assert "✗ button 4 (Approve) is no longer on your Home tab: type home" in out
    assert "[DM with bob · msg" in out and "#D02BOB" not in out
    assert "✗ button 6 is on bob's Home tab, not dave's: type home to draw yours" in out


def test_the_demo_names_its_policy_and_watches_both_providers(tmp_path: Path) -> None:
    """Items 6 and 7: the policy in force is named at start; an E2E cluster that fails
    gets a health alert in #gpu-audit like a Together one."""
    script = tmp_path / "watch.script"
    script.write_text(
        "degrade 106\n"
        "expect 🚨 train-a100-big (`106`) in e2e-delhi is Failed\n"
        "restore 106\n"
        "expect Healthy again: Running\n"
    )
    done = run_demo(script)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "Policy in force: " in out and "demo-policy.yml" in out
    assert "e2e-delhi (e2e, watched)" in out and "together-prod (together, watched)" in out
    assert "break glass on" in out


def test_the_banner_names_the_policy_file_the_bot_reloads_and_its_log(tmp_path: Path) -> None:
    """Issue 33 item 7: the banner named the repository's demo-policy.yml while the bot read
    a copy; it names the copy (the file to edit for a live reload) and the bot's log."""
    script = tmp_path / "one.script"
    script.write_text("/gpu help\n")
    done = run_demo(script)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    in_force = next(line for line in out.splitlines() if line.startswith("Policy in force: "))
    path = Path(in_force.removeprefix("Policy in force: "))
    assert path.name == "policy.yml" and path != DEMO_POLICY_FILE
    assert f"Bot log (reloads, warnings): {path.parent / 'gpuops.log'}" in out


async def test_a_reload_in_the_demo_logs_to_its_file_not_the_chat(
    sqlite_stack: LocalStack, tmp_path: Path
) -> None:
    """Issue 33 item 7: the file the banner names is the one a reload reads, and the
    reload's log line goes to the demo's log file, never to the terminal of the chat."""
    stack = sqlite_stack
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    terminal = io.StringIO()
    configure_logging("WARNING", "text", stream=terminal)
    in_force = stack.runtime.settings.gpuops_policy
    log_file = tmp_path / "gpuops.log"
    banner = policy_banner(in_force, log_file)
    assert f"Policy in force: {stack.runtime.reloader.path}" in banner
    try:
        with logs_to_file(log_file):
            in_force.write_text("projects: {}\n", encoding="utf-8")
            assert await stack.runtime.reload_policy() == "invalid"
        assert "stays in force" in log_file.read_text(encoding="utf-8")
        assert terminal.getvalue() == ""
        logging.getLogger("gpuops").warning("after the demo")
        assert "after the demo" in terminal.getvalue()  # the terminal has its handler back
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in before[0]:
            root.addHandler(handler)
        root.setLevel(before[1])


async def test_a_home_tab_slack_refuses_says_why_at_once(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    out = io.StringIO()
    demo = DemoConsole(stack, Console(file=out, color_system=None, width=200), interactive=False)
    stack.slack.fail("views.publish", error="invalid_arguments", times=-1)
    assert await demo.run_line("home")  # the refusal, not the wait for a tab that never comes
    assert demo.failures == ["the Home tab was not published: Slack refused it (invalid_arguments)"]


def test_an_attached_ip_and_a_security_group_show_in_the_thread_summary(tmp_path: Path) -> None:
    """Item 22: the E2E cluster after attach_ip / add_security_group says so in Slack."""
    script = tmp_path / "access.script"
    script.write_text(
        "/gpu action e2e-delhi 104 attach_ip reserved_ip_id=501\n"
        "/gpu action e2e-delhi 104 add_security_group security_groups_ids=602\n"
    )
    done = run_demo(script)  # it lets the changes finish before it stops
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "Public IP: 10.8.220.7 (reserved IP 501)" in out
    assert "Security groups: default (601), ssh-only (602)" in out


def test_break_glass_as_the_readme_tells_it(tmp_path: Path) -> None:
    """README "Break glass": in the demo, alice approves her own request with a reason."""
    script = tmp_path / "break-glass.script"
    script.write_text(
        "as alice\n"
        "/gpu action e2e-delhi 101 restart_workers\n"
        "press 1\n"
        'submit reason="NCCL hang, nobody else online"\n'
    )
    done = run_demo(script)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "form: Break glass" in out
    assert "Break glass: @alice approved their own request. Reason: NCCL hang" in out
    assert "🚨 break glass" in out


def test_a_scripts_wait_for_what_it_expects_can_be_shortened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(WAIT_ENV, raising=False)
    assert wait_limit() == 30.0
    monkeypatch.setenv(WAIT_ENV, "2")
    assert wait_limit() == 2.0
    monkeypatch.setenv(WAIT_ENV, "soon")
    assert wait_limit() == 30.0  # not a number: the default


def test_the_agent_script_proposes_over_mcp_and_waits_for_confirm() -> None:
    """``agent``: a scripted MCP client runs ``gpuops mcp`` over stdio as dave and proposes
    a change; it waits for dave's Confirm, then for bob's approval (examples/agent.script)."""
    done = run_demo(ROOT / "examples" / "agent.script")
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    assert "(agent) propose_change →" in out and "via agent (gpuops-demo-agent)" in out
    assert out.index("waiting for its requester to confirm") < out.index("Confirmed")
    assert out.rstrip().endswith("script: 5 steps, all passed")
