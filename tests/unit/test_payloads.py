"""Reading submitted form values: every element type flattened to text, and values no
calendar holds passed on for the form's checks instead of raising."""

from __future__ import annotations

import pytest

from handlers.payloads import ViewSubmission, state_values


def submission(element: dict[str, object]) -> ViewSubmission:
    return ViewSubmission.model_validate(
        {
            "user": {"id": "U01ALICE"},
            "view": {"id": "V1", "state": {"values": {"field": {"field": element}}}},
        }
    )


def test_a_picked_date_time_becomes_rfc3339() -> None:
    picked = submission({"type": "datetimepicker", "selected_date_time": 1_798_761_600})
    assert state_values(picked.view) == {"field": "2027-01-01T00:00:00Z"}


@pytest.mark.parametrize("epoch", [358_839_387_058, -(10**18), 10**30, float("inf")])
def test_a_date_time_no_calendar_holds_is_passed_on_raw(epoch: float) -> None:
    picked = submission({"type": "datetimepicker", "selected_date_time": epoch})
    assert state_values(picked.view) == {"field": str(epoch)[:64]}


def test_text_selects_and_multi_selects() -> None:
    assert state_values(submission({"value": "16"}).view) == {"field": "16"}
    chosen = submission({"selected_option": {"value": "scale_cluster"}})
    assert state_values(chosen.view) == {"field": "scale_cluster"}
    many = submission({"selected_options": [{"value": "11"}, {"value": "12"}]})
    assert state_values(many.view) == {"field": "11,12"}
