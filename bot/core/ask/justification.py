"""The rule for a person's justification of going past a safeguard (SPEC §8).

A break glass (an admin approving their own request) and a freeze override both ask
*why*; the same rule holds for both, wherever it is typed (a modal, a ``/gpu`` command):
10 to 500 characters once trimmed, enough to say something a reviewer can read.
"""

from __future__ import annotations

MIN_JUSTIFICATION = 10
MAX_JUSTIFICATION = 500
JUSTIFICATION_RULE = f"{MIN_JUSTIFICATION} to {MAX_JUSTIFICATION} characters"


def justification_problem(text: str, what: str) -> str | None:
    """What is wrong with ``text`` as ``what`` (e.g. "an override"), in words; None when
    it keeps the rule."""
    size = len(text.strip())
    if MIN_JUSTIFICATION <= size <= MAX_JUSTIFICATION:
        return None
    return f"{what} must say why it cannot wait in {JUSTIFICATION_RULE}; yours has {size}."
