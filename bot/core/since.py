"""``since`` as people write it: ``30m``, ``2h``, ``1d`` back from now, or an RFC 3339 time."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from bot.errors import GpuopsError

_AGO = re.compile(r"^([0-9]{1,6})([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}
_RFC3339_OFFSET = re.compile(r"(Z|[+-][0-9]{2}:[0-9]{2})$", re.IGNORECASE)
SINCE_FORMS = "`30m`, `2h`, `1d` or an RFC 3339 time such as `2026-12-01T08:00:00Z`"


class SinceError(GpuopsError, ValueError):
    """``since`` is not a time gpuops can read; the message says what would be."""


def parse_since(text: str, now: datetime) -> datetime:
    """The moment ``text`` names, at or before ``now`` (tz-aware)."""
    value = text.strip()
    ago = _AGO.match(value.lower())
    if ago is not None:
        return now - timedelta(**{_UNITS[ago.group(2)]: int(ago.group(1))})
    if not _RFC3339_OFFSET.search(value):
        raise SinceError(f"`{value[:40]}` is not a time: give {SINCE_FORMS} (with its UTC offset).")
    try:
        moment = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        raise SinceError(f"`{value[:40]}` is not a time: give {SINCE_FORMS}.") from None
    if moment > now:
        raise SinceError(f"`{value[:40]}` is in the future; give a time before now.")
    return moment
