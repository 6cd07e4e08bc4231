"""Nothing lost, nothing false (issue #16): answers, remediation alerts and decisions across
store outages and Slack faults, end to end over real HTTP on SQLite and PostgreSQL.

The outage is one replica's store refusing every transaction (``StoreOutage``: the error the
store raises for a refused or reset connection), switched at the step each cell names; the
PostgreSQL-only cells through the fault proxy are in ``test_db_faults.py``. Each cell checks
what people were told (never an untrue "nothing was changed"), that nothing was sent twice,
and that what the store missed is caught up once it is back."""

from __future__ import annotations

import asyncio

from bot.core.store import RequestState
from bot.local.simulators.base import Fault, FaultKind
from tests.conftest import StackFactory
from tests.support.reliability import TOGETHER_SCALE_UP, StoreOutage, command, newest_request
from tests.support.workflow_kit import poll_until, wait_state

S = RequestState


# ---- 2. a change whose call may have gone out is never "nothing was changed" -----------


async def test_a_change_sent_before_the_store_went_is_not_called_unchanged(
    database_url: str, make_stack: StackFactory
) -> None:
    """A no-approval Together scale-up whose PUT is in flight when the store goes: the
    answer says it was sent and what Together said, not "nothing was changed"; the result
    is recorded once the store is back; one PUT."""
    stack = await make_stack(database_url=database_url)
    outage = StoreOutage(stack.runtime.store)
    stack.together.faults.add(Fault(route="update", kind=FaultKind.LATENCY, seconds=0.8))
    asking = asyncio.create_task(command(stack, TOGETHER_SCALE_UP))
    await poll_until(lambda: len(stack.together.calls("update", "PUT")) == 1)
    outage.start()
    answer = await asking
    assert "nothing was changed" not in answer.text.lower(), answer.text
    assert "was sent" in answer.text and "Together accepted the update" in answer.text
    outage.end()
    record = await newest_request(stack)
    assert record is not None
    await wait_state(stack.runtime.store, record.id, S.SUCCEEDED, within=10)
    assert len(stack.together.calls("update", "PUT")) == 1
