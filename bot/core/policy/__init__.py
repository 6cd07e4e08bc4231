"""The policy (SPEC §3, §7, §8): its whole schema, built from the provider catalog it is
given (model; the guardrail and watch sections, guardrails and watch), reading the file
(loading), what its grants give (grants), the one policy in force (holder), and reading
the file again (reload, with sections and notices). Nothing here imports the parts of the
core that use the policy (a test in tests/unit says so)."""

from bot.core.policy.grants import GrantRow, describe_grants, unmeetable_rules
from bot.core.policy.holder import ForeignPolicy, PolicyHolder
from bot.core.policy.loading import PolicyError, load_policy, parse_policy
from bot.core.policy.model import (
    Approvals,
    ChannelId,
    Grant,
    HttpUrl,
    Policy,
    PolicySchema,
    ProjectCommon,
    ProjectConfig,
    ProjectKey,
    Role,
    RoleName,
    UsergroupId,
    UserId,
    did_you_mean,
    policy_schema,
)

__all__ = [
    "Approvals",
    "ChannelId",
    "ForeignPolicy",
    "Grant",
    "GrantRow",
    "HttpUrl",
    "Policy",
    "PolicyError",
    "PolicyHolder",
    "PolicySchema",
    "ProjectCommon",
    "ProjectConfig",
    "ProjectKey",
    "Role",
    "RoleName",
    "UserId",
    "UsergroupId",
    "describe_grants",
    "did_you_mean",
    "load_policy",
    "parse_policy",
    "policy_schema",
    "unmeetable_rules",
]
