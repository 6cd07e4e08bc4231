"""Together node remediations: the client for listing them across a cluster's nodes and
approving, rejecting or cancelling one (SPEC §7.1); their models are in ``models``.

    client = RemediationClient(transport)
    pending = await client.list_remediations("tc-h100", states=[RemediationState.PENDING_APPROVAL])
    done = await client.approve(pending[0], comment="approved from #incident by U01ALICE")

Approve, reject and cancel are not idempotent: they go out with ``RetryMode.UNSAFE_WRITE``,
so they are never sent again once Together may have processed them. A refusal saying the
remediation is no longer pending raises ``AlreadyDecided``: someone decided it elsewhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from bot.providers.errors import (
    AlreadyDecided,
    ProviderError,
    ProviderMalformedReply,
    ProviderRequestError,
    error_for_status,
)
from bot.providers.http import (
    Operation,
    ProviderTransport,
    QueryValue,
    RetryMode,
    parse_retry_after,
)
from bot.providers.remediations import (
    APPROVAL_OVERRIDE_MODES,
    LinkedAlert,
    Remediation,
    RemediationAddress,
    RemediationRef,
    xid_summary,
)
from bot.providers.together.client import TogetherCalls, cluster_path, error_message
from bot.providers.together.models import PROVIDER, RemediationPage

__all__ = [
    "LinkedAlert",
    "Remediation",
    "RemediationAddress",
    "RemediationClient",
    "RemediationRef",
    "xid_summary",
]

ALL_NODES = "-"
DEFAULT_PAGE_SIZE = 100
MAX_PAGES = 50  # 5,000 remediations per listing: a bound against a token that never ends


# -- "no longer pending" -------------------------------------------------------------------
_NOT_PENDING = re.compile(
    r"pending[_ ]approval|not pending|no longer pending|already (approved|rejected|cancel"
    r"l?ed|decided|resolved|succeeded|failed)|current state|invalid state|state transition",
    re.IGNORECASE,
)


def says_not_pending(status: int, message: str) -> bool:
    """Whether a refused decision means someone decided first (409, or a 400/412 whose
    text is about the remediation's state)."""
    if status == 409:
        return True
    return status in (400, 412) and _NOT_PENDING.search(message) is not None


def remediations_path(cluster_id: str, instance_id: str = ALL_NODES) -> str:
    instance = ALL_NODES if instance_id == ALL_NODES else quote(instance_id, safe="")
    return f"{cluster_path(cluster_id)}/instances/{instance}/remediations"


def decision_path(remediation: RemediationAddress, verb: str) -> str:
    base = remediations_path(remediation.cluster_id, remediation.instance_id)
    return f"{base}/{quote(remediation.id, safe='')}/{verb}"


# -- the client ----------------------------------------------------------------------------
class RemediationClient(TogetherCalls):
    """Typed calls to Together's remediation endpoints over a ProviderTransport."""

    def __init__(self, transport: ProviderTransport, page_size: int = DEFAULT_PAGE_SIZE) -> None:
        super().__init__(transport)
        self.page_size = page_size

    async def list_remediations(
        self,
        cluster_id: str,
        *,
        states: Iterable[str] = (),
        instance_id: str = ALL_NODES,
        max_pages: int = MAX_PAGES,
    ) -> list[Remediation]:
        """Every remediation of the cluster (or one node) in ``states`` (all when empty),
        reading every page up to ``max_pages``."""
        if not cluster_id:
            raise self._count(
                Operation.LIST_REMEDIATIONS,
                ProviderRequestError("no cluster id", provider=PROVIDER),
            )
        params: dict[str, QueryValue] = {"page_size": str(self.page_size)}
        wanted = list(states)
        if wanted:
            params["state"] = ",".join(wanted)  # the official SDK's array format
        found: list[Remediation] = []
        for _ in range(max_pages):
            page = await self._page(remediations_path(cluster_id, instance_id), params)
            found.extend(page.remediations)
            if not page.has_next or not page.next_page_token:
                return found
            params["page_token"] = page.next_page_token
        raise self._count(
            Operation.LIST_REMEDIATIONS,
            ProviderMalformedReply(
                f"more than {max_pages} pages of remediations", provider=PROVIDER, status=200
            ),
        )

    async def get(self, cluster_id: str, instance_id: str, remediation_id: str) -> Remediation:
        path = f"{remediations_path(cluster_id, instance_id)}/{quote(remediation_id, safe='')}"
        body = await self._call("GET", path, Operation.GET_REMEDIATION, RetryMode.READ)
        return self._remediation(body, Operation.GET_REMEDIATION, may_have_applied=False)

    async def approve(
        self,
        remediation: RemediationAddress,
        *,
        comment: str | None = None,
        mode: str | None = None,
    ) -> Remediation:
        if mode is not None and mode not in APPROVAL_OVERRIDE_MODES:
            raise ProviderRequestError(
                f"{mode} cannot be set when approving", provider=PROVIDER, status=None
            )
        body: dict[str, str] = {}
        if comment:
            body["comment"] = comment
        if mode:
            body["mode"] = mode
        return await self._decide(remediation, "approve", body)

    async def reject(
        self, remediation: RemediationAddress, *, comment: str | None = None
    ) -> Remediation:
        return await self._decide(remediation, "reject", {"comment": comment} if comment else {})

    async def cancel(self, remediation: RemediationAddress) -> Remediation:
        return await self._decide(remediation, "cancel", None)

    async def aclose(self) -> None:
        await self.transport.aclose()

    # -- internals ----------------------------------------------------------------------
    async def _page(self, path: str, params: Mapping[str, QueryValue]) -> RemediationPage:
        body = await self._call(
            "GET", path, Operation.LIST_REMEDIATIONS, RetryMode.READ, params=params
        )
        try:
            return RemediationPage.model_validate(body)
        except ValidationError as exc:
            raise self._malformed(
                Operation.LIST_REMEDIATIONS, exc, what="a remediation", may_have_applied=False
            ) from None

    async def _decide(
        self, remediation: RemediationAddress, verb: str, body: dict[str, str] | None
    ) -> Remediation:
        operation = Operation.DECIDE_REMEDIATION
        reply = await self._call(
            "POST",
            decision_path(remediation, verb),
            operation,
            RetryMode.UNSAFE_WRITE,
            json=body,
        )
        return self._remediation(reply, operation, may_have_applied=True)

    def _status_error(self, response: httpx.Response, *, may_have_applied: bool) -> ProviderError:
        message = error_message(response)
        if says_not_pending(response.status_code, message):
            return AlreadyDecided(message, provider=PROVIDER, status=response.status_code)
        return error_for_status(
            PROVIDER,
            response.status_code,
            message,
            retry_after=parse_retry_after(response.headers.get("Retry-After"), math.inf),
            may_have_applied=may_have_applied,
        )

    def _remediation(
        self, body: object, operation: Operation, *, may_have_applied: bool
    ) -> Remediation:
        try:
            return Remediation.model_validate(body)
        except ValidationError as exc:
            raise self._malformed(
                operation, exc, what="a remediation", may_have_applied=may_have_applied
            ) from None
