"""Keep secrets out of every text that leaves the process: logs, messages, rows, exceptions.

Two layers: a registry of the exact secret values this process holds (API keys, tokens,
signing secret), and patterns for credentials in shapes we know (``apikey=`` query
parameters, bearer headers, Slack tokens) so that a value we were never told about is
still masked.
"""

from __future__ import annotations

import logging
import re
import threading

MASK = "***"

_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?i)(apikey=)[^&\s'\"<>]+"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=\-]+"),
    re.compile(r"(xox[abpors]-)[A-Za-z0-9\-]+"),
    re.compile(r"(xapp-)[A-Za-z0-9\-]+"),
    re.compile(r"(xwfp-)[A-Za-z0-9\-]+"),  # a workflow step's token (function_executed)
    re.compile(r"(gpo_)[A-Za-z0-9_\-]{8,}"),  # a person's token for agents (SPEC §15)
    re.compile(r"(?i)(token\s+token=)[^\s'\"<>,]+"),  # PagerDuty's Authorization header
    re.compile(r"(?i)(geniekey\s+)[^\s'\"<>,]+"),  # Opsgenie's Authorization header
)

_lock = threading.Lock()
_secrets: set[str] = set()

# Secrets shorter than this are not registered: masking "1" everywhere would wreck texts.
_MIN_SECRET_LEN = 4


def register_secret(value: str | None) -> None:
    """Remember a secret value so that redact() masks it wherever it appears."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            _secrets.add(value)


def registered_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


def redact(text: str) -> str:
    """Return text with every known secret and credential-shaped value masked."""
    for secret in sorted(registered_secrets(), key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that renders the record, redacts it, and freezes the result."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the line
            message = str(record.msg)
        record.msg = redact(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
            del exc
        return True


_installed = False


def install_log_redaction() -> None:
    """Attach the redacting filter to the root logger's handlers and to noisy libraries.

    httpx logs every request URL at INFO, and the E2E URL carries the api key, so its
    logger is filtered too (and kept at WARNING by default).
    """
    global _installed
    root = logging.getLogger()
    flt = RedactingFilter()
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(flt)
    for name in ("httpx", "httpcore", "slack_bolt", "slack_sdk", "aiohttp.access"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(flt)
    if not _installed:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        _installed = True
