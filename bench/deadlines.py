"""Slack's deadlines under load (SPEC §4.6), against ``gpuops serve`` and the strict stand-in.

    .venv/bin/python -m bench.deadlines [--forms 50] [--submissions 20] [--out DIR]

Two scenarios, each person in their own channel on their own cluster, every Together call
answered ``--provider-latency`` (1 s) late:

- **forms**: ``--forms`` commands at once, of which ``--lists`` are ``/gpu list`` (the
  incident crowd) and the rest ``/gpu update together-prod <cluster>`` (no field: the form
  opens); measured is the time from each form command to its ``views.open`` reaching Slack,
  and whether Slack accepted it (a trigger_id lives 3 s). Target: p99 ≤ 1.0 s.
- **submissions**: ``--submissions`` open forms are submitted at once while the user-group
  cache is cold and ``usergroups.users.list`` takes ``--group-latency`` (4 s); measured is
  the HTTP answer time of each ``view_submission``. Target: p99 ≤ 2.5 s. Late answers (Slack
  ignores them and shows an error) and provider PUTs are counted too: a late answer whose
  change still ran is the failure the person cannot see.

Prints the figures, writes ``deadlines.json`` under ``--out`` and exits 1 on a missed target.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx

from bench.procs import Child, clean_env, free_port, gpuops_command
from bench.report import percentile
from bot.local.demo.stack import (
    DEMO_BOT_TOKEN,
    DEMO_E2E_KEY,
    DEMO_E2E_TOKEN,
    DEMO_SIGNING_SECRET,
    DEMO_TOGETHER_KEY,
)
from bot.local.simulators.base import Fault, FaultKind
from bot.local.simulators.e2e import E2ESimulator
from bot.local.simulators.together import TogetherSimulator
from bot.local.slack.models import View
from bot.local.slack.sender import SlackSender
from bot.local.slack.server import FakeSlack

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
PROJECT = "together-prod"
TEMPLATE_CLUSTER = "tc-h200-ondemand"  # ON_DEMAND, 8 GPUs: a scale-up needs no approval
GROUP = "S0PLATFORM"
GROUP_CACHE_SECONDS = 2.0  # short, so the submissions meet a cold user-group cache
FORM_OPEN_TARGET = 1.0
SUBMISSION_TARGET = 2.5
WAIT_FOR_SLACK = 15.0  # how long a views.open / filled-in form may take to show at all


def person(index: int) -> str:
    return f"U0BENCH{index:03d}"


def channel(index: int) -> str:
    return f"C0DEADLN{index:03d}"


def cluster(index: int) -> str:
    return f"tc-deadline-{index:03d}"


def policy(people: int) -> str:
    """Every bench person is an operator of together-prod; a user-group grant makes every
    authorization resolve the group (as for most real teams)."""
    users = ", ".join(person(i) for i in range(people))
    return f"""\
projects:
  {PROJECT}:
    provider: together
    api_key_env: TOGETHER_API_KEY
    project_id: proj-123
grants:
  - usergroups: [{GROUP}]
    projects: ["*"]
    role: approver
  - users: [{users}]
    projects: [{PROJECT}]
    role: operator
approvals:
  expire_after_minutes: 30
