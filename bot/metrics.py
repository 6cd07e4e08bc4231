"""Prometheus metrics, one registry for the process (served on /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

COMMANDS = Counter(
    "gpuops_commands_total",
    "Slash commands and mentions handled, by command and outcome.",
    ["command", "outcome"],
    registry=REGISTRY,
)
CHANGE_REQUESTS = Counter(
    "gpuops_change_requests_total",
    "Change requests by final outcome (succeeded, failed, unknown, denied, expired, "
    "cancelled, refused).",
    ["provider", "outcome"],
    registry=REGISTRY,
)
APPROVALS_PENDING = Gauge(
    "gpuops_approvals_pending",
    "Change requests waiting for approval.",
    registry=REGISTRY,
)
APPROVAL_DECISIONS = Counter(
    "gpuops_approval_decisions_total",
    "Approval decisions (approved, denied, cancelled, expired, refused).",
    ["decision"],
    registry=REGISTRY,
)
PROVIDER_LATENCY = Histogram(
    "gpuops_provider_request_seconds",
    "Provider HTTP call latency, per attempt.",
    ["provider", "operation"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
PROVIDER_ERRORS = Counter(
    "gpuops_provider_errors_total",
    "Provider call failures by kind (after retries).",
    ["provider", "operation", "kind"],
    registry=REGISTRY,
)
PROVIDER_RETRIES = Counter(
    "gpuops_provider_retries_total",
    "Provider call attempts that were retried.",
    ["provider", "operation"],
    registry=REGISTRY,
)
SLACK_API_ERRORS = Counter(
    "gpuops_slack_api_errors_total",
    "Slack Web API calls that failed, by method and error.",
    ["method", "error"],
    registry=REGISTRY,
)
SLACK_ANSWERS_PAST_BUDGET = Counter(
    "gpuops_slack_answers_past_budget_total",
    "Slack requests answered empty because their listener had not answered within the "
    "2.5 s budget (the listener goes on and reports elsewhere), by payload type.",
    ["kind"],
    registry=REGISTRY,
)

HOME_PUBLISHES = Counter(
    "gpuops_home_publishes_total",
    "App Home tabs published (views.publish), by outcome (ok, failed).",
    ["outcome"],
    registry=REGISTRY,
)
WATCH_POLLS = Counter(
    "gpuops_watch_polls_total",
    "Watcher polls of a project, by provider and outcome (ok, or the error kind).",
    ["provider", "outcome"],
    registry=REGISTRY,
)
LEDGER_ACCRUALS = Counter(
    "gpuops_ledger_accruals_total",
    "Intervals of a cluster's time the usage ledger accrued, polled or estimated (a gap).",
    ["kind"],
    registry=REGISTRY,
)
WATCH_ALERTS = Counter(
    "gpuops_watch_alerts_posted_total",
    "Messages the watcher posted first in a notify channel, by kind.",
    ["kind"],
    registry=REGISTRY,
)
REMEDIATION_DECISIONS = Counter(
    "gpuops_remediation_decisions_total",
    "Remediation decisions from Slack by outcome (approved, rejected, already_decided, "
    "failed, unknown, refused, elsewhere).",
    ["outcome"],
    registry=REGISTRY,
)
POLICY_RELOADS = Counter(
    "gpuops_policy_reloads_total",
    "Policy file reloads (SIGHUP or a changed file) by result: reloaded, unchanged, invalid.",
    ["result"],
    registry=REGISTRY,
)
POLICY_KEPT = Counter(
    "gpuops_policy_kept_total",
    "Policy files refused, the policy in force kept, by reason: unreadable, invalid, "
    "rejected (it cannot be served, e.g. an unset credential), section_lost (it drops a "
    "section the policy in force has without saying so).",
    ["reason"],
    registry=REGISTRY,
)
POLICY_FILE_REFUSED = Gauge(
    "gpuops_policy_file_refused",
    "1 for the reason the policy file last looked at is refused (its policy is not in "
    "force), 0 for the others; all 0 while the file is the policy in force.",
    ["reason"],
    registry=REGISTRY,
)

STORE_STATEMENTS = Counter(
    "gpuops_store_statements_total",
    "SQL statements the state store sent (not counting the BEGIN that opens a transaction).",
    registry=REGISTRY,
)
STORE_TRANSACTIONS = Counter(
    "gpuops_store_transactions_total",
    "Transactions the state store opened (committed or rolled back).",
    registry=REGISTRY,
)
SLACK_CALLS = Counter(
    "gpuops_slack_calls_total",
    "HTTP calls to Slack over the app's session, by Web API method (or response_url, "
    "file_upload); a retried call counts each attempt.",
    ["method"],
    registry=REGISTRY,
)


def render_metrics() -> bytes:
    return generate_latest(REGISTRY)
