"""`gpuops check-config`: the grant table it prints and the errors it reports."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.check_config import run_check_config
from bot.config import Settings
from tests.support.catalog import CATALOG

POLICY = """\
projects:
  together-prod:
    provider: together
    project_id: proj-123
  e2e-delhi:
    provider: e2e
    project_id: 12345
    location: Delhi
    api_key_env: E2E_DELHI_KEY
grants:
  - users: [U01ALICE]
    usergroups: [S0PLATFORM]
    channels: [C0INCIDENT]
    projects: [together-prod, e2e-delhi]
    role: operator
  - users: [U02BOB]
    projects: ["*"]
    role: admin
"""

CREDENTIALS = {
    "TOGETHER_API_KEY": "tk-very-secret-value",
    "E2E_DELHI_KEY": "e2e-very-secret-key",
    "E2E_AUTH_TOKEN": "e2e-very-secret-token",
}


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "GPUOPS_POLICY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1-2-check")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "signing-secret-check")
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def run(tmp_path: Path, policy_text: str) -> tuple[int, str]:
    (tmp_path / "policy.yml").write_text(policy_text)
    out = io.StringIO()
    code = run_check_config(Settings(), CATALOG, out)
    return code, out.getvalue()


def test_good_configuration_prints_the_table(tmp_path: Path) -> None:
    code, text = run(tmp_path, POLICY)
    assert code == 0, text
    assert "configuration OK" in text
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert "user U01ALICE together-prod operator C0INCIDENT" in lines
    assert "group S0PLATFORM e2e-delhi operator C0INCIDENT" in lines
    assert "user U02BOB e2e-delhi admin any" in lines
    assert "user U02BOB together-prod admin any" in lines
    assert "e2e-delhi e2e (Delhi, project 12345) E2E_DELHI_KEY, E2E_AUTH_TOKEN - off" in lines
    for secret in CREDENTIALS.values():
        assert secret not in text


def test_bad_policy_names_the_key(tmp_path: Path) -> None:
    code, text = run(tmp_path, POLICY.replace("location: Delhi", "location: Mumbai"))
    assert code == 1
    assert "error: policy.yml: projects.e2e-delhi.location: Input should be 'Delhi'" in text


def test_missing_credential_names_the_variable_and_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("E2E_DELHI_KEY")
    code, text = run(tmp_path, POLICY)
    assert code == 1
    assert "error: E2E_DELHI_KEY is not set (credentials of project e2e-delhi)" in text
    assert "user U02BOB" in text  # the table is still shown


def test_credentials_in_dotenv_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOGETHER_API_KEY")
    (tmp_path / ".env").write_text("TOGETHER_API_KEY=tk-from-dotenv\n")
    code, text = run(tmp_path, POLICY)
    assert code == 0, text


def test_missing_slack_settings_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN")
    code, text = run(tmp_path, POLICY)
    assert code == 1
    assert "error: SLACK_BOT_TOKEN is not set" in text


def test_missing_policy_file(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_check_config(Settings(gpuops_policy=tmp_path / "absent.yml"), CATALOG, out) == 1
    assert "absent.yml: policy file not found" in out.getvalue()


def test_project_without_grant_is_a_warning(tmp_path: Path) -> None:
    policy = POLICY.replace('projects: ["*"]', "projects: [together-prod]")
    code, text = run(
        tmp_path,
        policy.replace("projects: [together-prod, e2e-delhi]", "projects: [together-prod]"),
    )
    assert code == 0, text
    assert "warning: no grant names e2e-delhi; nobody can use it" in text


BAD_EVERYWHERE = """\
projects:
  together-prod:
    provider: together
    notify_channel: "#incident"
    watch:
      every_seconds: 5
  e2e-delhi:
    provider: e2e
    project_id: 0
    location: Delhi
    watch: {status: true}
grants:
  - users: [alice]
    projects: [together-prod, nope]
    role: admin
  - channels: [incident]
    projects: ['*']
    role: boss
  - usergroups: [U0WRONG]
    projects: [e2e-delhi]
    role: viewer
