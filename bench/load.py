"""Load generation and outcome tracking for one concurrency level.

A *worker* is one person in their own channel with their own clusters; it sends a slash
command, reads the ack, then (gpuops) waits for the command's visible result before the
next one, so ``concurrency`` is the number of operations in flight. The mix is
``/gpu update together-prod <cluster> num_gpus=<n> reason=<marker>`` (a scale-up that
needs no approval: command → provider PUT → summary in the request's thread) with every
``show_every``-th command a ``/gpu show together-prod <cluster>``.

Results are read where a person would see them, at the FakeSlack, through its subscriber
callback: the request's root message carries the unique ``reason=`` marker, the summary is
the reply in that thread that starts with a header block, and a show's answer is the
``response_url`` post in the channel naming the cluster. Timestamps are the FakeSlack's
``posted_at`` (wall clock, same process as the sender).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

from bot.local.simulators.together import TogetherSimulator
from bot.local.slack.models import FakeEvent
from bot.local.slack.sender import SenderResult, SlackSender, Tamper
from bot.local.slack.server import FakeSlack

USER = "U04DAVE"  # operator on together-prod in every channel (bot.local.demo.stack.DEMO_POLICY)
PROJECT = "together-prod"
TEMPLATE_CLUSTER = "tc-h200-ondemand"  # ON_DEMAND, 8 GPUs: a scale-up needs no approval
OPS_PER_CLUSTER = 10  # a worker moves to a fresh cluster after this many commands

OpKind = Literal["update", "show"]


def bench_channels(count: int) -> dict[str, str]:
    """One channel per worker (id → name), so each person's thread stays their own."""
    return {channel_id(w): f"bench-{w:03d}" for w in range(count)}


def channel_id(worker: int) -> str:
    return f"C0BENCH{worker:03d}"


class AiohttpSender(SlackSender):
    """SlackSender's requests, byte for byte (same form body, same v0 signature headers),
    sent over one shared aiohttp session with a large connection pool: httpx costs the
    driver more CPU per request than the apps under test spend on an ack."""

    def __init__(
        self, events_url: str, signing_secret: str, fake: FakeSlack, session: aiohttp.ClientSession
    ) -> None:
        super().__init__(events_url, signing_secret, fake)
        self._session = session

    async def post(
        self,
        body: str,
        content_type: str,
        *,
        retry_num: int | None = None,
        retry_reason: str | None = None,
        tamper: Tamper | None = None,
    ) -> SenderResult:
        headers = self.signed_headers(
            body, content_type, retry_num=retry_num, retry_reason=retry_reason, tamper=tamper
        )
        started = time.perf_counter()
        async with self._session.post(
            self.events_url, data=body.encode(), headers=headers
        ) as response:
            raw = await response.read()
            status = response.status
        elapsed = time.perf_counter() - started
        text = raw.decode("utf-8", "replace")
        parsed: Any = None
        if text.strip():
            with contextlib.suppress(ValueError):
                parsed = json.loads(text)
        return SenderResult(
            status=status,
            body=text,
            json=parsed,
            elapsed=elapsed,
            request_body=body,
            content_type=content_type,
        )


def new_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=1000, limit_per_host=1000),
        timeout=aiohttp.ClientTimeout(total=30),
    )


@dataclass
class Op:
    """One command and what became of it."""

    id: str
    kind: OpKind
    worker: int
    channel: str
    cluster_id: str
    target_gpus: int | None
    text: str
    sent_at: float = 0.0  # wall clock, just before the request is sent
    ack_seconds: float | None = None
    ack_status: int | None = None
    done_at: float | None = None  # posted_at of the first summary / show answer
    results: int = 0  # summaries (update) or answers (show) seen
    refused: str | None = None  # an error the person was shown instead
    notes: list[str] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def marker(self) -> str:
        return f"bench-{self.id}"

    @property
    def latency(self) -> float | None:
        return None if self.done_at is None else self.done_at - self.sent_at


def _block_text(blocks: list[dict[str, Any]] | None) -> str:
    return json.dumps(blocks or [])


