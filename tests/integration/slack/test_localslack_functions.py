"""The stand-in's custom steps over real HTTP, driven by slack_sdk: a run's
``function_executed`` event and the two completion methods, with Slack's token rules and
error names (a run's token is good while the run is in progress, is revoked once it
completes, and ends only that run; the bot token ends any run of the app; a run completes
once)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.local.slack.functions import REQUEST_GPU_CHANGE
from bot.local.slack.models import FunctionCompleted
from bot.local.slack.server import FakeSlack

TOKEN = "xoxb-test-token-functions"
APP_TOKEN = "xapp-1-test-functions"
CHANNEL = "C0OPS"
INPUTS = {
    "project": "together-prod",
    "cluster_id": "c-1",
    "change": "num_gpus=16",
    "requester": "U1",
    "channel": CHANNEL,
}
OUTPUTS = {"request_id": "CR-AAAAAA", "state": "succeeded", "summary": "done"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack(TOKEN, channels={CHANNEL: "gpu-ops"}, app_token=APP_TOKEN)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


def client(fake: FakeSlack, token: str) -> AsyncWebClient:
    return AsyncWebClient(token=token, base_url=fake.api_url)


async def error_of(call: Any) -> str:
    with pytest.raises(SlackApiError) as caught:
        await call
    return str(caught.value.response["error"])


def test_the_event_carries_the_function_its_inputs_and_a_token_of_its_own(
    fake: FakeSlack,
) -> None:
    run = fake.start_function("request_gpu_change", INPUTS)
    event = fake.functions.event(run)
    assert event["type"] == "function_executed"
    assert event["function"]["callback_id"] == "request_gpu_change"
    assert [p["name"] for p in event["function"]["input_parameters"]] == [
        p.name for p in REQUEST_GPU_CHANGE.input_parameters
    ]
    assert event["inputs"] == INPUTS and event["function_execution_id"].startswith("Fx")
    assert event["bot_access_token"] == run.token and run.token.startswith("xwfp-")
    assert run.token != TOKEN


def test_workflow_builder_starts_no_step_without_its_required_inputs(fake: FakeSlack) -> None:
    with pytest.raises(ValueError, match="channel"):
        fake.start_function("request_gpu_change", {**INPUTS, "channel": ""})
    with pytest.raises(ValueError, match="declares no function"):
        fake.start_function("other_step", INPUTS)


async def test_complete_success_with_the_run_token_then_the_token_is_revoked(
    fake: FakeSlack,
) -> None:
    run = fake.start_function("request_gpu_change", INPUTS)
    step = client(fake, run.token)
    assert (await step.auth_test())["ok"]  # a running step's token is a good token
    answer = await step.functions_completeSuccess(
        function_execution_id=run.execution_id, outputs=OUTPUTS
    )
    assert answer["ok"] and run.state == "completed" and run.outputs == OUTPUTS
    assert run.completed_with == "function_token"
    assert isinstance(fake.events[-1], FunctionCompleted) and fake.events[-1].success
    again = step.functions_completeSuccess(function_execution_id=run.execution_id, outputs=OUTPUTS)
    assert await error_of(again) == "token_revoked"
    with_bot = client(fake, TOKEN).functions_completeError(
        function_execution_id=run.execution_id, error="late"
    )
    assert await error_of(with_bot) == "execution_not_in_running_state"


async def test_complete_error_takes_the_bot_token_and_needs_an_error(fake: FakeSlack) -> None:
    run = fake.start_function("request_gpu_change", INPUTS)
    bot = client(fake, TOKEN)
    empty = bot.functions_completeError(function_execution_id=run.execution_id, error="")
    assert await error_of(empty) == "invalid_arguments"
    await bot.functions_completeError(function_execution_id=run.execution_id, error="refused")
    assert (run.state, run.error, run.completed_with) == ("failed", "refused", "bot_token")


async def test_outputs_must_fit_the_output_parameters(fake: FakeSlack) -> None:
    run = fake.start_function("request_gpu_change", INPUTS)
    step = client(fake, run.token)
    partial = {"request_id": "CR-AAAAAA", "state": "succeeded"}
    missing = step.functions_completeSuccess(
        function_execution_id=run.execution_id, outputs=partial
    )
    assert await error_of(missing) == "parameter_validation_failed"
    typed = {**OUTPUTS, "state": 3}
    wrong = step.functions_completeSuccess(function_execution_id=run.execution_id, outputs=typed)
    assert await error_of(wrong) == "parameter_validation_failed"
    assert run.state == "running"


async def test_unknown_executions_and_tokens_are_refused(fake: FakeSlack) -> None:
    bot = client(fake, TOKEN)
    unknown = bot.functions_completeSuccess(function_execution_id="FxNOPE", outputs=OUTPUTS)
    assert await error_of(unknown) == "function_execution_not_found"
    run = fake.start_function("request_gpu_change", INPUTS)
    stranger = client(fake, "xwfp-not-a-token").functions_completeSuccess(
        function_execution_id=run.execution_id, outputs=OUTPUTS
    )
    assert await error_of(stranger) == "invalid_auth"
    app_level = client(fake, APP_TOKEN).functions_completeSuccess(
        function_execution_id=run.execution_id, outputs=OUTPUTS
    )
    assert await error_of(app_level) == "not_allowed_token_type"
    connect = client(fake, run.token).apps_connections_open(app_token=run.token)
    assert await error_of(connect) == "not_allowed_token_type"
    assert run.state == "running"


async def test_a_runs_token_is_good_for_as_long_as_the_run_is_in_progress(
    fake: FakeSlack,
) -> None:
    run = fake.start_function("request_gpu_change", INPUTS)
    run.started_at -= 60 * 60  # an hour in: Slack's docs give the token no lifetime
    await client(fake, run.token).functions_completeSuccess(
        function_execution_id=run.execution_id, outputs=OUTPUTS
    )
    assert (run.state, run.completed_with) == ("completed", "function_token")
    again = client(fake, run.token).functions_completeSuccess(
        function_execution_id=run.execution_id, outputs=OUTPUTS
    )
    assert await error_of(again) == "token_revoked"  # revoked once the run completes


async def test_a_runs_token_ends_that_run_only(fake: FakeSlack) -> None:
    first = fake.start_function("request_gpu_change", INPUTS)
    second = fake.start_function("request_gpu_change", INPUTS)
    crossed = client(fake, first.token).functions_completeError(
        function_execution_id=second.execution_id, error="not mine"
    )
    assert await error_of(crossed) == "access_denied"
    assert (first.state, second.state) == ("running", "running")
