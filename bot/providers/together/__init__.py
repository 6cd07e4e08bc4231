"""Together AI Instant Clusters: wire models, HTTP client, update rules (SPEC §1.1) and the
provider-neutral adapter, one module each."""

from bot.providers.together.adapter import CHANGES, TogetherAdapter
from bot.providers.together.client import (
    TogetherClient,
    build_together_transport,
    cluster_path,
    error_message,
)
from bot.providers.together.descriptor import DESCRIPTOR, TogetherSection
from bot.providers.together.models import (
    GPUS_PER_NODE,
    PROVIDER,
    STEADY_STATUSES,
    UPDATE_FIELDS,
    BillingType,
    ClusterStatus,
    ClusterType,
    ClusterUpdate,
    GPUWorkerNode,
    PhaseTransition,
    TogetherCluster,
    rfc3339,
)
from bot.providers.together.rules import check_update, classify, parse_update
from bot.providers.together.summary import cluster_state, current_values, to_summary

__all__ = [
    "CHANGES",
    "DESCRIPTOR",
    "GPUS_PER_NODE",
    "PROVIDER",
    "STEADY_STATUSES",
    "UPDATE_FIELDS",
    "BillingType",
    "ClusterStatus",
    "ClusterType",
    "ClusterUpdate",
    "GPUWorkerNode",
    "PhaseTransition",
    "TogetherAdapter",
    "TogetherClient",
    "TogetherCluster",
    "TogetherSection",
    "build_together_transport",
    "check_update",
    "classify",
    "cluster_path",
    "cluster_state",
    "current_values",
    "error_message",
    "parse_update",
    "rfc3339",
    "to_summary",
]
