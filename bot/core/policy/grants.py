"""What a policy's grants give: the approval rules no one can satisfy, and a row per
(principal, project) for ``check-config``."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.policy.model import Policy, Role


def unmeetable_rules(policy: Policy) -> list[str]:
    """Warnings for the approval rules that need more approvers on a project than its
    grants name people who may approve (known offline only when the rule names no user
    group and no approver grant of the project is a group's)."""
    warnings = []
    for i, rule in enumerate(policy.approvals.rules):
        if rule.usergroups or rule.oncall:
            continue  # who is in a group or on call is not in the file
        names = sorted(policy.projects) if "*" in rule.projects else rule.projects
        for project in (name for name in names if name in policy.projects):
            eligible = _named_approvers(policy, project)
            if eligible is not None and len(eligible) < rule.needed:
                who = ", ".join(sorted(eligible)) or "nobody"
                warnings.append(
                    f"approvals.rules[{i}] needs {rule.needed} approvers on {project} "
                    f"but the grants let only {len(eligible)} approve ({who}): "
                    "no request it matches can ever be approved"
                )
    return warnings


def _named_approvers(policy: Policy, project: str) -> frozenset[str] | None:
    """The users the grants let approve on ``project``; None when a group grants it too
    (its members are not in the file)."""
    grants = [g for g in policy.grants if g.covers(project) and g.role >= Role.approver]
    if any(grant.usergroups for grant in grants):
        return None
    return frozenset(user for grant in grants for user in grant.users)


@dataclass(frozen=True)
class GrantRow:
    principal: str  # "user U01ALICE" or "group S0PLATFORM"
    project: str
    role: Role
    channels: tuple[str, ...] | None  # None: any channel


def describe_grants(policy: Policy) -> list[GrantRow]:
    """Every (principal, project) a grant gives, with ``"*"`` expanded to each project,
    sorted by principal then project."""
    rows = []
    for grant in policy.grants:
        principals = [f"user {u}" for u in grant.users] + [f"group {g}" for g in grant.usergroups]
        projects = sorted(p for p in policy.projects if grant.covers(p))
        channels = tuple(grant.channels) if grant.channels is not None else None
        rows += [
            GrantRow(principal, project, grant.role, channels)
            for principal in principals
            for project in projects
        ]
    return sorted(rows, key=lambda r: (r.principal, r.project, -r.role))