class Tracker:
    """FakeSlack subscriber: ties posted messages back to the operation that caused them."""

    def __init__(self, channels: set[str]) -> None:
        self.channels = channels
        self.current: dict[str, Op] = {}  # channel → the op in flight there
        self.by_marker: dict[str, Op] = {}
        self.by_root: dict[tuple[str, str], Op] = {}

    def expect(self, op: Op) -> None:
        self.current[op.channel] = op
        if op.kind == "update":
            self.by_marker[op.marker] = op

    def __call__(self, event: FakeEvent) -> None:
        if event.kind == "message_posted":
            message = event.message
            if message.channel not in self.channels:
                return
            if message.thread_ts is None or message.thread_ts == message.ts:
                if message.source == "response_url":
                    self._show_answer(message.channel, message.text, message.posted_at)
                else:
                    self._root(message.channel, message.ts, message.blocks)
                return
            op = self.by_root.get((message.channel, message.thread_ts))
            if op is None:
                return
            blocks = message.blocks or []
            if blocks and blocks[0].get("type") == "header":
                self._result(op, message.posted_at)
            else:
                op.notes.append(message.text[:200])
        elif event.kind == "ephemeral_posted":
            ephemeral = event.ephemeral
            op = self.current.get(ephemeral.channel)
            if op is None or ephemeral.user != USER:
                return
            if ":x:" in _block_text(ephemeral.blocks):  # render.error: refused, nothing ran
                op.refused = ephemeral.text[:300]
                op.done.set()

    def _root(self, channel: str, ts: str, blocks: list[dict[str, Any]] | None) -> None:
        text = _block_text(blocks)
        op = self.current.get(channel)
        if op is not None and op.kind == "update" and op.marker in text:
            self.by_root[(channel, ts)] = op
            return
        for marker, candidate in self.by_marker.items():  # a late root of an earlier op
            if candidate.channel == channel and marker in text:
                self.by_root[(channel, ts)] = candidate
                return

    def _show_answer(self, channel: str, text: str, posted_at: float) -> None:
        op = self.current.get(channel)
        if op is not None and op.kind == "show" and f"({op.cluster_id})" in text:
            self._result(op, posted_at)

    @staticmethod
    def _result(op: Op, posted_at: float) -> None:
        op.results += 1
        if op.done_at is None:
            op.done_at = posted_at
        op.done.set()


class LagMonitor:
    """How late this process's event loop runs a timer: the driver's own delay, which
    inflates every latency it measures (the gpuops levels load it with FakeSlack and
    simulator work, the bare levels do not)."""

    def __init__(self, every: float = 0.005) -> None:
        self.every = every
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.every
            await asyncio.sleep(self.every)
            self.lags.append(max(0.0, loop.time() - due))


# "postgres": gpuops serve replicas on PostgreSQL (bench.postgres); the others on SQLite
AppName = Literal["gpuops", "compare", "bare", "postgres"]


@dataclass
class LevelOutcome:
    app: AppName
    concurrency: int
    ops: list[Op]
    wall_seconds: float
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    driver_lag: list[float] = field(default_factory=list)
    puts: Counter[tuple[str, int]] = field(default_factory=Counter)
    unmatched_puts: int = 0
    not_sent: int = 0
    attempts: int = 1  # runs of this level (others' CPU load makes the bench run it again)
    # What the app's /metrics counted during the level (None: the build has no such counter)
    counted: dict[str, float | None] = field(default_factory=dict)
    # CPU ms of the driver's reference workload around the level (bench.driver)
    reference_ms: float | None = None
    # PostgreSQL levels: the server's figures (bench.postgres.ServerFigures.as_dict), the
    # chain check after the level, and the replicas the load was spread over
    server: dict[str, Any] = field(default_factory=dict)
    chain: dict[str, Any] = field(default_factory=dict)
    replicas: int = 1

    @property
    def acks(self) -> list[float]:
        return [op.ack_seconds for op in self.ops if op.ack_seconds is not None]

    @property
    def ack_errors(self) -> int:
        return sum(1 for op in self.ops if op.ack_status != 200)

    def latencies(self, kind: OpKind) -> list[float]:
        return [op.latency for op in self.ops if op.kind == kind and op.latency is not None]

    def count(self, kind: OpKind) -> int:
        return sum(1 for op in self.ops if op.kind == kind)

    def lost(self) -> list[Op]:
        """Commands acked 200 whose result never appeared within the deadline."""
        if self.app == "bare":
            return []
        return [op for op in self.ops if op.done_at is None]

    def duplicated(self) -> list[Op]:
        """More than one summary/answer, or more than one PUT, for one operation."""
        if self.app == "bare":
            return []
        return [
            op
            for op in self.ops
            if op.results > 1
            or (op.kind == "update" and self.puts[(op.cluster_id, op.target_gpus or 0)] > 1)
        ]


