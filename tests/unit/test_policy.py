"""The policy file: validation with key paths, roles, grants, deny-by-default authorization."""

from __future__ import annotations

import logging
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from bot.core.authorizer import Authorizer
from bot.core.policy import GrantRow, Policy, PolicyError, PolicyHolder, Role, describe_grants
from bot.providers.e2e import E2ESection
from bot.providers.together import TogetherSection
from tests.support.catalog import CATALOG, load_policy, project_model

TOGETHER_KINDS = CATALOG.kinds("together")
E2E_KINDS = CATALOG.kinds("e2e")
DEFAULT_APPROVAL = {
    name: CATALOG.descriptor(name).approval_by_default for name in ("together", "e2e")
}
TogetherProject = project_model("together")
E2EProject = project_model("e2e")

POLICY = """\
projects:
  together-prod:
    provider: together
    project_id: proj-123
    clusters: ["c-prod-*", "c-shared"]
    notify_channel: C0AUDIT
  together-dev:
    provider: together
    require_approval: [scale_up]
  e2e-delhi:
    provider: e2e
    project_id: 12345
    location: Delhi
    active_iam: 7
grants:
  - users: [U01ALICE]
    projects: [together-prod, e2e-delhi]
    role: operator
  - usergroups: [S0PLATFORM]
    projects: ["*"]
    role: viewer
  - users: [U01ALICE]
    channels: [C0INCIDENT]
    projects: [together-prod]
    role: approver
  - users: [U02BOB]
    channels: [C0INCIDENT, C0OPS]
    projects: [together-prod]
    role: admin
  - usergroups: [S0BROKEN]
    projects: [together-dev]
    role: admin
approvals:
  expire_after_minutes: 45
  break_glass: true
"""


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # so that messages name the file as "policy.yml"


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "policy.yml").write_text(textwrap.dedent(text))
    return Path("policy.yml")


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return load_policy(write(tmp_path, POLICY))


@dataclass
class FakeGroups:
    groups: dict[str, frozenset[str]] = field(
        default_factory=lambda: {
            "S0PLATFORM": frozenset({"U03CAROL"}),
            "S0BROKEN": frozenset({"U04DAVE"}),
        }
    )
    broken: set[str] = field(default_factory=lambda: {"S0BROKEN"})
    calls: list[str] = field(default_factory=list)

    def cached(self, usergroup_id: str) -> frozenset[str] | None:
        return None  # every membership is looked up (and counted in calls)

    async def members(self, usergroup_id: str) -> frozenset[str]:
        self.calls.append(usergroup_id)
        if usergroup_id in self.broken:
            raise ConnectionError("slack unreachable")
        return self.groups.get(usergroup_id, frozenset())


@pytest.fixture
def auth(policy: Policy) -> Authorizer:
    return Authorizer(PolicyHolder(policy), FakeGroups())


# --- loading and validation --------------------------------------------------------------


def test_valid_policy_loads(policy: Policy) -> None:
    prod = policy.projects["together-prod"]
    assert isinstance(prod, TogetherSection) and isinstance(prod, TogetherProject)
    assert prod.api_key_env == "TOGETHER_API_KEY"
    assert prod.project_id == "proj-123"
    assert prod.notify_channel == "C0AUDIT"
    delhi = policy.projects["e2e-delhi"]
    assert isinstance(delhi, E2ESection) and isinstance(delhi, E2EProject)
    assert (delhi.project_id, delhi.location, delhi.active_iam) == (12345, "Delhi", 7)
    assert (delhi.api_key_env, delhi.auth_token_env) == ("E2E_API_KEY", "E2E_AUTH_TOKEN")
    assert policy.projects["together-dev"].clusters == ["*"]
    assert policy.grants[0].role is Role.operator
    assert policy.grants[1].channels is None
    assert policy.approvals.expire_after_minutes == 45
    assert policy.approvals.break_glass is True


def test_round_trip_through_yaml(policy: Policy, tmp_path: Path) -> None:
    dumped = policy.model_dump(mode="json")
    assert dumped["grants"][0]["role"] == "operator"
    again = tmp_path / "again.yml"
    again.write_text(yaml.safe_dump(dumped))
    assert load_policy(again) == policy


def test_minimal_policy_gets_defaults(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, "projects:\n  p1:\n    provider: together\n"))
    assert policy.grants == []
    assert policy.approvals.expire_after_minutes == 30
    assert policy.approvals.break_glass is False


