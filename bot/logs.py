"""Log lines as text or as one JSON object per line (SPEC §12), with the request's context.

The context (``request_id``, ``user``, ``channel``, ``project``, ``cluster``) travels in a
context variable: code that knows a field binds it once with ``log_context``, and every line
logged beneath it, by gpuops or by a library, carries it. Secrets are masked as in text logs.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Literal, TextIO

from bot.redact import install_log_redaction, redact

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
CONTEXT_FIELDS = ("request_id", "user", "channel", "project", "cluster")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "gpuops_log_context", default=MappingProxyType({})
)


@contextlib.contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Bind context fields for every line logged inside the block (unset ones are kept)."""
    token = _context.set(_merged(fields))
    try:
        yield
    finally:
        _context.reset(token)


def add_log_context(**fields: str | None) -> None:
    """Add fields learnt inside a ``log_context`` block (e.g. a request id once created);
    the block's end drops them with the rest."""
    _context.set(_merged(fields))


def current_log_context() -> Mapping[str, str]:
    return _context.get()


def _merged(fields: Mapping[str, str | None]) -> Mapping[str, str]:
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise ValueError(f"unknown log context field(s): {', '.join(sorted(unknown))}")
    known = {name: str(value) for name, value in fields.items() if value}
    return {**_context.get(), **known}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts (RFC 3339, UTC), level, logger, message, context."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, str] = {
            "ts": _rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        entry.update({k: redact(v) for k, v in current_log_context().items()})
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exception"] = redact(record.exc_text)
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return json.dumps(entry, ensure_ascii=False)


def _rfc3339(created: float) -> str:
    stamp = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def configure_logging(level: str, log_format: LogFormat, stream: TextIO | None = None) -> None:
    """The process's one log handler (on the root logger, so Bolt's, aiohttp's and every
    library's lines go through it), in the chosen format, with secrets masked."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"GPUOPS_LOG_FORMAT must be text or json (got '{log_format}')")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    install_log_redaction()