"""


@dataclass
class DeadlineConfig:
    forms: int = 50
    lists: int = 20
    submissions: int = 20
    provider_latency: float = 1.0
    group_latency: float = 4.0


@dataclass
class Scenario:
    name: str
    target_seconds: float
    seconds: list[float] = field(default_factory=list)
    """Measured per person; a miss (no answer at all) counts as ``inf``."""
    refused: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def p99(self) -> float | None:
        return percentile(self.seconds, 99)

    @property
    def ok(self) -> bool:
        p99 = self.p99
        return p99 is not None and p99 <= self.target_seconds and not self.refused

    def summary(self) -> str:
        finite = sorted(s for s in self.seconds if s != float("inf"))
        p50 = percentile(finite, 50)
        p99 = self.p99
        return (
            f"{self.name}: n={len(self.seconds)} p50 {_s(p50)} p99 {_s(p99)} "
            f"max {_s(finite[-1] if finite else None)} (target p99 ≤ {self.target_seconds} s)"
            f"; refused by Slack {len(self.refused)}; {json.dumps(self.notes)} "
            f"-> {'met' if self.ok else 'MISSED'}"
        )


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    return "never" if value == float("inf") else f"{value:.2f} s"


class DeadlineBench:
    def __init__(self, config: DeadlineConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        people = max(config.forms, config.submissions)
        self.slack = FakeSlack(
            DEMO_BOT_TOKEN,
            channels={channel(i): f"deadline-{i:03d}" for i in range(people)},
            users={person(i): f"Bench {i}" for i in range(people)},
            usergroups={GROUP: ["U03CAROL"]},
        )
        self.together = TogetherSimulator(api_key=DEMO_TOGETHER_KEY, transition_seconds=0.05)
        self.e2e = E2ESimulator(api_key=DEMO_E2E_KEY, auth_token=DEMO_E2E_TOKEN)
        self.people = people

    async def start(self) -> Child:
        await self.together.start()
        await self.e2e.start()
        api_url = await self.slack.start()
        template = self.together.clusters[TEMPLATE_CLUSTER]
        for index in range(self.people):
            copied = copy.deepcopy(template)
            copied.update(cluster_id=cluster(index), cluster_name=f"deadline-{index:03d}")
            self.together.clusters[cluster(index)] = copied
        self.together.faults.add(
            Fault(kind=FaultKind.LATENCY, seconds=self.config.provider_latency, times=-1)
        )
        policy_file = self.workdir / "policy.yml"
        policy_file.write_text(policy(self.people))
        env = {
            "SLACK_BOT_TOKEN": DEMO_BOT_TOKEN,
            "SLACK_SIGNING_SECRET": DEMO_SIGNING_SECRET,
            "SLACK_API_URL": api_url,
            "GPUOPS_POLICY": str(policy_file),
            "GPUOPS_DATABASE_URL": f"sqlite:///{self.workdir / 'gpuops.db'}",
            "GPUOPS_POLL_SECONDS": "0",
            "GPUOPS_LOG_LEVEL": "WARNING",
            "GPUOPS_USERGROUP_CACHE_SECONDS": str(GROUP_CACHE_SECONDS),
            "TOGETHER_BASE_URL": self.together.base_url,
            "E2E_BASE_URL": self.e2e.base_url,
            "TOGETHER_API_KEY": DEMO_TOGETHER_KEY,
            "E2E_API_KEY": DEMO_E2E_KEY,
            "E2E_AUTH_TOKEN": DEMO_E2E_TOKEN,
        }
        port = free_port()
        child = Child.spawn("gpuops", gpuops_command(port), clean_env(env), port, self.workdir)
        await child.wait_ready()
        return child

    async def stop(self) -> None:
        await self.slack.stop()
        await self.e2e.stop()
        await self.together.stop()

    async def forms(self, sender: SlackSender) -> Scenario:
        """``forms`` commands at once (``lists`` of them lists); command → views.open."""
        scenario = Scenario("command → views.open", FORM_OPEN_TARGET)
        lists = min(self.config.lists, self.config.forms)

        async def one(index: int) -> tuple[float, str]:
            sent_at = time.time()
            result = await sender.command(person(index), channel(index), _form_command(index))
            return sent_at, parse_qs(result.request_body)["trigger_id"][0]

        async def listing(index: int) -> None:
            await sender.command(person(index), channel(index), "list")

        listed, sent = await asyncio.gather(
            asyncio.gather(*(listing(i) for i in range(lists))),
            asyncio.gather(*(one(i) for i in range(lists, self.config.forms))),
        )
        triggers = {trigger for _, trigger in sent}
        await _until(lambda: triggers <= self._opened_triggers(), WAIT_FOR_SLACK)
        calls = {str(c.args.get("trigger_id")): c for c in self.slack.calls_to("views.open")}
        for sent_at, trigger in sent:
            call = calls.get(trigger)
            scenario.seconds.append(float("inf") if call is None else call.at - sent_at)
            if call is not None and not call.ok:
                scenario.refused.append(str(call.error))
        scenario.notes.update(lists=len(listed), errors_shown=len(self.slack.errors_shown))
        return scenario

    def _opened_triggers(self) -> set[str]:
        return {str(c.args.get("trigger_id")) for c in self.slack.calls_to("views.open")}

    async def submissions(self, sender: SlackSender) -> Scenario:
        """``submissions`` filled-in forms submitted at once, with a cold, slow group."""
        scenario = Scenario("view_submission answer", SUBMISSION_TARGET)
        count = self.config.submissions
        self.slack.reset()
        for index in range(count):
            await sender.command(person(index), channel(index), _form_command(index))
        views = await _until(lambda: self._filled_forms(count), WAIT_FOR_SLACK)
        await asyncio.sleep(GROUP_CACHE_SECONDS + 0.5)  # the group cache goes cold
        self.together.requests.clear()
        self.slack.delay("usergroups.users.list", self.config.group_latency)
        try:
            results = await asyncio.gather(
                *(
                    sender.view_submission(person(i), view.id, {"num_gpus": "16"})
                    for i, view in enumerate(views)
                )
            )
            await asyncio.sleep(self.config.group_latency + 3 * self.config.provider_latency)
        finally:
            self.slack.delay("usergroups.users.list", 0)
        scenario.seconds = [r.elapsed for r in results]
        scenario.notes.update(
            late=sum(1 for r in results if r.late),
            errors_shown=len(self.slack.errors_shown),
            puts=len(self.together.calls("update", "PUT")),
        )
        return scenario

    def _filled_forms(self, count: int) -> list[View] | None:
        views = [self.slack.last_view_for(person(i), open_only=True) for i in range(count)]
        ready = [v for v in views if v is not None and v.history]
        return ready if len(ready) == count else None


def _form_command(index: int) -> str:
    return f"update {PROJECT} {cluster(index)}"


async def _until(predicate: Any, within: float) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    return predicate()


async def run_deadlines(config: DeadlineConfig, log: Any = print) -> list[Scenario]:
    with tempfile.TemporaryDirectory(prefix="gpuops-deadlines-") as tmp:
        bench = DeadlineBench(config, Path(tmp))
        child = await bench.start()
        http = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=500))
        sender = SlackSender(child.events_url, DEMO_SIGNING_SECRET, bench.slack, http=http)
        try:
            forms = await bench.forms(sender)
            log(forms.summary())
            submissions = await bench.submissions(sender)
            log(submissions.summary())
        finally:
            await http.aclose()
            await child.stop()
            await bench.stop()
    return [forms, submissions]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deadlines", description=__doc__)
    parser.add_argument("--forms", type=int, default=50)
    parser.add_argument("--lists", type=int, default=20, help="of --forms, how many list")
    parser.add_argument("--submissions", type=int, default=20)
    parser.add_argument("--provider-latency", type=float, default=1.0)
    parser.add_argument("--group-latency", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    config = DeadlineConfig(
        forms=args.forms,
        lists=args.lists,
        submissions=args.submissions,
        provider_latency=args.provider_latency,
        group_latency=args.group_latency,
    )
    scenarios = asyncio.run(run_deadlines(config))
    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "config": asdict(config),
        "scenarios": [
            {
                **asdict(s),
                "p99": s.p99,
                "ok": s.ok,
                "seconds": [_json_seconds(x) for x in s.seconds],
            }
            for s in scenarios
        ],
    }
    (args.out / "deadlines.json").write_text(json.dumps(report, indent=2))
    missed = [s for s in scenarios if not s.ok]
    for scenario in missed:
        print(f"MISSED {scenario.summary()}", file=sys.stderr)
    return 1 if missed else 0


def _json_seconds(value: float) -> float | None:
    return None if value == float("inf") else round(value, 4)


if __name__ == "__main__":
    raise SystemExit(main())
