"""The workloads ``bench/instructions.py`` counts: scale-ups through the core alone or
through the whole in-process stack, each the same 8 → 16 GPU change.

``python bench/workloads.py core|stack N`` runs N scale-ups after a few to warm up, with
the build on ``PYTHONPATH`` (this checkout's, or another one's to compare).

- *core*: ``CommandService`` and the workflow over scripted providers, a recording notifier
  and a temp SQLite store (``tests.support.core_harness``): no HTTP.
- *stack*: the bot in HTTP mode with the Slack stand-in and the simulators in one process
  (``bot.local.demo.stack``): signed slash commands in, Web API calls and provider calls
  out over 127.0.0.1; each command waits for its root, summary and mirror posts.
"""

from __future__ import annotations

import asyncio
import copy
import sys
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

WARM_UP = 3
CLUSTER = "tc-h200-ondemand"  # ON_DEMAND, 8 GPUs: a scale-up needs no approval
DAVE = "U04DAVE"
TEXT = f'update together-prod {CLUSTER} num_gpus=16 reason="instructions"'


async def _repeat(times: int, one: Callable[[], Awaitable[None]]) -> None:
    for _ in range(WARM_UP + times):
        await one()


async def core(times: int) -> None:
    from tests.support.core_harness import core_harness

    with tempfile.TemporaryDirectory(prefix="gpuops-instr-") as tmp:
        async with core_harness(Path(tmp)) as harness:
            template = copy.deepcopy(harness.together.clusters[CLUSTER])

            async def one() -> None:
                harness.together.clusters[CLUSTER] = copy.deepcopy(template)
                answer = await harness.answer(DAVE, TEXT)
                if "ran — see the thread for the result (done" not in answer:
                    raise RuntimeError(f"the scale-up did not run: {answer}")

            await _repeat(times, one)


async def stack(times: int) -> None:
    from bot.local.demo.stack import LocalStack, StackOptions

    local = await LocalStack.start(StackOptions(poll_seconds=0))
    try:
        template = copy.deepcopy(local.together.clusters[CLUSTER])

        async def one() -> None:
            local.together.remove(CLUSTER)  # and its provisioning in progress
            local.together.clusters[CLUSTER] = copy.deepcopy(template)
            posts = len(local.slack.calls_to("chat.postMessage"))
            answer = await local.sender.command(DAVE, "C0INCIDENT", TEXT)
            if answer.status != 200:
                raise RuntimeError(f"the command was answered {answer.status}")
            await local.slack.wait_for(  # its root, its summary and its mirror
                lambda: len(local.slack.calls_to("chat.postMessage")) >= posts + 3 or None
            )

        await _repeat(times, one)
    finally:
        await local.stop()


WORKLOADS: dict[str, Callable[[int], Coroutine[Any, Any, None]]] = {"core": core, "stack": stack}


def main(argv: list[str]) -> int:
    name, times = argv
    asyncio.run(WORKLOADS[name](int(times)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
