"""``gpuops check-config --online`` reads each on-call schedule once (SPEC §16) and says
which mapping makes each person on call a Slack user (the policy's ``people``, their e-mail
through ``users.lookupByEmail``), naming one with none (a failure) and a tool's fault."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.local.demo.stack import EMAILS
from bot.local.simulators.oncall import OpsgenieSimulator, PagerDutySimulator
from tests.support.oncall_kit import NIGHT, oncall_policy
from tests.support.process_kit import World, base_env, run_gpuops, running_world

PD_TOKEN = "pd-check-config-token-5e1"
OG_TOKEN = "og-check-config-key-8a2"


@pytest.fixture
async def world() -> AsyncIterator[tuple[World, PagerDutySimulator, OpsgenieSimulator]]:
    async with running_world() as world:
        world.slack.emails.update(EMAILS)
        world.slack.scopes = world.slack.scopes | {"users:read.email"}
        pd = PagerDutySimulator(PD_TOKEN, now=NIGHT)
        og = OpsgenieSimulator(OG_TOKEN, now=NIGHT)
        await pd.start()
        await og.start()
        try:
            yield world, pd, og
        finally:
            await og.stop()
            await pd.stop()


async def test_each_on_call_person_has_their_mapping_said(
    tmp_path: Path, world: tuple[World, PagerDutySimulator, OpsgenieSimulator]
) -> None:
    slack, pd, og = world
    pd.advance(12 * 3600)  # 15:00: Carol (no mapping at all) is on call at level 1
    slack.slack.emails.pop("U03CAROL")
    policy = tmp_path / "policy.yml"
    policy.write_text(
        oncall_policy(people="{PALICE01: U01ALICE}").replace(
            "  people:", "  match_by_email: true\n  people:"
        )
    )
    urls = json.dumps({"pagerduty": pd.base_url, "opsgenie": og.base_url})
    env = base_env(
        tmp_path,
        policy,
        **slack.urls(),
        PAGERDUTY_TOKEN=PD_TOKEN,
        OPSGENIE_TOKEN=OG_TOKEN,
        GPUOPS_ONCALL_BASE_URLS=urls,
    )
    done = await run_gpuops(["check-config", "--online"], env, tmp_path)
    assert done.code == 1, done.stdout + done.stderr
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    pd_where = "oncall platform-primary (PagerDuty schedule PPLATFRM)"
    assert f"ok {pd_where}: 2 on call now" in lines
    assert (
        f"FAIL {pd_where}: Carol (PagerDuty user PCAROL01), level 1: no Slack user (not in "
        "people, no Slack user with their e-mail): add them to oncall.people" in lines
    )
    assert f"ok {pd_where}: Alice (PagerDuty user PALICE01), level 2 → <@U01ALICE> (by people)" in (
        lines
    )
    og_where = "oncall storage (Opsgenie schedule PPLATFRM)"
    assert (
        f"ok {og_where}: bob@example.com (Opsgenie user PBOB0001), level 1 → <@U02BOB> (by e-mail)"
        in lines
    )
    assert PD_TOKEN not in done.stdout + done.stderr and OG_TOKEN not in done.stdout + done.stderr


async def test_an_unreachable_on_call_tool_fails_the_check(
    tmp_path: Path, world: tuple[World, PagerDutySimulator, OpsgenieSimulator]
) -> None:
    slack, _, og = world
    policy = tmp_path / "policy.yml"
    policy.write_text(oncall_policy())
    urls = json.dumps({"pagerduty": "http://127.0.0.1:9", "opsgenie": og.base_url})
    env = base_env(
        tmp_path,
        policy,
        **slack.urls(),
        PAGERDUTY_TOKEN=PD_TOKEN,
        OPSGENIE_TOKEN=OG_TOKEN,
        GPUOPS_ONCALL_BASE_URLS=urls,
    )
    done = await run_gpuops(["check-config", "--online"], env, tmp_path)
    assert done.code == 1
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert (
        "FAIL oncall platform-primary (PagerDuty schedule PPLATFRM): PagerDuty could not be "
        "reached (ConnectError)" in lines
    )
