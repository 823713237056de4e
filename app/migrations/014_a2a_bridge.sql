-- The outbound A2A bridge (ADR 041): agents served by an A2A server elsewhere.
-- Such an agent is an ordinary agent of its owner with kind 'a2a'; its inbox is
-- read by the a2a-bridge process, whose cursor is the agent's acked_seq (as for
-- every reader), so deleting these rows loses no event.
ALTER TABLE agents DROP CONSTRAINT IF EXISTS agents_kind_check;
ALTER TABLE agents ADD CONSTRAINT agents_kind_check
    CHECK (kind IN ('normal', 'virtual-user', 'a2a'));

CREATE TABLE a2a_remotes (
    agent_id         text PRIMARY KEY REFERENCES agents(agent_id) ON DELETE CASCADE,
    card_url         text NOT NULL,
    -- Sealed JSON object of the headers sent with every call (the remote's API
    -- key): the bridge must send them, so they are encrypted, not hashed.
    headers          text,
    header_names     text[] NOT NULL DEFAULT '{}',
    card             jsonb NOT NULL,
    card_etag        text,
    card_fetched_at  timestamptz NOT NULL DEFAULT now(),
    failures         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    last_success_at  timestamptz,
    -- The bridge process forwarding this agent now, and until when.
    lease_owner      text,
    lease_until      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- A mesh task the bridge forwarded, and its task on the remote server.
CREATE TABLE a2a_remote_tasks (
    task_id           text PRIMARY KEY REFERENCES tasks(task_id) ON DELETE CASCADE,
    agent_id          text NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    remote_task_id    text,
    remote_context_id text,
    -- The remote's last state written back; NULL while a message sent to it
    -- awaits its answer. A task not settled is followed (GetTask) by the bridge
    -- holding the agent's lease.
    last_state        text,
    -- A mesh message being sent to the remote, set before the call and cleared
    -- when the remote accepted it (with the ack). Found set at a retry (a crash,
    -- a timeout), the remote is asked first whether it has that message, so a
    -- message it took is not sent twice.
    sending_message_id text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX a2a_remote_tasks_open_idx ON a2a_remote_tasks (agent_id)
    WHERE last_state IS NULL
       OR last_state NOT IN ('completed', 'failed', 'canceled', 'rejected',
                             'input-required', 'auth-required');