class Level:
    """Clusters, commands and workers of one concurrency level against one app."""

    def __init__(
        self,
        *,
        app: AppName,
        label: str,
        concurrency: int,
        total_ops: int,
        show_every: int,
        sender: SlackSender,
        fake: FakeSlack,
        together: TogetherSimulator,
        op_deadline: float,
        wall_deadline: float,
    ) -> None:
        self.app = app
        self.label = label
        self.concurrency = concurrency
        self.total_ops = total_ops
        self.show_every = show_every
        self.sender = sender
        self.fake = fake
        self.together = together
        self.op_deadline = op_deadline
        self.wall_deadline = wall_deadline
        self.ops: list[Op] = []
        self._gpus: dict[str, int] = {}
        self._not_sent = 0

    def _per_worker(self, worker: int) -> int:
        base, extra = divmod(self.total_ops, self.concurrency)
        return base + (1 if worker < extra else 0)

    def _cluster(self, worker: int, index: int) -> str:
        return f"tc-{self.label}-{worker:03d}-{index // OPS_PER_CLUSTER:02d}"

    def prepare(self) -> None:
        """Add the level's clusters to the Together simulator (copies of an 8-GPU one)."""
        if self.app == "bare":
            return
        template = self.together.clusters[TEMPLATE_CLUSTER]
        for worker in range(self.concurrency):
            for index in range(0, self._per_worker(worker), OPS_PER_CLUSTER):
                cluster_id = self._cluster(worker, index)
                cluster = copy.deepcopy(template)
                cluster["cluster_id"] = cluster_id
                cluster["cluster_name"] = f"bench-{cluster_id[3:]}"
                self.together.clusters[cluster_id] = cluster
                self._gpus[cluster_id] = int(cluster["num_gpus"])

    def _next_op(self, worker: int, index: int) -> Op:
        cluster_id = self._cluster(worker, index)
        op_id = f"{self.label}-{worker:03d}-{index:04d}"
        if (index + 1) % self.show_every == 0:
            text = f"show {PROJECT} {cluster_id}"
            return Op(op_id, "show", worker, channel_id(worker), cluster_id, None, text)
        target = self._gpus.get(cluster_id, 8) + 8
        self._gpus[cluster_id] = target
        text = f'update {PROJECT} {cluster_id} num_gpus={target} reason="bench-{op_id}"'
        return Op(op_id, "update", worker, channel_id(worker), cluster_id, target, text)

    async def run(self, tracker: Tracker | None) -> LevelOutcome:
        started = time.perf_counter()
        stop_at = started + self.wall_deadline
        await asyncio.gather(*(self._worker(w, tracker, stop_at) for w in range(self.concurrency)))
        wall = time.perf_counter() - started
        return LevelOutcome(self.app, self.concurrency, self.ops, wall, not_sent=self._not_sent)

    async def _worker(self, worker: int, tracker: Tracker | None, stop_at: float) -> None:
        count = self._per_worker(worker)
        for index in range(count):
            if time.perf_counter() >= stop_at:
                self._not_sent += count - index
                return
            op = self._next_op(worker, index)
            self.ops.append(op)
            if tracker is not None:
                tracker.expect(op)
            op.sent_at = time.time()
            try:
                result = await self.sender.command(USER, op.channel, op.text)
            except (aiohttp.ClientError, TimeoutError) as exc:
                op.notes.append(f"request failed: {type(exc).__name__}")
                op.ack_status = 0
                continue
            op.ack_seconds, op.ack_status = result.elapsed, result.status
            if tracker is None or result.status != 200:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(op.done.wait(), self.op_deadline)


def count_puts(together: TogetherSimulator, outcome: LevelOutcome) -> None:
    """PUTs the simulator received during this level (its request log is cleared before
    each level), by (cluster, num_gpus); a PUT that matches no operation is unmatched."""
    expected = {(op.cluster_id, op.target_gpus or 0) for op in outcome.ops if op.kind == "update"}
    for request in together.calls("update", "PUT"):
        cluster_id = request.path.rsplit("/", 1)[-1]
        body = request.body if isinstance(request.body, dict) else {}
        key = (cluster_id, int(body.get("num_gpus") or 0))
        if key in expected:
            outcome.puts[key] += 1
        else:
            outcome.unmatched_puts += 1
