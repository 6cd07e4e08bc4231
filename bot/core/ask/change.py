"""A change as it is asked: ``ChangeAsk``, the one value a command, a form submission, a
Workflow Builder step and a revert each become before the change workflow takes it.

Each surface reads and checks its ask once, where it is asked: the text against the grammar
and the fields its action takes (``bot.core.ask.reading``), a form against the cluster
(``bot.core.ask.forms``), a revert against the request it reverts
(``bot.core.requests.revert``); the asker's operator role and the cluster allowlist are
checked there too, once. The change workflow then checks only what is checked at request:
the run time, the plan against the cluster as it is now, and the guardrails
(``bot.core.requests.opening``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.core.ask.grammar import ChangeCommand
from bot.core.requests.schedule import Schedule
from bot.core.staged.plan import Staging

# Where a change was asked: its audit rows, metrics and answers do not depend on it, but
# reading a trail or a log is easier with it.
Origin = Literal["command", "form", "step", "revert", "agent"]


class ChangeAsk(BaseModel):
    """One change someone asks for, read and checked where it was asked (the grammar or the
    form, the fields its action takes, the asker's role, the cluster allowlist) and passed
    along as it is: the workflow trusts those checks and makes the ones at request."""

    model_config = ConfigDict(frozen=True)

    user: str
    channel: str
    project: str
    cluster_id: str
    action: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None
    override: str | None = None  # an admin's reason to go ahead during a freeze
    schedule: Schedule | None = None  # at=/in=/run_at, resolved against the clock at request
    origin: Origin = "command"
    command: str = ""  # how the audit rows of a refusal name it
    step: str | None = None  # the Workflow Builder step (function execution id) asking
    revert_of: str | None = None  # the request this one reverts
    # An agent's proposal (SPEC §15): "mcp", the client's name, the token's name; it waits
    # for its requester's Confirm before anything else.
    via: str | None = None
    client: str | None = None
    token: str | None = None
    staging: Staging | None = None  # step= and soak=: sent in steps (SPEC §14)

    @classmethod
    def of_command(
        cls,
        user: str,
        channel: str,
        command: ChangeCommand,
        *,
        step: str | None = None,
        agent: AgentOrigin | None = None,
    ) -> ChangeAsk:
        """A change command that names its action and fields (no form to fill)."""
        return cls(
            user=user,
            channel=channel,
            project=command.project,
            cluster_id=command.cluster_id,
            action=str(command.action),
            inputs=dict(command.fields),
            reason=command.reason,
            override=command.override,
            schedule=command.schedule,
            origin="agent" if agent else "command" if step is None else "step",
            staging=command.staging,
            command=f"{command.name} {command.project} {command.cluster_id}",
            step=step,
            **(agent.model_dump() if agent else {}),
        )


class AgentOrigin(BaseModel):
    """Who asked through an agent: the surface, the client's name, the token's name."""

    model_config = ConfigDict(frozen=True)

    via: str
    client: str
    token: str
