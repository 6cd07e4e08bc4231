"""A provider call that is retried logs one line per retry saying what, why and when the
next attempt is (stamina's own hook logged a bare ``stamina.retry_scheduled``)."""

from __future__ import annotations

import logging
import re

import pytest

from bot.local.simulators.base import Fault, FaultKind
from bot.providers.errors import ProviderError
from tests.support.reliability import closed_port
from tests.support.together_kit import client_for, running_simulator


async def test_each_retry_is_one_line_with_the_call_and_the_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_simulator() as sim:
        sim.faults.add(Fault(route="get", kind=FaultKind.SERVER_ERROR, status=503, times=2))
        client = client_for(sim.base_url)
        try:
            await client.get_cluster("tc-h100-reserved")
        finally:
            await client.aclose()
    retries = [r for r in caplog.records if r.name == "bot.providers.http"]
    assert [r.levelno for r in retries] == [logging.WARNING, logging.WARNING]
    pattern = r"together GET /compute/clusters/tc-h100-reserved: HTTP 503; retry {n} in [\d.]+ s"
    for number, record in enumerate(retries, start=1):
        assert re.fullmatch(pattern.format(n=number), record.getMessage()), record.getMessage()
    assert not any(r.getMessage() == "stamina.retry_scheduled" for r in caplog.records)


async def test_a_refused_connection_names_the_cause(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="bot.providers.http")
    client = client_for(f"http://127.0.0.1:{closed_port()}/v1")
    try:
        with pytest.raises(ProviderError):
            await client.list_clusters()
    finally:
        await client.aclose()
    lines = [r.getMessage() for r in caplog.records]
    assert lines and all(
        line.startswith("together GET /compute/clusters: could not connect (ConnectError)")
        for line in lines
    )
