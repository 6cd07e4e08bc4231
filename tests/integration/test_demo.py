"""`gpuops demo --script`: the embedded default, driven end to end as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "demo.script"


def run_demo(
    script: Path, *, tour: bool = False, socket: bool = False
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "bot.cli", "demo", "--script", str(script)]
    if not tour:
        args.append("--no-tour")
    if socket:
        args.append("--socket")
    return subprocess.run(  # noqa: S603 - our own CLI
        args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
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
    assert "[1 Approve]  [2 Deny]  [3 Cancel]" in out
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
    assert "NVIDIA Xid 79 (3 times)" in out and "[5 Approve]  [6 Reject…]" in out
    assert "✅ Remediation is SUCCEEDED" in out
    # provisioning after gpuops's own update is not an incident
    assert "(`tc-h200-ondemand`) in together-prod is" not in out
    # the record leaves Slack: #incident's timeline, shared as a file and drawn here
    assert "📎 gpuops-timeline-C0INCIDENT-" in out and "│ # gpuops timeline of C0INCIDENT" in out
    # a Workflow Builder step makes the same request and ends with its outputs
    assert "(a workflow runs the step request_gpu_change for dave in #incident)" in out
    assert "[workflow step request_gpu_change] ended: succeeded — CR-" in out
    assert out.rstrip().endswith("script: 23 steps, all passed")


def test_the_example_script_passes_over_socket_mode() -> None:
    """gpuops demo --socket: the same script, every request an envelope over Socket Mode."""
    done = run_demo(SCRIPT, socket=True)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "(the bot is connected over Socket Mode)" in out
    assert "🟢 Together accepted the update" in out and "✅ Approved by @bob." in out
    assert "✅ Remediation is SUCCEEDED" in out  # the watcher's part, over Socket Mode too
    assert "📎 gpuops-timeline-C0INCIDENT-" in out  # the file upload, over Socket Mode too
    assert "[workflow step request_gpu_change] ended: succeeded" in out
    assert out.rstrip().endswith("script: 23 steps, all passed")


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
    done = run_demo(script)
    assert done.returncode == 1
    assert "✗ expected 'no-such-text' in the last step's output" in done.stdout
    assert "✗ there is no button '9'" in done.stdout
    assert "script: 2 steps, 2 failed" in done.stdout


def test_a_missing_script_is_a_clear_error(tmp_path: Path) -> None:
    done = run_demo(tmp_path / "absent.script")
    assert done.returncode == 2
    assert "cannot read" in done.stdout


def test_the_home_script_approves_from_the_home_tab() -> None:
    done = run_demo(ROOT / "examples" / "home.script")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "[Home tab of bob]" in out and "(bob presses Approve)" in out
    assert "💰 ≈ +₹3,990.40/h: 2 more nodes at ₹1,995.20/h each, hourly plan" in out
    assert "[Home tab of erin]" in out and "No projects here" in out
    assert out.rstrip().endswith("script: 9 steps, all passed")
