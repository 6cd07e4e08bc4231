"""The scripted adapter of the core harness, for any provider the catalog describes: its
rules (actions, fields, plan, fingerprint, inverse, shows) are the adapter the provider's
descriptor builds (``descriptor.connect``, on a transport that fails any request), and its
I/O — list, get, apply — is answered by a ``Fleet`` (that provider's clusters in memory)
and a ``Script`` of failures, hangs and latency, recording every call."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

from bot.core.policy import ProjectCommon
from bot.providers.base import (
    ApplyOutcome,
    ChangePlan,
    ClusterState,
    ClusterSummary,
    FieldSpec,
    Inverse,
    ProviderAdapter,
)
from bot.providers.descriptor import Connection, ProviderDescriptor, ProviderSection
from bot.providers.http import ClientSettings, ProviderTransport
from tests.support.transaction_guard import note

C = TypeVar("C")  # how a fleet keeps its clusters (tests edit them in place)


class _NoClient:
    """Stands where the real adapter's HTTP transport is: the harness never calls it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the core harness has no provider client (asked for {name!r})")


@dataclass(frozen=True)
class Call:
    """One call the core made to a provider: ``op`` is list_clusters, get_cluster or apply."""

    op: str
    cluster_id: str | None = None
    action: str | None = None
    body: dict[str, Any] | None = None


@dataclass
class Hang:
    """A scripted call that waits: ``entered`` is set once the core has made it; it goes on
    (with the rest of its step) when ``release`` is called."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.released.set()


@dataclass
class Step:
    """What the next call of an operation does: wait, hang, then raise or answer."""

    error: BaseException | None = None
    latency: float = 0.0
    hang: Hang | None = None
    answer: Any = None


class Script:
    """Per operation, the steps its next calls take (a call with no step left behaves)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._steps: dict[str, deque[Step]] = {}
        self.called = asyncio.Event()

    def add(self, op: str, step: Step, times: int = 1) -> None:
        self._steps.setdefault(op, deque()).extend(step for _ in range(times))

    def fail(self, op: str, error: BaseException, *, times: int = 1) -> None:
        self.add(op, Step(error=error), times)

    def delay(self, op: str, seconds: float, *, times: int = 1) -> None:
        self.add(op, Step(latency=seconds), times)

    def hang(self, op: str, *, then: BaseException | None = None) -> Hang:
        hang = Hang()
        self.add(op, Step(hang=hang, error=then))
        return hang

    def answer(self, op: str, value: Any) -> None:
        self.add(op, Step(answer=value))

    def of(self, op: str) -> list[Call]:
        return [c for c in self.calls if c.op == op]

    async def enter(self, call: Call) -> Step | None:
        """Record ``call`` and play its step: the answer to give, or None to behave."""
        note(f"provider {call.op}")
        self.calls.append(call)
        self.called.set()
        queue = self._steps.get(call.op)
        step = queue.popleft() if queue else None
        if step is None:
            return None
        if step.latency:
            await asyncio.sleep(step.latency)
        if step.hang is not None:
            step.hang.entered.set()
            await step.hang.released.wait()
        if step.error is not None:
            raise step.error
        return step if step.answer is not None else None


def offline_connection(
    descriptor: ProviderDescriptor, project: str, section: ProviderSection
) -> Connection:
    """What the registry hands ``descriptor.connect``, with a placeholder for each
    credential and a transport that fails any request."""
    return Connection(
        project=project,
        section=section,
        base_url=descriptor.default_base_url,
        secrets={variable: "core-harness" for variable in section.credential_variables()},
        client_settings=ClientSettings(),
        shared=lambda _key, _build: cast(ProviderTransport, _NoClient()),
    )


class Fleet(ABC, Generic[C]):
    """One project's clusters at one provider, in memory: what its API would answer."""

    clusters: C

    @abstractmethod
    def listed(self) -> list[ClusterSummary]: ...

    @abstractmethod
    def state(self, cluster_id: str) -> ClusterState:
        """The cluster as ``get_cluster`` shows it; ProviderNotFound when there is none."""

    @abstractmethod
    def applied(self, plan: ChangePlan) -> ApplyOutcome:
        """What the provider does with ``plan``, and says of it."""

    def rules(self, descriptor: ProviderDescriptor, connection: Connection) -> ProviderAdapter:
        """The provider's own adapter, as its descriptor builds it."""
        return descriptor.connect(connection)


# For one provider: given its projects in the policy (name → settings) and the harness's
# clock, a fleet per project (projects of one account may share their clusters).
FleetMaker = Callable[
    [Mapping[str, ProjectCommon], Callable[[], datetime]], Mapping[str, Fleet[Any]]
]


class ScriptedAdapter(Generic[C]):
    """A project's adapter on the core harness: the descriptor's rules, the fleet's
    clusters, the script's steps."""

    def __init__(
        self,
        descriptor: ProviderDescriptor,
        project: str,
        section: ProviderSection,
        fleet: Fleet[C],
    ) -> None:
        self.descriptor = descriptor
        self.provider = descriptor.name
        self.project = project
        self.fleet = fleet
        self.clusters: C = fleet.clusters
        self.rules = fleet.rules(descriptor, offline_connection(descriptor, project, section))
        self.script = Script()

    async def list_clusters(self) -> list[ClusterSummary]:
        step = await self.script.enter(Call("list_clusters"))
        if step is not None:
            return cast(list[ClusterSummary], step.answer)
        return self.fleet.listed()

    async def get_cluster(self, cluster_id: str) -> ClusterState:
        step = await self.script.enter(Call("get_cluster", cluster_id))
        if step is not None:
            return cast(ClusterState, step.answer)
        return self.fleet.state(cluster_id)

    async def apply(self, plan: ChangePlan) -> ApplyOutcome:
        step = await self.script.enter(Call("apply", plan.cluster_id, plan.action, plan.body))
        if step is not None:
            return cast(ApplyOutcome, step.answer)
        return self.fleet.applied(plan)

    def actions(self) -> list[str]:
        return self.rules.actions()

    def fields_for(self, action: str) -> list[FieldSpec]:
        return self.rules.fields_for(action)

    def fingerprint(self, state: ClusterState) -> dict[str, Any]:
        return self.rules.fingerprint(state)

    def plan(self, state: ClusterState, action: str, raw: Mapping[str, Any]) -> ChangePlan:
        return self.rules.plan(state, action, raw)

    def inverse(self, plan: ChangePlan, prior: Mapping[str, Any]) -> Inverse | None:
        return self.rules.inverse(plan, prior)

    def shows(self, plan: ChangePlan, state: ClusterState) -> bool:
        return self.rules.shows(plan, state)

    async def aclose(self) -> None:
        return None
