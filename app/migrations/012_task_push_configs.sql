-- A2A push notifications (ADR 039): a task's updates POSTed to a URL its
-- registering agent chose. One row per (agent, task, config id); the events stay
-- in inbox_events (the agent's own inbox, filtered to the task) and the row's
-- last_seq is the config's own cursor in it, so the agent's acked cursor, which
-- belongs to its own consumer, is never touched. Delivery state (failures, the
-- breaker, the lease) is the same as agent_webhooks' (ADR 035).
CREATE TABLE task_push_configs (
    push_id          bigserial PRIMARY KEY,
    agent_id         text NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    task_id          text NOT NULL REFERENCES tasks(task_id) ON DELETE CASCADE,
    config_id        text NOT NULL,
    url              text NOT NULL,
    -- Sealed (app.webhook_signing.Sealer): sent as given, so encrypted, not hashed.
    token            text,
    auth_scheme      text,
    auth_credentials text,
    last_seq         bigint NOT NULL DEFAULT 0,
    failures         integer NOT NULL DEFAULT 0,
    breaker          text NOT NULL DEFAULT 'closed' CHECK (breaker IN ('closed', 'open')),
    opens            integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    last_success_at  timestamptz,
    last_failure_at  timestamptz,
    lease_owner      text,
    lease_until      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (agent_id, task_id, config_id)
);
CREATE INDEX task_push_configs_task_idx ON task_push_configs (task_id);