"""


def test_every_error_of_a_bad_file_is_reported_in_one_run(tmp_path: Path) -> None:
    code, text = run(tmp_path, BAD_EVERYWHERE)
    assert code == 1
    errors = sorted(line.strip() for line in text.splitlines() if line.strip().startswith("error:"))
    assert errors == sorted(
        f"error: policy.yml: {problem}"
        for problem in [
            "projects.together-prod.notify_channel: use the Slack channel id (C… or G…), "
            "not a name or mention: '#incident'",
            "projects.together-prod.watch.every_seconds: Input should be greater than or equal "
            "to 15",
            "projects.e2e-delhi.project_id: Input should be greater than 0",
            "projects.e2e-delhi: watch needs notify_channel (where to post)",
            "grants[0].users[0]: use the Slack user id (U… or W…), not a name or mention: 'alice'",
            "grants[0].projects: unknown project 'nope' (known: e2e-delhi, together-prod)",
            "grants[1]: a grant needs at least one user or usergroup",
            "grants[1].channels[0]: use the Slack channel id (C… or G…), not a name or mention: "
            "'incident'",
            "grants[1].role: unknown role 'boss'; use viewer, operator, approver or admin",
            "grants[2].usergroups[0]: use the Slack usergroup id (S…), not a name or mention: "
            "'U0WRONG'",
        ]
    )
    assert "10 error(s):" in text


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("users", "S0PLATFORM"),  # a group where a user belongs
        ("users", "u01alice"),
        ("usergroups", "C0INCIDENT"),
        ("channels", "U01ALICE"),
        ("channels", "D0DIRECT"),  # a DM is no place for a grant
    ],
)
def test_id_shapes_are_checked_per_kind(tmp_path: Path, where: str, value: str) -> None:
    principal = "" if where == "users" else "    users: [U03CAROL]\n"
    grant = f"  - {where}: [{value}]\n{principal}    projects: [together-prod]\n    role: viewer\n"
    code, text = run(tmp_path, POLICY + grant)
    assert code == 1
    assert f"grants[2].{where}[0]: use the Slack" in text and f"'{value}'" in text


def test_the_watch_settings_are_shown(tmp_path: Path) -> None:
    watched = POLICY.replace(
        "    project_id: proj-123\n",
        "    project_id: proj-123\n    notify_channel: C0GPUAUDIT\n"
        "    watch:\n      every_seconds: 120\n      remediations: false\n"
        "      reservation_reminders: [48h, 2h]\n",
    )
    code, text = run(tmp_path, watched)
    assert code == 0, text
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert "PROJECT PROVIDER CREDENTIALS NOTIFY WATCH" in lines
    assert (
        "together-prod together (project proj-123) TOGETHER_API_KEY C0GPUAUDIT "
        "every 120 s: status, reminders 48h/2h" in lines
    )


def test_the_watch_line_says_only_what_the_provider_has(tmp_path: Path) -> None:
    # E2E has neither remediations nor reservations (its descriptor says so): the watcher
    # follows its status only, whatever the watch keys say.
    watched = POLICY.replace(
        "    location: Delhi\n",
        "    location: Delhi\n    notify_channel: C0GPUAUDIT\n    watch: {every_seconds: 60}\n",
    )
    code, text = run(tmp_path, watched)
    assert code == 0, text
    line = next(line for line in text.splitlines() if line.strip().startswith("e2e-delhi"))
    assert line.rstrip().endswith("every 60 s: status")


def test_a_missing_token_names_the_command_check_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN")
    _, text = run(tmp_path, POLICY)
    assert "SLACK_BOT_TOKEN is not set; `gpuops check-config` needs it (xoxb-…)" in text


GUARDED = (
    POLICY
    + """\
approvals:
  break_glass: true
  rules:
    - projects: [together-prod]
      kinds: [decommission, change_type]
      approvers: 2
      usergroups: [S0ONCALL, S0PLATFORM]
    - projects: ["*"]
      approvers: 1
freezes:
  - name: year-end
    projects: ["*"]
    from: "2026-12-24T00:00:00Z"
    to: "2027-01-02T00:00:00Z"
  - name: weekend
    projects: [together-prod]
    kinds: [scale_down]
    weekly: {days: [sat, sun], from: "00:00", to: "24:00", timezone: "Europe/Berlin"}
  - name: summer
    projects: [e2e-delhi]
    from: "2026-07-01T00:00:00Z"
    to: "2026-07-02T00:00:00Z"
  - name: spring
    projects: [e2e-delhi]
    from: "2027-03-01T00:00:00Z"
    to: "2027-03-02T00:00:00Z"
