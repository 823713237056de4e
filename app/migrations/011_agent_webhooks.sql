-- Webhook delivery of an agent's inbox (ADR 035). One row per agent that takes
-- its inbox by webhook; the events themselves stay in inbox_events and the cursor
-- in agents.acked_seq, so deleting the row loses nothing.
CREATE TABLE agent_webhooks (
    agent_id              text PRIMARY KEY REFERENCES agents(agent_id) ON DELETE CASCADE,
    url                   text NOT NULL,
    -- Sealed (app.webhook_signing): the worker must sign with it, so it is
    -- encrypted under the operator's key rather than hashed.
    secret                text NOT NULL,
    previous_secret       text,
    previous_secret_until timestamptz,
    failures              integer NOT NULL DEFAULT 0,
    breaker               text NOT NULL DEFAULT 'closed' CHECK (breaker IN ('closed', 'open')),
    -- Times the breaker opened in a row (the cool-down doubles with each).
    opens                 integer NOT NULL DEFAULT 0,
    next_attempt_at       timestamptz NOT NULL DEFAULT now(),
    last_error            text,
    last_success_at       timestamptz,
    last_failure_at       timestamptz,
    -- The webhook process delivering this agent now, and until when.
    lease_owner           text,
    lease_until           timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);
