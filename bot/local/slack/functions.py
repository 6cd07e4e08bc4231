"""The stand-in's custom steps (functions): Workflow Builder running an app's step, and
``functions.completeSuccess`` / ``functions.completeError`` as Slack answers them.

Each run gets a ``function_execution_id`` (``Fx…``) and its own short-lived token, sent as
``bot_access_token`` in the ``function_executed`` event: the token is good while the run
is in progress and revoked once the run completes, Slack's docs giving it no other
lifetime (``token_revoked`` after). The completion methods take the bot token of
the app that owns the function, or a run's own token for that run only (``access_denied``
for another run); a run completes once (``execution_not_in_running_state`` after), and
the outputs must fit the function's output parameters (``parameter_validation_failed``)."""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from bot.local.slack.models import JsonDict, random_id

RunState = Literal["running", "completed", "failed"]


class FunctionParameter(BaseModel):
    name: str
    type: str
    title: str
    description: str = ""
    is_required: bool = False


class FunctionDefinition(BaseModel):
    """A function as the app's manifest declares it."""

    callback_id: str
    title: str
    description: str
    input_parameters: list[FunctionParameter]
    output_parameters: list[FunctionParameter]


def _param(name: str, kind: str, title: str, *, required: bool = True) -> FunctionParameter:
    return FunctionParameter(name=name, type=kind, title=title, is_required=required)


# gpuops's step as its manifest.yml declares it (tests check that the two agree).
REQUEST_GPU_CHANGE = FunctionDefinition(
    callback_id="request_gpu_change",
    title="Request a GPU cluster change",
    description=(
        "Ask gpuops for a change to a GPU cluster, under its policy and approvals; the step "
        "ends when the request does."
    ),
    input_parameters=[
        _param("project", "string", "Project"),
        _param("cluster_id", "string", "Cluster id"),
        _param("change", "string", "Change"),
        _param("reason", "string", "Reason", required=False),
        _param("requester", "slack#/types/user_id", "Requester"),
        _param("channel", "slack#/types/channel_id", "Channel"),
    ],
    output_parameters=[
        _param("request_id", "string", "Request id"),
        _param("state", "string", "Final state"),
        _param("summary", "string", "Summary"),
    ],
)

_STRING_TYPES = {"string", "slack#/types/user_id", "slack#/types/channel_id"}


@dataclass
class FunctionRun:
    """One execution of a function as a workflow step."""

    execution_id: str
    workflow_execution_id: str
    function: FunctionDefinition
    inputs: dict[str, Any]
    token: str = field(repr=False)
    started_at: float
    state: RunState = "running"
    outputs: dict[str, Any] | None = None
    error: str | None = None
    completed_at: float | None = None
    completed_with: Literal["function_token", "bot_token"] | None = None


class FunctionCallError(Exception):
    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


class FunctionRuns:
    """The workflow runs of the fake workspace's app functions."""

    def __init__(self, app_id: str, definitions: list[FunctionDefinition] | None = None) -> None:
        self.app_id = app_id
        self.definitions = {d.callback_id: d for d in (definitions or [REQUEST_GPU_CHANGE])}
        self.runs: dict[str, FunctionRun] = {}

    def start(self, callback_id: str, inputs: dict[str, Any]) -> FunctionRun:
        """A workflow reaches the step: a new run (Workflow Builder does not start a step
        whose required inputs are unset)."""
        definition = self.definitions.get(callback_id)
        if definition is None:
            raise ValueError(f"the app declares no function {callback_id!r}")
        unset = [
            p.name for p in definition.input_parameters if p.is_required and not inputs.get(p.name)
        ]
        if unset:
            raise ValueError(f"Workflow Builder requires the inputs {', '.join(unset)}")
        run = FunctionRun(
            execution_id=random_id("Fx"),
            workflow_execution_id=random_id("Wx"),
            function=definition,
            inputs=dict(inputs),
            token=f"xwfp-{secrets.randbelow(10**12)}-{secrets.token_hex(16)}",
            started_at=time.time(),
        )
        self.runs[run.execution_id] = run
        return run

    def event(self, run: FunctionRun) -> JsonDict:
        """The ``function_executed`` event of a run."""
        definition = run.function
        return {
            "type": "function_executed",
            "function": {
                "id": "Fn" + definition.callback_id.upper().replace("_", "")[:10],
                "callback_id": definition.callback_id,
                "title": definition.title,
                "description": definition.description,
                "type": "app",
                "input_parameters": [p.model_dump() for p in definition.input_parameters],
                "output_parameters": [p.model_dump() for p in definition.output_parameters],
                "app_id": self.app_id,
                "date_created": int(run.started_at) - 86_400,
                "date_updated": int(run.started_at) - 3_600,
                "date_deleted": 0,
            },
            "inputs": dict(run.inputs),
            "function_execution_id": run.execution_id,
            "workflow_execution_id": run.workflow_execution_id,
            "event_ts": f"{run.started_at:.6f}",
            "bot_access_token": run.token,
        }

    def token_state(self, token: str) -> Literal["valid", "revoked"] | None:
        """A function token's standing; None when it is not one."""
        run = self._run_of(token)
        if run is None:
            return None
        return "valid" if run.state == "running" else "revoked"

    def _run_of(self, token: str) -> FunctionRun | None:
        for run in self.runs.values():
            if hmac.compare_digest(token.encode(), run.token.encode()):
                return run
        return None

    def complete(self, args: JsonDict, token: str, *, success: bool) -> JsonDict:
        """``functions.completeSuccess`` (``success``) or ``functions.completeError``."""
        run = self._running(args.get("function_execution_id"))
        owner = self._run_of(token)
        if owner is not None and owner is not run:
            raise FunctionCallError("access_denied")  # a run's token ends that run only
        if success:
            outputs = args.get("outputs")
            if outputs is None:
                raise FunctionCallError("invalid_arguments")  # a required argument
            problems = self._output_problems(run.function, outputs)
            if problems:
                raise FunctionCallError(
                    "parameter_validation_failed",
                    response_metadata={"messages": [f"[ERROR] {p}" for p in problems]},
                )
            run.state, run.outputs = "completed", dict(outputs or {})
        else:
            message = args.get("error")
            if not isinstance(message, str) or not message:
                raise FunctionCallError("invalid_arguments")
            run.state, run.error = "failed", message
        run.completed_at = time.time()
        run.completed_with = "function_token" if token == run.token else "bot_token"
        return {"ok": True}

    def _running(self, raw: Any) -> FunctionRun:
        if not isinstance(raw, str) or not raw:
            raise FunctionCallError("invalid_arguments")
        run = self.runs.get(raw)
        if run is None:
            raise FunctionCallError("function_execution_not_found")
        if run.state != "running":
            raise FunctionCallError("execution_not_in_running_state")
        return run

    @staticmethod
    def _output_problems(definition: FunctionDefinition, outputs: Any) -> list[str]:
        if not isinstance(outputs, dict):
            return ["outputs must be an object"]
        problems = [
            f"missing required output {p.name!r}"
            for p in definition.output_parameters
            if p.is_required and p.name not in outputs
        ]
        for p in definition.output_parameters:
            value = outputs.get(p.name)
            if value is not None and p.type in _STRING_TYPES and not isinstance(value, str):
                problems.append(f"output {p.name!r} must be a {p.type}")
        return problems
