"""What the rest of gpuops knows about a provider: a neutral cluster summary, the fields a
change can set, a validated change plan with its preview, the adapter protocol that each
provider implements and the optional capabilities an adapter may have (the descriptor a
provider package exports is bot.providers.descriptor). Nothing here knows Slack or a
provider's wire format."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from bot.errors import GpuopsError
from bot.providers.pricing import NodePrice
from bot.providers.remediations import Remediation, RemediationAddress

# A provider's name as the policy spells it (``provider: together``); the catalog knows them.
ProviderName = str
# The optional features a provider's adapter may have (SupportsRemediations,
# SupportsReservations, SupportsProbe), as its descriptor declares them.
Capability = Literal["remediations", "reservations", "probe"]


Detail = str | int | None


class Fact(BaseModel):
    """One labelled line of a cluster summary, as plain text (the renderer escapes it)."""

    model_config = ConfigDict(frozen=True)

    label: str
    value: str


class ClusterSummary(BaseModel):
    """What a person needs to see about a cluster, whichever provider it is at: the neutral
    identity and state, and the provider's own lines as ordered ``facts`` that a renderer
    shows as they come, without knowing the provider."""

    model_config = ConfigDict(frozen=True)

    provider: ProviderName
    project: str
    cluster_id: str
    name: str
    status: str
    steady: bool
    gpu_type: str | None = None
    region: str | None = None
    billing: str | None = None
    node_price: NodePrice | None = None  # what one node costs, when the provider says
    size: str | None = None  # one line's worth of size: "24 GPUs", "2 nodes"
    facts: tuple[Fact, ...] = ()  # shown after status and provider/project, in this order
    # The provider's values behind the facts, by API field name (what its rules and callers
    # read; never shown as such).
    details: dict[str, Detail] = Field(default_factory=dict)


def count_text(value: int | None) -> str:
    """A count for a fact line: the number, or a dash when the provider did not say."""
    return "—" if value is None else str(value)


def example_time(now: datetime | None = None) -> str:
    """A time to show in hints and errors: midnight UTC 30 days from ``now``, so an example
    is always in the future (``2027-01-01T00:00:00Z``)."""
    moment = (now or datetime.now(UTC)).astimezone(UTC) + timedelta(days=30)
    midnight = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight.isoformat().replace("+00:00", "Z")


FieldKind = Literal["int", "int_list", "choice", "datetime"]


class FieldSpec(BaseModel):
    """One settable API field: how to ask for it in a modal and how to parse it."""

    model_config = ConfigDict(frozen=True)

    name: str  # the API field name; also the modal block_id and action_id
    label: str
    kind: FieldKind
    required: bool = False
    choices: tuple[str, ...] = ()
    hint: str = ""


class ProviderChanges(BaseModel):
    """What a provider can change, known without a credential (for help text and command
    checks): the command word that asks for it, its actions and each action's fields."""

    model_config = ConfigDict(frozen=True)

    provider: ProviderName
    title: str  # how people name the provider: "Together", "E2E"
    command: str  # the /gpu word for a change: "update" or "action"
    actions: tuple[str, ...]
    fields: dict[str, tuple[FieldSpec, ...]]  # action → its fields, in form order

    def field_names(self) -> list[str]:
        """Every field any action takes, once each, in the order the actions list them."""
        names: dict[str, None] = {}
        for action in self.actions:
            names.update((spec.name, None) for spec in self.fields.get(action, ()))
        return list(names)


class ClusterState(BaseModel):
    """A fetched cluster: the summary plus the current value of every settable field
    (for modal prefill, the 'before' of a preview and the stale check)."""

    summary: ClusterSummary
    current: dict[str, Any] = Field(default_factory=dict)


class PreviewLine(BaseModel):
    """One line of a change preview: ``num_gpus 8 → 16``, ``scale_cluster: 2 → 4 nodes``."""

    field: str
    before: str | None
    after: str
    unit: str = ""

    def text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.before is None:
            return f"{self.field} → {self.after}{unit}"
        return f"{self.field} {self.before} → {self.after}{unit}"


class ChangePlan(BaseModel):
    """A validated change, ready to send: the exact request body, the preview lines, the
    change kinds (for risk classification), and the fingerprint of the cluster it was
    planned against (compared again at approval to refuse a stale preview)."""

    provider: ProviderName
    project: str
    cluster_id: str
    cluster_name: str
    action: str  # "update" for Together; the action name for E2E
    body: dict[str, Any]
    kinds: list[str]
    lines: list[PreviewLine]
    fingerprint: dict[str, Any]
    # What one node cost when this was planned (its price line); never part of the change.
    node_price: NodePrice | None = None

    def preview_text(self) -> str:
        return "; ".join(line.text() for line in self.lines)


class Inverse(BaseModel):
    """The change that undoes a change: an action and its raw inputs (as for ``plan``)."""

    model_config = ConfigDict(frozen=True)

    action: str
    inputs: dict[str, Any]


