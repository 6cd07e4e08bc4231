"""``step=`` and ``soak=`` in the grammar (SPEC §14): read into the change's staging, never
a provider field; in a Workflow step's ``change`` too; what does not fit is refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.core.ask.change import ChangeAsk
from bot.core.ask.grammar import ChangeCommand, UsageError, parse_change, parse_command
from bot.core.staged.plan import Staging
from tests.support.catalog import CATALOG


def _change(text: str) -> ChangeCommand:
    command = parse_command(text, CATALOG)
    assert isinstance(command, ChangeCommand)
    return command


def test_step_and_soak_on_update() -> None:
    command = _change("update together-prod c1 num_gpus=256 step=32 soak=10m")
    assert command.fields == {"num_gpus": "256"}
    assert command.staging == Staging(step=32, soak=timedelta(minutes=10))
    ask = ChangeAsk.of_command("U1", "C1", command)
    assert ask.staging == command.staging
    assert ask.inputs == {"num_gpus": "256"}


def test_step_without_soak_takes_the_policy_default_later() -> None:
    command = _change("action e2e-prod 101 scale_cluster additional_nodes=6 step=2")
    assert command.action == "scale_cluster"
    assert command.staging == Staging(step=2, soak=None)


def test_a_plain_change_has_no_staging() -> None:
    assert _change("update together-prod c1 num_gpus=16").staging is None


def test_the_workflow_steps_change_takes_step_and_soak() -> None:
    command = parse_change(
        "update", "together-prod", "c1", "num_gpus=64 step=16 soak=30s", "", CATALOG
    )
    assert command.staging == Staging(step=16, soak=timedelta(seconds=30))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("update p c1 num_gpus=64 soak=10m", "`soak=` goes with `step=`"),
        ("update p c1 num_gpus=64 step=0", "is not a step"),
        ("update p c1 num_gpus=64 step=x", "is not a step"),
        ("update p c1 num_gpus=64 step=8 soak=5", "is not a duration"),
        ("update p c1 num_gpus=64 step=8 soak=2d", "is not a duration"),
        ("update p c1 num_gpus=64 step=8 step=16", "given twice"),
    ],
)
def test_what_does_not_fit_says_why(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse_command(text, CATALOG)
