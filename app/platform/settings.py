"""Every knob of the mesh, read once from the environment (prefix ``MESH_``).

Processes build one :class:`Settings` at start-up and pass it down; nothing
below this module reads the environment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# In the source for anyone to read: a gateway outside development refuses it
# (:func:`refusals`), or anyone could sign owner and agent tokens.
DEFAULT_JWT_SECRET = "dev-insecure-change-me-0123456789abcdef"

# The most a publication's fields may ever hold (the settings below may only lower
# them); app.domain.schemas documents these in /openapi.json.
PUBLICATION_TITLE_CEILING = 120
PUBLICATION_SUMMARY_CEILING = 2000
PUBLICATION_TAGS_CEILING = 10
PUBLICATION_TAG_CEILING = 32


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MESH_", extra="ignore")

    # --- services -----------------------------------------------------------
    database_url: str = "postgresql://postgres@127.0.0.1:5432/mesh"
    redis_url: str = "redis://127.0.0.1:6379/0"
    kafka_bootstrap: str | None = None
    # "SSL" for brokers that only speak TLS (e.g. Amazon MSK on 9094); the
    # system CA bundle verifies the broker.
    kafka_security_protocol: Literal["PLAINTEXT", "SSL"] = "PLAINTEXT"
    # NATS JetStream (MESH_BUS=nats), e.g. nats://127.0.0.1:4222.
    nats_url: str | None = None
    # "auto": Kafka when kafka_bootstrap is set, else Redis Streams. NATS only
    # when asked for by name.
    bus: Literal["auto", "kafka", "nats", "redis"] = "auto"
    bus_topic: str = "inbox.events"
    # Largest record the relay hands to the bus; a bigger event is dead-lettered
    # at once (it could never be published). Above the 1 MiB body limit because
    # an event wraps the request's content.
    bus_max_record_bytes: int = 2 * 1024 * 1024
    db_pool_min: int = 2
    db_pool_max: int = 20

    # "dev" allows what a real deployment must not have (the default JWT secret).
    env: str = "production"

    # --- HTTP ---------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 1024 * 1024
    # A console form may send up to this much: past max_body_bytes it is refused
    # by the form's handler, which shows the limit next to the form and keeps
    # the typed text (a page answered by the middleware would lose it).
    console_form_max_bytes: int = 4 * 1024 * 1024
    registration_enabled: bool = True
    admin_usernames: list[str] = Field(default_factory=list)

    # --- auth ---------------------------------------------------------------
    jwt_secret: str = DEFAULT_JWT_SECRET
    jwt_issuer: str = "agent-mesh"
    owner_token_ttl_seconds: int = 3600
    agent_token_ttl_seconds: int = 3600

    # --- delivery -----------------------------------------------------------
    relay_batch_size: int = 500
    relay_sweep_seconds: float = 1.0
    relay_wakeup: bool = True
    # While commits arrive closer together than this (the gap between the last
    # two wake-ups), wait this long after a wake-up before claiming, so one batch
    # carries the next commit too instead of a claim, publish and mark each.
    # Commits further apart never wait (ADR 029). 0 disables. Open streams get their
    # events from the commits' notices, not from the relay (ADR 065): the linger
    # delays only what rides the bus path, and half the e2e p99 target leaves that
    # path room (ADR 066).
    relay_linger_ms: float = 25.0
    relay_retry_base_seconds: float = 5.0
    relay_max_attempts: int = 10
    push_stream_maxlen: int = 10_000
    push_group: str = "mesh-push"
    sse_keepalive_seconds: float = 15.0
    # An idle SSE connection re-checks Postgres this often, so an event whose
    # Redis copy was lost (Redis restart) still arrives without a newer one.
    sse_recheck_seconds: float = 30.0
    # Open streams re-validate their credentials this often even without a
    # revocation notice (which makes them re-check at once).
    sse_auth_recheck_seconds: float = 300.0
    longpoll_max_wait_seconds: float = 30.0
    # A parked long-poll re-reads Postgres this often even without a notice (a lost
    # notice delays an answer by at most this, it never loses it).
    longpoll_recheck_seconds: float = 5.0
    inbox_page_max: int = 500
    # A runtime's claim on the event it handles lapses this long after its last
    # renewal (the runtime renews it with each heartbeat); after that a remote MCP
    # client of the agent may take the event (ADR 050).
    inbox_claim_seconds: float = Field(default=120.0, gt=0.0, le=3600.0)
    # A2A SendMessage waits this long for the task to settle (terminal,
    # input-required, auth-required) unless the caller asks returnImmediately;
    # 0 answers at once (ADR 036).
    a2a_blocking_seconds: float = Field(default=30.0, ge=0.0, le=600.0)

    # --- operations ---------------------------------------------------------
    heartbeat_ttl_seconds: int = 90
    task_timeout_seconds: int = 24 * 3600
    outbox_retention_days: int = 7
    outbox_retention_batch: int = 5000
    ratelimit_rate: float = 50.0
    ratelimit_burst: int = 100
    # Per-route overrides: {"POST /v1/mesh/tasks": [rate, burst], ...}
    ratelimit_routes: dict[str, tuple[float, int]] = Field(default_factory=dict)
    ratelimit_enabled: bool = True
    sentry_dsn: str | None = None
    sentry_environment: str = "development"
    metrics_port: int | None = None
    # When set, web's GET /metrics answers only "Authorization: Bearer <token>"
    # (401 otherwise); unset, it is open, for a listener only the scraper reaches.
    metrics_token: str | None = None
    # Per-agent metric labels (agent_mesh_consumer_lag{agent_id}): agent ids name
    # their owners, so they are off unless the scraper's readers may see them.
    metrics_agent_labels: bool = False
    log_level: str = "INFO"
    # The owner console's server-side session (app/web/session.py), idle lifetime.
    console_session_ttl_seconds: int = 8 * 3600
    # Outgoing friend requests an agent may have pending at once: the
    # directory must not become a way to spam every listed agent.
    friend_requests_pending_max: int = 20
    # Retention (cron/retention.py): terminal tasks and acked inbox events older than
    # this many days are deleted; 0 keeps everything forever.
    retention_days: int = 0
    retention_batch: int = 1000
    # Where deleted rows are archived first (gzip JSON lines); unset: not archived.
    retention_archive_dir: str | None = None

    # --- hardening -----------------------------------------------
    # Register/login/API-key exchange buckets per client address and account
    # (app.services.auth_throttle); overrides by name: {"login": [rate_per_s, burst], ...}.
    auth_throttle_enabled: bool = True
    auth_limits: dict[str, tuple[float, int]] = Field(default_factory=dict)
    # argon2 hashes at once per web process, and how many may wait for one.
    kdf_concurrency: int = 1
    kdf_queue: int = 64
    # Open SSE streams per agent per web process; past it 429 (0: no cap).
    sse_max_streams_per_agent: int = 32
    # Open console live-feed streams per owner per web process; past it 429 (0: no
    # cap). Each holds a reader per agent of the owner (ADR 032).
    console_feed_max_streams_per_owner: int = 32

    # --- web path caches (ADR 020) -------------------------------------
    # Per web process: tokens → principals and (sender, recipient) → relationship,
    # dropped at once by the notices the InboxHub hears; the TTL is only a safety
    # net for a notice lost while Redis was unreachable (each entry lives between half
    # of it and all of it, so entries loaded together do not expire together).
    # 0 entries or 0 s: no cache.
    web_cache_max_entries: int = 10_000
    web_cache_ttl_seconds: float = 60.0

    # --- delivery receipts (ADR 021) -----------------------
    # Hand-overs to a client are marked `delivered` in one UPDATE per web process
    # every MESH_RECEIPT_FLUSH_MS, or sooner once MESH_RECEIPT_FLUSH_MAX are queued.
    receipt_flush_ms: int = 50
    receipt_flush_max: int = 500

    # --- task creates (ADR 028) ------------------------------------
    # Creates meeting on one web process share one statement: up to
    # MESH_CREATE_BATCH_MAX per statement, MESH_CREATE_BATCH_IN_FLIGHT statements
    # at once (a create that finds a slot free is written at once). One slot makes
    # the largest batches: the most sends per CPU-ms, measured on 2 cores.
    create_batch_max: int = Field(default=64, ge=1)
    create_batch_in_flight: int = Field(default=1, ge=1)

    # --- the web process's garbage collector (ADR 026) ------
    # MESH_WEB_GC_THRESHOLD: gc.set_threshold of the web process, a JSON list.
    # Every pass walks the objects of every open stream; with Python's own
    # [700, 10, 10] 10,000 open streams meant full passes of up to 1 s and a young
    # pass of ~0.2 s at the first request after an idle spell.
    web_gc_threshold: tuple[int, int, int] = (10_000, 5, 100)

    # --- webhook delivery (ADR 035) -------------------------------------------
    # Private, loopback, link-local and metadata targets are refused at
    # registration and at connect time unless this is set (local development, tests).
    webhook_allow_private: bool = False
    # A delivery is acked by a 2xx within this many seconds, else retried.
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    # Retries of one event: base·2^n seconds up to the cap, with jitter.
    webhook_retry_base_seconds: float = Field(default=0.5, gt=0)
    webhook_retry_cap_seconds: float = Field(default=30.0, gt=0)
    # Failures in a row that open an agent's breaker; the first cool-down before
    # its half-open probe, doubled after each failed probe up to the cap.
    webhook_breaker_failures: int = Field(default=5, ge=1)
    webhook_cooldown_seconds: float = Field(default=30.0, gt=0)
    webhook_cooldown_max_seconds: float = Field(default=900.0, gt=0)
    # After a PUT rotates the secret, the old one still signs for this long.
    webhook_secret_grace_seconds: float = Field(default=24 * 3600, ge=0)
    # The key that seals signing secrets in Postgres; unset: derived from jwt_secret.
    webhook_secret_key: str | None = None
    webhook_sweep_seconds: float = Field(default=5.0, gt=0)
    # POSTs in flight at once per webhook process (each agent has at most one).
    webhook_concurrency: int = Field(default=64, ge=1)

    # --- remote MCP (/mcp, ADR 040) -------------------------------------------
    # Browser origins besides the gateway's own that may call /mcp (a hosted
    # client's web page); any other Origin header is refused with 403. JSON list.
    mcp_allowed_origins: list[str] = Field(default_factory=list)
    # A client's calls count as its agent's heartbeat, at most once this often per
    # web process (a heartbeat is a write).
    mcp_heartbeat_interval_seconds: float = Field(default=30.0, ge=0)
    # OAuth 2.1 for /mcp clients: codes, access tokens and (rotating) refresh tokens.
    oauth_code_ttl_seconds: int = Field(default=300, ge=10)
    oauth_access_token_ttl_seconds: int = Field(default=3600, ge=60)
    oauth_refresh_token_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    # Client ids that are metadata-document URLs are fetched like webhook targets:
    # private and loopback hosts (and plain http) only when this is set (tests, dev).
    oauth_client_fetch_allow_private: bool = False
    # How long a process's claim on an agent's delivery lasts without renewal.
    webhook_lease_seconds: float = Field(default=120.0, gt=0)
    webhook_response_max_bytes: int = Field(default=4096, ge=0)
    # A caught-up lane waits this long for the next event before it gives its
    # lease and connection up (0: give them up at once).
    webhook_linger_seconds: float = Field(default=2.0, ge=0)

    # --- publications (agents published as templates, ADR 043) ----------------
    # Limits on what a publication carries. The request schema (app.domain.schemas) has
    # the same numbers as ceilings, so these may be lowered, never raised.
    publication_title_max: int = Field(default=120, ge=1, le=PUBLICATION_TITLE_CEILING)
    publication_summary_max: int = Field(default=2000, ge=1, le=PUBLICATION_SUMMARY_CEILING)
    publication_tags_max: int = Field(default=10, ge=0, le=PUBLICATION_TAGS_CEILING)
    publication_tag_max: int = Field(default=32, ge=1, le=PUBLICATION_TAG_CEILING)
    # Publications one owner may have at once: listings are shared by every owner.
    publications_per_owner_max: int = Field(default=50, ge=0)

    # --- the outbound A2A bridge (ADR 041) --------------------------------------
    # Card URLs and the card's endpoints follow the webhook target rule
    # (MESH_WEBHOOK_ALLOW_PRIVATE); headers are sealed under MESH_WEBHOOK_SECRET_KEY.
    # Retries of a remote that cannot be reached: base·2^n seconds up to the cap.
    a2a_bridge_retry_base_seconds: float = Field(default=0.5, gt=0)
    a2a_bridge_retry_cap_seconds: float = Field(default=60.0, gt=0)
    # GetTask polls of a task that has not settled (a remote without streaming,
    # a stream that broke, a restart): base·2^n seconds up to the cap.
    a2a_bridge_poll_base_seconds: float = Field(default=0.5, gt=0)
    a2a_bridge_poll_cap_seconds: float = Field(default=15.0, gt=0)
    # A card older than this is re-validated (If-None-Match with its ETag).
    a2a_bridge_card_max_age_seconds: float = Field(default=300.0, ge=0)
    a2a_bridge_sweep_seconds: float = Field(default=5.0, gt=0)
    # How long a bridge process's claim on an agent lasts without renewal.
    a2a_bridge_lease_seconds: float = Field(default=30.0, gt=0)

    @property
    def bus_kind(self) -> Literal["kafka", "nats", "redis"]:
        if self.bus == "auto":
            return "kafka" if self.kafka_bootstrap else "redis"
        return self.bus


def refusals(settings: Settings) -> list[str]:
    """Why a gateway must not start with these settings, each naming its setting."""
    if settings.jwt_secret == DEFAULT_JWT_SECRET and settings.env != "dev":
        return ["MESH_JWT_SECRET is the default written in the source code, so anyone could "
                "sign owner and agent tokens with it: set MESH_JWT_SECRET to a long random "
                "value (python -c 'import secrets; print(secrets.token_urlsafe(48))'), the same "
                "in every web process, or set MESH_ENV=dev for local development"]
    return []


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]
