"""Every Prometheus metric, defined once; processes import from here."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

OUTBOX_PENDING = Gauge(
    "agent_mesh_outbox_pending_total",
    "Outbox rows waiting to be relayed to the bus (status pending).",
)
OUTBOX_DISPATCH = Counter(
    "agent_mesh_outbox_dispatch",
    "Outbox rows handled by the relay, by result (sent, retry, failed).",
    ["result"],
)
CONSUMER_LAG_MAX = Gauge(
    "agent_mesh_consumer_lag_max",
    "Inbox events not acked yet by the agent furthest behind (inbox_seq - acked_seq), set by cron.",
)
# Per agent only with MESH_METRICS_AGENT_LABELS=true: agent ids name their owners,
# and whoever reads /metrics would read the mesh's directory (ADR 033).
CONSUMER_LAG = Gauge(
    "agent_mesh_consumer_lag",
    "Inbox events an agent has not acked yet (inbox_seq - acked_seq); "
    "exported only with MESH_METRICS_AGENT_LABELS=true.",
    ["agent_id"],
)
BUDGET_USED_MAX = Gauge(
    "agent_mesh_budget_used_ratio_max",
    "The largest share of its daily budget an agent has spent today (UTC; 1 = reached), "
    "among agents with a budget, set by cron.",
)
AGENTS_NEAR_BUDGET = Gauge(
    "agent_mesh_agents_near_budget",
    "Agents that have spent at least 80% of their daily budget today (UTC), set by cron.",
)
BUDGET_USED = Gauge(
    "agent_mesh_budget_used_ratio",
    "The share of its daily budget an agent has spent today (UTC); "
    "exported only with MESH_METRICS_AGENT_LABELS=true.",
    ["agent_id"],
)
E2E_LATENCY = Histogram(
    "agent_mesh_message_e2e_latency_seconds",
    "From the commit of an inbox event to its hand-over to a stream or poll client.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
DEDUP_HITS = Counter(
    "agent_mesh_dedup_hit",
    "Duplicates suppressed: idempotent retries, events the push worker had already written.",
    ["where"],
)
RECONNECTS = Counter(
    "agent_mesh_reconnects",
    "Retries after a lost connection or a failed call, by the loop that backed off "
    "(app/platform/retry.py). A steady rate means a dependency keeps failing.",
    ["component"],
)
NATS_REDELIVERIES = Counter(
    "agent_mesh_nats_redeliveries",
    "NATS bus: messages the push consumer received again (not acked within ack_wait, "
    "or handed back by a stopping member).",
)
RELAY_BATCHES = Counter(
    "agent_mesh_relay_batches",
    "Outbox batches the relay claimed and published (one transaction each).",
)
PUSH_WRITTEN = Counter(
    "agent_mesh_push_written",
    "Events the push worker appended to the per-agent Redis streams (duplicates excluded).",
)
RELAY_WAKEUPS = Counter(
    "agent_mesh_relay_wakeups",
    "Wake-ups a web process sent the relays (one covers every commit since the last): "
    "via=redis in the commit notices' pipeline, via=notify a Postgres NOTIFY (ADR 029).",
    ["via"],
)
TASK_CREATE_STATEMENTS = Counter(
    "agent_mesh_task_create_statements",
    "Statements that wrote task creates, each carrying one or more of them (ADR 028).",
)
TASK_TIMEOUTS = Counter(
    "agent_mesh_task_timeout",
    "Tasks failed by the activity timeout.",
)
HTTP_REQUESTS = Counter(
    "agent_mesh_http_requests",
    "HTTP requests by route template and status code.",
    ["route", "status"],
)
RATELIMIT_REJECTED = Counter(
    "agent_mesh_ratelimit_rejected",
    "Requests refused with 429 by the per-agent token bucket.",
)
DEAD_LETTERS = Gauge(
    "agent_mesh_outbox_failed_total",
    "Outbox rows in the dead letter (status failed).",
)
SSE_CONNECTIONS = Gauge(
    "agent_mesh_sse_connections",
    "Open inbox SSE streams in this process.",
)
LONGPOLL_WAITING = Gauge(
    "agent_mesh_longpoll_waiting",
    "Long-polls parked waiting for an event in this process.",
)
SSE_GAP_FILLS = Counter(
    "agent_mesh_sse_gap_fills",
    "Holes in an agent's Redis stream that an SSE reader filled from Postgres.",
)
A2A_STREAMS = Gauge(
    "agent_mesh_a2a_streams",
    "Open A2A task streams (SendStreamingMessage, SubscribeToTask) in this process.",
)
BROADCASTS_SETTLED = Counter(
    "agent_mesh_broadcasts_settled_total",
    "Broadcasts settled, by outcome (met, unmet, timeout); counted after the commit.",
    ["outcome"],
)
AUTH_THROTTLED = Counter(
    "agent_mesh_auth_throttled",
    "Register/login/API-key exchanges refused with 429, by bucket (app.services.auth_throttle).",
    ["bucket"],
)
OUTBOX_OLDEST_AGE = Gauge(
    "agent_mesh_outbox_oldest_pending_age_seconds",
    "Age of the oldest pending outbox row (0 when none), set by cron.",
)
# --- webhook delivery (workers/webhook.py, ADR 035): no per-agent labels ------------
WEBHOOK_ATTEMPTS = Counter(
    "agent_mesh_webhook_attempts_total",
    "Webhook POSTs attempted (one per event and try).",
)
WEBHOOK_FAILURES = Counter(
    "agent_mesh_webhook_failures_total",
    "Webhook attempts that did not ack, by reason (status, timeout, connect, refused).",
    ["reason"],
)
WEBHOOK_BREAKERS_OPEN = Gauge(
    "agent_mesh_webhook_breakers_open",
    "Agents whose webhook breaker is open (all of the mesh's, read at each sweep).",
)

# --- the outbound A2A bridge (ADR 041) ----------------------------------------------
A2A_FORWARDED = Counter(
    "agent_mesh_a2a_bridge_forwarded_total",
    "Inbox events of a2a agents forwarded to (or, without an A2A counterpart, "
    "acked for) their remote A2A servers.",
)
A2A_UNREACHABLE = Counter(
    "agent_mesh_a2a_bridge_unreachable_total",
    "Calls to a remote A2A server that did not reach it (retried with backoff).",
)
WEBHOOK_LATENCY = Histogram(
    "agent_mesh_webhook_delivery_seconds",
    "Webhook POST round trip, from connect to the answer, whatever the answer.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
