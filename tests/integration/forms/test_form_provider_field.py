"""A provider's validation refusal at a form's submission, over real HTTP (simulator faults
in each provider's own error shape): the form marks the field the provider names (Together's
``error.param``, E2E's ``errors`` keyed by field), and its first input when none is named."""

from __future__ import annotations

from bot.local.demo.stack import LocalStack
from bot.local.simulators.base import Fault, FaultKind
from tests.support.slack_support import opened_modal, provider_writes

DAVE = "U04DAVE"


async def test_together_naming_a_field_marks_that_field(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await stack.sender.command(DAVE, "C0INCIDENT", "update together-prod tc-h100-reserved")
    view = await opened_modal(stack, DAVE, "gpu_update")
    stack.together.faults.add(
        Fault(
            route="get",
            kind=FaultKind.FIELD_ERROR,
            status=422,
            field="num_gpus",
            message="num_gpus must be a multiple of 8",
        )
    )
    refused = await stack.sender.view_submission(DAVE, view.id, {"num_gpus": "24"})
    assert refused.status == 200 and refused.problems == ()
    assert refused.json["response_action"] == "errors"
    assert list(refused.json["errors"]) == ["num_gpus"]  # not the form's first input
    assert "num_gpus must be a multiple of 8" in refused.json["errors"]["num_gpus"]
    assert provider_writes(stack) == []


async def test_e2e_naming_a_field_marks_that_field(sqlite_stack: LocalStack) -> None:
    stack = sqlite_stack
    await stack.sender.command(DAVE, "C0INCIDENT", "action e2e-delhi 101 scale_cluster")
    view = await opened_modal(stack, DAVE, "gpu_action")
    stack.e2e.faults.add(
        Fault(
            route="get",
            kind=FaultKind.FIELD_ERROR,
            status=400,
            field="additional_nodes",
            message="Ensure this value is less than or equal to 8.",
        )
    )
    refused = await stack.sender.view_submission(DAVE, view.id, {"additional_nodes": "9"})
    assert refused.json["response_action"] == "errors"
    assert list(refused.json["errors"]) == ["additional_nodes"]
    assert "less than or equal to 8" in refused.json["errors"]["additional_nodes"]
    assert provider_writes(stack) == []


async def test_a_refusal_naming_no_form_field_stays_under_the_first_input(
    sqlite_stack: LocalStack,
) -> None:
    stack = sqlite_stack
    await stack.sender.command(DAVE, "C0INCIDENT", "update together-prod tc-h100-reserved")
    view = await opened_modal(stack, DAVE, "gpu_update")
    stack.together.faults.add(
        Fault(route="get", kind=FaultKind.FIELD_ERROR, status=422, field="page_token", times=1)
    )
    stack.together.faults.add(
        Fault(route="get", kind=FaultKind.FIELD_ERROR, status=503, field="num_gpus", times=-1)
    )
    for _ in range(2):  # a field the form has not, then a server error (no field can be)
        refused = await stack.sender.view_submission(DAVE, view.id, {"num_gpus": "24"})
        assert list(refused.json["errors"]) == ["cluster_type"]  # the form's first input
