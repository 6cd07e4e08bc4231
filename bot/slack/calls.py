"""Counts the app's HTTP calls to Slack (``gpuops_slack_calls_total{method}``) on the one
session they share: Web API methods, ``response_url`` posts and file uploads."""

from __future__ import annotations

from types import SimpleNamespace

import aiohttp

from bot.metrics import SLACK_CALLS

_METHOD_MAX = 64


def slack_method(path: str) -> str:
    """The counter's label for a request path: the Web API method of ``…/api/<method>``, a
    file upload, or else a ``response_url`` (the session carries nothing else)."""
    _, api, method = path.rpartition("/api/")
    if api:
        return method.strip("/")[:_METHOD_MAX] or "unknown"
    if "/upload/" in path:
        return "file_upload"
    return "response_url"


async def _count(
    _session: aiohttp.ClientSession,
    _context: SimpleNamespace,
    params: aiohttp.TraceRequestStartParams,
) -> None:
    SLACK_CALLS.labels(slack_method(params.url.path)).inc()


def counting_slack_calls() -> aiohttp.TraceConfig:
    """A trace for the session: each request started counts once (a retry again)."""
    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(_count)
    return trace