"""
)


def _rows(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]


def test_the_approval_rules_and_the_freezes_are_shown_with_the_active_one_flagged(
    tmp_path: Path,
) -> None:
    (tmp_path / "policy.yml").write_text(GUARDED)
    out = io.StringIO()
    friday_noon = datetime(2026, 12, 25, 12, 0, tzinfo=UTC)
    assert run_check_config(Settings(), CATALOG, out, now=friday_noon) == 0, out.getvalue()
    lines = _rows(out.getvalue())
    assert "PROJECTS KINDS APPROVERS GROUPS" in lines
    assert "together-prod decommission, change_type 2 S0ONCALL, S0PLATFORM" in lines
    assert "* * 1 anyone" in lines
    assert "freezes (as of 2026-12-25 12:00 UTC):" in lines
    assert (
        "year-end * * 2026-12-24 00:00 UTC to 2027-01-02 00:00 UTC "
        "ACTIVE until 2027-01-02 00:00 UTC"
    ) in lines
    # Saturday and Sunday in Berlin: the next weekend, from Friday 23:00 UTC, as one window
    assert (
        "weekend together-prod scale_down weekly sat, sun 00:00-24:00 Europe/Berlin "
        "next 2026-12-25 23:00 UTC to 2026-12-27 23:00 UTC"
    ) in lines
    assert "summer e2e-delhi * 2026-07-01 00:00 UTC to 2026-07-02 00:00 UTC over" in lines
    assert "spring e2e-delhi * 2027-03-01 00:00 UTC to 2027-03-02 00:00 UTC upcoming" in lines


def test_a_weekly_freeze_in_force_is_flagged_until_its_end(tmp_path: Path) -> None:
    (tmp_path / "policy.yml").write_text(GUARDED)
    out = io.StringIO()
    sunday = datetime(2027, 1, 10, 9, 30, tzinfo=UTC)
    assert run_check_config(Settings(), CATALOG, out, now=sunday) == 0, out.getvalue()
    weekend = next(line for line in _rows(out.getvalue()) if line.startswith("weekend "))
    assert weekend.endswith("ACTIVE until 2027-01-10 23:00 UTC")
    year_end = next(line for line in _rows(out.getvalue()) if line.startswith("year-end "))
    assert year_end.endswith(" over")


def test_no_rules_and_no_freezes_say_so(tmp_path: Path) -> None:
    code, text = run(tmp_path, POLICY)
    assert code == 0, text
    assert "rules: none (a change that needs approval needs one approver)" in text
    assert "freezes: none" in text


TWO_APPROVERS = POLICY + "approvals:\n  rules:\n    - projects: ['*']\n      approvers: 2\n"


def test_a_rule_needing_more_approvers_than_the_grants_name_is_warned(tmp_path: Path) -> None:
    # Only U02BOB (admin) may approve; a 2-approver rule can never be met on either project.
    code, text = run(tmp_path, TWO_APPROVERS)
    assert code == 0, text
    for project in ("e2e-delhi", "together-prod"):
        assert (
            f"warning: approvals.rules[0] needs 2 approvers on {project} but the grants let "
            "only 1 approve (U02BOB): no request it matches can ever be approved"
        ) in text


def test_a_rule_that_approvers_can_meet_or_that_a_group_may_meet_is_not_warned(
    tmp_path: Path,
) -> None:
    named = TWO_APPROVERS.replace("  - users: [U02BOB]", "  - users: [U02BOB, U03CAROL]")
    assert "warning: approvals" not in run(tmp_path, named)[1]
    # A group's members are not in the file: offline, nothing is claimed about them.
    grouped = TWO_APPROVERS.replace("role: operator", "role: approver")
    assert "warning: approvals" not in run(tmp_path, grouped)[1]


SPEND = """\
teams:
  research:
    projects: [together-prod, e2e-delhi]
    budget: {monthly_usd: 80000, warn_at: [80], approval_at: 90, deny_at: 100}
    quota: {max_gpus: 512}
digest: {channel: C0SPEND, weekday: mon, hour: 9}
"""


def test_the_spend_keys_are_reported_with_what_would_make_a_budget_wrong(
    tmp_path: Path,
) -> None:
    policy = POLICY.replace(
        "    project_id: proj-123\n",
        "    project_id: proj-123\n    budget: {monthly_usd: 5000, deny_at: 100, "
        "time_zone: Europe/Berlin}\n",
    )
    code, text = run(tmp_path, policy + SPEND)
    assert code == 0, text
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert "together-prod 5000 deny 100% Europe/Berlin" in lines, text
    assert "team research 80000 warn 80%; +1 approver 90%; deny 100% UTC" in lines, text
    assert "research together-prod, e2e-delhi 512" in lines, text
    assert "digest: C0SPEND, mon 09:00 UTC" in lines, text
    assert (
        "warning: together-prod has a budget but is not watched: no usage of it is recorded"
        in lines
    )
    assert "warning: together-prod has a budget but no prices: its cost is unknown" in lines
    assert any("e2e-delhi's prices come from its plans" in line for line in lines), text


def test_a_project_in_two_teams_is_an_error(tmp_path: Path) -> None:
    teams = "teams:\n  a: {projects: [together-prod]}\n  b: {projects: [together-prod]}\n"
    code, text = run(tmp_path, POLICY + teams)
    assert code == 1
    assert "'together-prod' is already in team a (a project belongs to one team)" in text
