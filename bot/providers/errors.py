"""The provider error hierarchy.

Every failure of a provider call is one of these. Each carries the provider's own message
(what the user sees), the HTTP status when there was one, and whether the request may have
been applied by the provider (which decides ``failed`` versus ``unknown`` for a change).
Texts are redacted at construction: no exception from here can carry a secret. A
validation refusal may name the request ``field`` at fault (a form marks that input).
"""

from __future__ import annotations

from bot.errors import GpuopsError
from bot.redact import redact


class ProviderError(GpuopsError):
    """A provider call failed."""

    kind = "error"

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        may_have_applied: bool = False,
        field: str | None = None,
    ) -> None:
        self.provider = provider
        self.status = status
        self.provider_message = redact(message)
        self.may_have_applied = may_have_applied
        self.field = field
        super().__init__(self.user_message)

    @property
    def user_message(self) -> str:
        status = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.provider}: {self.provider_message}{status}"


class ProviderAuthError(ProviderError):
    """401/403: the credential was refused."""

    kind = "auth"


class ProviderNotFound(ProviderError):
    """404: no such cluster (or not visible to this credential)."""

    kind = "not_found"


class ProviderRequestError(ProviderError):
    """The provider refused the request as invalid (4xx, or a failure envelope on 2xx)."""

    kind = "rejected"


class ProviderRateLimited(ProviderError):
    """429, after the retries the policy allows."""

    kind = "rate_limited"

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = 429,
        retry_after: float | None = None,
        may_have_applied: bool = False,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(
            message, provider=provider, status=status, may_have_applied=may_have_applied
        )


class ProviderServerError(ProviderError):
    """5xx from the provider."""

    kind = "server"


class ProviderTimeout(ProviderError):
    """No complete answer in time."""

    kind = "timeout"


class ProviderConnectionError(ProviderError):
    """The request could not be delivered (connection refused, DNS, TLS)."""

    kind = "connection"


class ProviderMalformedReply(ProviderError):
    """The provider answered with something that is not the documented shape."""

    kind = "malformed"


class RuleViolation(GpuopsError, ValueError):
    """A change breaks a provider rule; refused before any call.

    ``field`` names the API field at fault (the modal block to mark), when there is one.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        self.message = message
        super().__init__(message)


def error_for_status(
    provider: str,
    status: int | None,
    message: str,
    *,
    retry_after: float | None = None,
    may_have_applied: bool = False,
    field: str | None = None,
) -> ProviderError:
    """The error for a failed reply's status. ``may_have_applied`` only counts for a 5xx:
    every other failure status says the request was refused; ``field`` (the request field
    a validation refusal names) only for a 400 or 422."""
    if status in (401, 403):
        return ProviderAuthError(message, provider=provider, status=status)
    if status == 404:
        return ProviderNotFound(message, provider=provider, status=status)
    if status == 429:
        return ProviderRateLimited(
            message, provider=provider, status=status, retry_after=retry_after
        )
    if status is not None and status >= 500:
        return ProviderServerError(
            message, provider=provider, status=status, may_have_applied=may_have_applied
        )
    named = field if status in VALIDATION_STATUSES else None
    return ProviderRequestError(message, provider=provider, status=status, field=named)


VALIDATION_STATUSES = frozenset({400, 422})


class AlreadyDecided(ProviderRequestError):
    """A decision refused because the subject is no longer pending: someone decided it
    elsewhere first (e.g. a remediation approved in Together's console). Not a failure."""

    kind = "already_decided"