def test_numeric_together_project_id_is_kept_as_text(tmp_path: Path) -> None:
    policy = load_policy(
        write(tmp_path, "projects:\n  p:\n    provider: together\n    project_id: 42\n")
    )
    assert policy.projects["p"].model_dump()["project_id"] == "42"


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(PolicyError) as caught:
        load_policy(write(tmp_path, text))
    return str(caught.value)


TOGETHER = "projects:\n  together-prod:\n    provider: together\n"
GRANT = "grants:\n  - users: [U1]\n    projects: [together-prod]\n    role: operator\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (TOGETHER + "colour: red\n", "policy.yml: colour: unknown key (allowed: projects, grants"),
        (
            TOGETHER + "    colour: red\n",
            "policy.yml: projects.together-prod.colour: unknown key (allowed: ",
        ),
        (
            TOGETHER + GRANT + "    colour: red\n",
            "policy.yml: grants[0].colour: unknown key (allowed: users, usergroups",
        ),
        (
            TOGETHER
            + GRANT
            + "  - users: [U2]\n    projects: [together-prod, nope]\n    role: viewer\n",
            "policy.yml: grants[1].projects: unknown project 'nope' (known: together-prod)",
        ),
        (
            TOGETHER + "grants:\n  - users: [U1]\n    projects: ['*']\n    role: boss\n",
            "policy.yml: grants[0].role: unknown role 'boss'; use viewer, operator, approver",
        ),
        (
            "projects:\n  e2e-delhi:\n    provider: e2e\n    location: Delhi\n",
            "policy.yml: projects.e2e-delhi.project_id: Field required",
        ),
        (
            "projects:\n  e2e-delhi:\n    provider: e2e\n    project_id: 1\n",
            "policy.yml: projects.e2e-delhi.location: Field required",
        ),
        (
            "projects:\n  e2e-delhi:\n    provider: e2e\n    project_id: 1\n    location: Mumbai\n",
            "policy.yml: projects.e2e-delhi.location: Input should be 'Delhi' or 'Chennai'",
        ),
        (
            TOGETHER + "    require_approval: [scale_down, restart_cluster]\n",
            "policy.yml: projects.together-prod.require_approval[1]: Input should be 'scale_up'",
        ),
        (
            "projects:\n  e:\n    provider: e2e\n    project_id: 1\n    location: Delhi\n"
            "    require_approval: [scale_up]\n",
            "policy.yml: projects.e.require_approval[0]: Input should be 'update_ssh_keys'",
        ),
        (
            TOGETHER
            + "grants:\n  - channels: [C1]\n    projects: [together-prod]\n    role: admin\n",
            "policy.yml: grants[0]: a grant needs at least one user or usergroup",
        ),
        (
            "projects:\n  'bad key':\n    provider: together\n",
            "policy.yml: projects.bad key: project keys may use only letters, digits, - and _",
        ),
        (
            "projects:\n  p:\n    provider: aws\n",
            "policy.yml: projects.p.provider: unknown provider 'aws'; use together or e2e",
        ),
        (
            "projects:\n  p:\n    project_id: x\n",
            "policy.yml: projects.p.provider: missing; set provider: together or provider: e2e",
        ),
        (
            TOGETHER + "approvals:\n  expire_after_minutes: 0\n",
            "policy.yml: approvals.expire_after_minutes: Input should be greater than or equal",
        ),
        (
            TOGETHER + "grants:\n  - users: ['@alice']\n    projects: ['*']\n    role: admin\n",
            "policy.yml: grants[0].users[0]: use the Slack user id (U… or W…), not a name",
        ),
        ("projects: {}\n", "policy.yml: projects: Dictionary should have at least 1 item"),
        ("- just\n- a list\n", "policy.yml: the policy must be a mapping"),
        ("# nothing\n", "policy.yml: the policy file is empty"),
    ],
)
def test_validation_errors_name_the_key_path(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in _error(tmp_path, text)


def test_a_pasted_key_in_place_of_a_variable_name_is_refused_without_echo(tmp_path: Path) -> None:
    message = _error(tmp_path, TOGETHER + "    api_key_env: tgp_v1_s3cr3tvalue\n")
    assert (
        "projects.together-prod.api_key_env: must be the NAME of an environment variable" in message
    )
    assert "tgp_v1_s3cr3tvalue" not in message


def test_every_unknown_project_is_reported(tmp_path: Path) -> None:
    grants = "grants:\n  - users: [U1]\n    projects: [a]\n    role: viewer\n" + (
        "  - users: [U2]\n    projects: ['*', b]\n    role: viewer\n"
    )
    lines = _error(tmp_path, TOGETHER + grants).splitlines()
    assert lines == [
        "policy.yml: grants[0].projects: unknown project 'a' (known: together-prod)",
        "policy.yml: grants[1].projects: unknown project 'b' (known: together-prod)",
    ]


def test_yaml_syntax_error_gives_the_line(tmp_path: Path) -> None:
    message = _error(tmp_path, "projects:\n  p:\n    provider: [together\n")
    assert message.startswith("policy.yml: YAML error at line 4")


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    message = _error(tmp_path, TOGETHER + "    provider: e2e\n")
    assert "policy.yml: YAML error at line 4, column 5: duplicate key 'provider'" in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(tmp_path / "absent.yml")
    assert (
        str(caught.value)
        == f"{tmp_path / 'absent.yml'}: policy file not found (GPUOPS_POLICY names it)"
    )


# --- roles ------------------------------------------------------------------------------


def test_roles_are_ordered() -> None:
    assert Role.viewer < Role.operator < Role.approver < Role.admin
    assert str(Role.approver) == "approver"


async def test_user_grant(auth: Authorizer) -> None:
    assert await auth.role_for("U01ALICE", "e2e-delhi", "C0GENERAL") is Role.operator


async def test_usergroup_grant_and_star_projects(auth: Authorizer) -> None:
    for project in ("together-prod", "together-dev", "e2e-delhi"):
        assert await auth.role_for("U03CAROL", project, None) is Role.viewer


async def test_channel_scoped_grant(auth: Authorizer) -> None:
    assert await auth.role_for("U02BOB", "together-prod", "C0OPS") is Role.admin
    assert await auth.role_for("U02BOB", "together-prod", "C0GENERAL") is None
    assert await auth.role_for("U02BOB", "together-prod", None) is None


async def test_highest_of_several_grants(auth: Authorizer) -> None:
    assert await auth.role_for("U01ALICE", "together-prod", "C0GENERAL") is Role.operator
    assert await auth.role_for("U01ALICE", "together-prod", "C0INCIDENT") is Role.approver


async def test_stranger_and_unknown_project_get_nothing(auth: Authorizer) -> None:
    assert await auth.role_for("U99STRANGER", "together-prod", None) is None
    assert await auth.role_for("U01ALICE", "no-such", None) is None
    assert await auth.role_for("U01ALICE", "together-dev", None) is None


async def test_resolver_failure_means_that_group_grants_nothing(
    policy: Policy, caplog: pytest.LogCaptureFixture
) -> None:
    groups = FakeGroups(broken={"S0BROKEN", "S0PLATFORM"})
    auth = Authorizer(PolicyHolder(policy), groups)
    with caplog.at_level(logging.WARNING, logger="bot.core.authorizer"):
        assert await auth.role_for("U04DAVE", "together-dev", None) is None
        assert await auth.role_for("U03CAROL", "e2e-delhi", None) is None
        # A direct grant does not depend on the broken groups.
        assert await auth.role_for("U01ALICE", "e2e-delhi", None) is Role.operator
    assert "user group S0BROKEN could not be resolved (ConnectionError)" in caplog.text


async def test_groups_are_resolved_only_when_needed(policy: Policy) -> None:
    groups = FakeGroups()
    await Authorizer(PolicyHolder(policy), groups).role_for("U01ALICE", "e2e-delhi", None)
    assert groups.calls == ["S0PLATFORM"]  # S0BROKEN's grant does not cover e2e-delhi


# --- check reasons ------------------------------------------------------------------------


async def test_check_allows_with_enough_role(auth: Authorizer) -> None:
    decision = await auth.check("U01ALICE", "together-prod", "C0INCIDENT", Role.approver)
    assert decision.allowed
    assert decision.role is Role.approver
    assert decision.reason == "you are approver on together-prod"


async def test_check_same_refusal_for_unknown_and_unseen_projects(auth: Authorizer) -> None:
    unknown = await auth.check("U99STRANGER", "nope", None, Role.viewer)
    unseen = await auth.check("U99STRANGER", "together-prod", None, Role.viewer)
    assert unknown.reason == "no such project or no access: nope"
    assert unseen.reason == "no such project or no access: together-prod"
    assert not unknown.allowed and not unseen.allowed
    assert unknown.role is None and unseen.role is None


async def test_check_role_too_low(auth: Authorizer) -> None:
    decision = await auth.check(
        "U01ALICE", "e2e-delhi", "C0GENERAL", Role.approver, action="approving"
    )
    assert not decision.allowed
    assert decision.role is Role.operator
    assert decision.reason == "you are operator on e2e-delhi; approving needs approver"


async def test_check_role_too_low_here_but_enough_elsewhere(auth: Authorizer) -> None:
    decision = await auth.check(
        "U01ALICE", "together-prod", "C0GENERAL", Role.approver, action="approving"
    )
    assert decision.reason == (
        "you are operator on together-prod; approving needs approver "
        "(your approver grant holds in <#C0INCIDENT> — ask there)"
    )


async def test_check_grant_limited_to_other_channels(auth: Authorizer) -> None:
    decision = await auth.check("U02BOB", "together-prod", "C0GENERAL", Role.viewer)
    assert not decision.allowed
    assert decision.role is None
    assert (
        decision.reason
        == "your grant on together-prod holds only in <#C0INCIDENT>, <#C0OPS> — ask there"
    )


# --- projects and clusters ------------------------------------------------------------------


async def test_projects_for(auth: Authorizer) -> None:
    assert await auth.projects_for("U01ALICE", "C0GENERAL") == ["e2e-delhi", "together-prod"]
    assert await auth.projects_for("U01ALICE", "C0INCIDENT", Role.approver) == ["together-prod"]
    assert await auth.projects_for("U01ALICE", "C0GENERAL", Role.approver) == []
    assert await auth.projects_for("U03CAROL", None) == [
        "e2e-delhi",
        "together-dev",
        "together-prod",
    ]
    assert await auth.projects_for("U03CAROL", None, Role.operator) == []
    assert await auth.projects_for("U02BOB", "C0OPS") == ["together-prod"]
    assert await auth.projects_for("U02BOB", "C0GENERAL") == []
    assert await auth.projects_for("U99STRANGER", None) == []


def test_cluster_globs(auth: Authorizer) -> None:
    assert auth.cluster_allowed("together-prod", "c-prod-1")
    assert auth.cluster_allowed("together-prod", "c-shared")
    assert not auth.cluster_allowed("together-prod", "c-dev-1")
    assert not auth.cluster_allowed("together-prod", "C-PROD-1")
    assert auth.cluster_allowed("e2e-delhi", "4711")
    assert not auth.cluster_allowed("no-such", "4711")


def test_describe_grants_expands_star(policy: Policy) -> None:
    rows = describe_grants(policy)
    assert GrantRow("user U01ALICE", "together-prod", Role.operator, None) in rows
    assert GrantRow("user U01ALICE", "together-prod", Role.approver, ("C0INCIDENT",)) in rows
    assert GrantRow("user U02BOB", "together-prod", Role.admin, ("C0INCIDENT", "C0OPS")) in rows
    platform = [r.project for r in rows if r.principal == "group S0PLATFORM"]
    assert platform == ["e2e-delhi", "together-dev", "together-prod"]
    assert len(rows) == 2 + 1 + 1 + 3 + 1


# --- approval -----------------------------------------------------------------------------


def test_kind_sets_match_the_spec() -> None:
    kinds = {"scale_up", "scale_down", "change_type", "extend_reservation", "decommission"}
    assert kinds == TOGETHER_KINDS
    assert len(E2E_KINDS) == 9
    assert DEFAULT_APPROVAL["e2e"] == E2E_KINDS - {"attach_ip", "add_security_group"}


@pytest.mark.parametrize(
    ("kind", "needs"),
    [
        ("scale_up", False),
        ("scale_down", True),
        ("change_type", True),
        ("extend_reservation", False),
        ("decommission", True),
    ],
)
def test_together_defaults(policy: Policy, kind: str, needs: bool) -> None:
    assert policy.requires_approval("together-prod", [kind]) is needs


@pytest.mark.parametrize(
    ("kind", "needs"),
    [
        ("update_ssh_keys", True),
        ("update_image", True),
        ("restart_workers", True),
        ("restart_cluster", True),
        ("scale_cluster", True),
        ("attach_ip", False),
        ("detach_ip", True),
        ("add_security_group", False),
        ("remove_security_group", True),
    ],
)
def test_e2e_defaults(policy: Policy, kind: str, needs: bool) -> None:
    assert policy.requires_approval("e2e-delhi", [kind]) is needs


def test_project_override_replaces_the_default(policy: Policy) -> None:
    assert policy.requires_approval("together-dev", ["scale_up"])
    assert not policy.requires_approval("together-dev", ["scale_down", "decommission"])
    assert policy.approval_kinds("together-dev") == {"scale_up"}


def test_any_kind_needing_approval_makes_the_change_need_it(policy: Policy) -> None:
    assert policy.requires_approval("together-prod", iter(["scale_up", "scale_down"]))
    assert not policy.requires_approval("together-prod", [])


def test_unknown_kind_or_project_is_a_programming_error(policy: Policy) -> None:
    with pytest.raises(ValueError, match="unknown change kind"):
        policy.requires_approval("together-prod", ["scale_cluster"])
    with pytest.raises(KeyError, match="no project 'nope'"):
        policy.requires_approval("nope", ["scale_up"])


def test_watch_is_read_with_its_defaults(tmp_path: Path) -> None:
    loaded = load_policy(
        write(tmp_path, TOGETHER + "    notify_channel: C0AUDIT\n    watch:\n      status: false\n")
    )
    watch = loaded.projects["together-prod"].watch
    assert watch is not None and watch.every_seconds == 60 and not watch.status
    assert watch.remediations and watch.reservation_reminders == ("24h", "1h")
    assert load_policy(write(tmp_path, TOGETHER)).projects["together-prod"].watch is None


@pytest.mark.parametrize(
    ("watch", "expected"),
    [
        (
            "    watch: {}\n",
            "policy.yml: projects.together-prod: watch needs notify_channel (where to post)",
        ),
        (
            "    notify_channel: C0AUDIT\n    watch:\n      every_seconds: 5\n",
            "policy.yml: projects.together-prod.watch.every_seconds: Input should be greater "
            "than or equal to 15",
        ),
        (
            "    notify_channel: C0AUDIT\n    watch:\n      reservation_reminders: [soon]\n",
            "is not a reminder horizon like 24h, 1h or 30m",
        ),
        (
            "    notify_channel: C0AUDIT\n    watch:\n      everything: true\n",
            "policy.yml: projects.together-prod.watch.everything: unknown key",
        ),
    ],
)
def test_watch_mistakes_name_the_key(tmp_path: Path, watch: str, expected: str) -> None:
    assert expected in _error(tmp_path, TOGETHER + watch)


def test_the_readmes_approval_table_is_the_default() -> None:
    """README "Which changes wait for approval" says what DEFAULT_APPROVAL does."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| Together \| `(\w+)` \|[^|]*\| (yes|no) \|$", readme, re.MULTILINE)
    assert {kind for kind, needs in rows if needs == "yes"} == DEFAULT_APPROVAL["together"]
    assert {kind for kind, _ in rows} == TOGETHER_KINDS
    [e2e] = re.findall(r"^\| E2E \|.*\| yes, except `(\w+)` and `(\w+)` \|$", readme, re.MULTILINE)
    assert E2E_KINDS - DEFAULT_APPROVAL["e2e"] == set(e2e)


def test_one_run_reports_a_kind_typo_beside_the_structural_errors(tmp_path: Path) -> None:
    # A rule's own bad key, a freeze's and a grant's errors used to hide the kind typos
    # until they were fixed (the check on kinds ran only on an otherwise valid file).
    text = (
        TOGETHER
        + "    colour: red\n"
        + "grants:\n  - users: [U1]\n    projects: ['*']\n    role: aprover\n"
        + "approvals:\n  rules:\n    - kinds: [scale_dwn]\n      approverz: 2\n"
        + "freezes:\n  - kinds: [scale_upp]\n    projects: ['*']\n"
    )
    lines = _error(tmp_path, text).splitlines()
    assert "policy.yml: projects.together-prod.colour: unknown key" in "\n".join(lines)
    assert any(
        "grants[0].role: unknown role 'aprover' (did you mean 'approver'?)" in line
        for line in lines
    )
    assert any(
        "approvals.rules[0].approverz: unknown key (allowed: " in line
        and line.endswith("; did you mean 'approvers'?")
        for line in lines
    )
    assert any(
        "approvals.rules[0].kinds: unknown change kind 'scale_dwn' (did you mean 'scale_down'?)"
        in line
        for line in lines
    )
    assert any(
        "freezes[0].kinds: unknown change kind 'scale_upp' (did you mean 'scale_up'?)" in line
        for line in lines
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "projects:\n  p:\n    provider: togther\n",
            "projects.p.provider: unknown provider 'togther' (did you mean 'together'?)",
        ),
        (TOGETHER + "grant:\n  - users: [U1]\n", "exchange_rates); did you mean 'grants'?"),
        (
            TOGETHER + "approvals:\n  rules:\n    - kinds: [scale_dwn]\n",
            "approvals.rules[0].kinds: unknown change kind 'scale_dwn' "
            "(did you mean 'scale_down'?)",
        ),
    ],
)
def test_a_policy_typo_gets_a_did_you_mean(tmp_path: Path, text: str, expected: str) -> None:
    lines = _error(tmp_path, text).splitlines()
    assert sum(expected in line for line in lines) == 1, lines  # once, not twice