def same_value(a: Any, b: Any) -> bool:
    """Field values compared as a person would: lists as sets, everything else as text."""
    if isinstance(a, list) and isinstance(b, list):
        return sorted(map(str, a)) == sorted(map(str, b))
    return a is not None and b is not None and str(a) == str(b)


class ApplyOutcome(BaseModel):
    """What the provider said after a change: its message and the cluster afterwards."""

    message: str
    summary: ClusterSummary | None = None


def parse_whole_number(value: Any) -> int:
    """A whole number from an int or its text, for either provider's fields. ValueError says
    what was given (the caller adds the field name or a range check)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a whole number (got {value!r})")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise ValueError(f"must be a whole number (got {value!r})")
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f"must be a whole number (got {value.strip()!r})") from None


def nearest_field(name: str, known: Sequence[str]) -> str | None:
    """The known field ``name`` was probably meant as: a near spelling (``num_gpu`` →
    ``num_gpus``) or a part of its name (``nodes`` → ``additional_nodes``); None if none."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    if close:
        return close[0]
    parts = set(name.split("_"))
    holding = [k for k in known if parts <= set(k.split("_"))]
    return holding[0] if len(holding) == 1 else None


def unknown_field(name: str, known: Sequence[str], owner: str) -> str:
    """What to say after ``name:`` of a field ``owner`` does not take, in one style for
    every provider: ``not a field of scale_cluster — did you mean additional_nodes?
    (fields: additional_nodes)``."""
    guess = nearest_field(name, known)
    meant = f" — did you mean {guess}?" if guess else ""
    return f"not a field of {owner}{meant} (fields: {', '.join(known) or 'none'})"


class ChangeInputError(GpuopsError, ValueError):
    """Some fields of a change could not be parsed; ``errors`` maps field → message."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {v}" for k, v in self.errors.items()))


class ProviderAdapter(Protocol):
    """The provider-neutral face of one project's provider client."""

    provider: ProviderName
    project: str

    async def list_clusters(self) -> list[ClusterSummary]: ...

    async def get_cluster(self, cluster_id: str) -> ClusterState: ...

    def actions(self) -> list[str]:
        """Action names ("update" for Together; the nine E2E actions)."""
        ...

    def fields_for(self, action: str) -> list[FieldSpec]: ...

    def fingerprint(self, state: ClusterState) -> dict[str, Any]:
        """What must not have changed between a preview and its execution (compared again at
        approval to refuse a stale preview)."""
        ...

    def plan(self, state: ClusterState, action: str, raw: Mapping[str, Any]) -> ChangePlan:
        """Parse raw field values (strings from Slack, or typed values) and check the
        provider rules against the fetched cluster. Raises ChangeInputError for values
        that do not parse and RuleViolation for a change the provider would refuse."""
        ...

    async def apply(self, plan: ChangePlan) -> ApplyOutcome:
        """Send the change once (retrying only what SPEC §1.3 allows)."""
        ...

    def inverse(self, plan: ChangePlan, prior: Mapping[str, Any]) -> Inverse | None:
        """The change that undoes ``plan``, given the changed fields' values just before it
        was sent (``prior``); None when it has none (SPEC §9)."""
        ...

    def shows(self, plan: ChangePlan, state: ClusterState) -> bool:
        """Whether the cluster still shows ``plan``'s result (as far as the provider says)."""
        ...

    async def aclose(self) -> None: ...


# -- optional features: capabilities an adapter may have, which the core asks for ---------


class RemediationDecisions(Protocol):
    """Listing a provider's node remediations and deciding one (SPEC §7.1). Approve and
    reject are not idempotent: they are sent once."""

    async def list_remediations(
        self, cluster_id: str, *, states: Sequence[str] = ()
    ) -> list[Remediation]: ...

    async def get(self, cluster_id: str, instance_id: str, remediation_id: str) -> Remediation: ...

    async def approve(
        self, remediation: RemediationAddress, *, comment: str | None = None
    ) -> Remediation: ...

    async def reject(
        self, remediation: RemediationAddress, *, comment: str | None = None
    ) -> Remediation: ...


@runtime_checkable
class SupportsRemediations(Protocol):
    """An adapter whose provider proposes node remediations for people to decide."""

    def remediations(self) -> RemediationDecisions: ...


@runtime_checkable
class SupportsProbe(Protocol):
    """An adapter that can show its provider's raw replies to reads (the list, then each
    cluster's get), as its models parsed them: nothing is written."""

    async def probe_replies(self) -> list[BaseModel]: ...


@runtime_checkable
class SupportsReservations(Protocol):
    """An adapter whose clusters may carry a reservation end: the change field that holds
    it (RFC 3339, in the summary's ``details`` too), which reminders offer to extend."""

    reservation_field: str
