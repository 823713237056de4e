-- Agent Mesh schema, version 1.

CREATE TABLE users (
    user_id      bigserial PRIMARY KEY,
    username     text NOT NULL UNIQUE,
    password_hash text NOT NULL,
    is_admin     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agents (
    agent_id          text PRIMARY KEY,
    owner_id          bigint NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    name              text NOT NULL,
    display_name      text NOT NULL DEFAULT '',
    description       text NOT NULL DEFAULT '',
    skills            jsonb NOT NULL DEFAULT '[]'::jsonb,
    kind              text NOT NULL DEFAULT 'normal' CHECK (kind IN ('normal', 'virtual-user')),
    status            text NOT NULL DEFAULT 'inactive' CHECK (status IN ('active', 'inactive', 'draining')),
    last_heartbeat_at timestamptz,
    inbox_seq         bigint NOT NULL DEFAULT 0,
    acked_seq         bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agents_owner_idx ON agents (owner_id);
CREATE INDEX agents_active_heartbeat_idx ON agents (last_heartbeat_at) WHERE status = 'active';

CREATE TABLE api_keys (
    key_id       text PRIMARY KEY,
    agent_id     text NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    key_hash     text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz
);
CREATE INDEX api_keys_agent_idx ON api_keys (agent_id);

-- One row per unordered pair; agent_a < agent_b keeps the pair unique.
CREATE TABLE friendships (
    request_id   text NOT NULL UNIQUE,
    agent_a      text NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    agent_b      text NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    requester    text NOT NULL,
    note         text NOT NULL DEFAULT '',
    status       text NOT NULL CHECK (status IN ('pending', 'accepted')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    accepted_at  timestamptz,
    PRIMARY KEY (agent_a, agent_b),
    CHECK (agent_a < agent_b)
);
CREATE INDEX friendships_b_idx ON friendships (agent_b);

CREATE TABLE groups (
    group_id    text PRIMARY KEY,
    name        text NOT NULL,
    owner_id    bigint NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE group_members (
    group_id   text NOT NULL REFERENCES groups(group_id) ON DELETE CASCADE,
    agent_id   text NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    role       text NOT NULL DEFAULT 'member' CHECK (role IN ('owner', 'admin', 'member')),
    joined_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, agent_id)
);
CREATE INDEX group_members_agent_idx ON group_members (agent_id);

-- Participants are kept even if an agent is deleted later (history stays readable).
CREATE TABLE tasks (
    task_id        text PRIMARY KEY,
    context_id     text NOT NULL,
    initiator      text NOT NULL,
    serving_agent  text NOT NULL,
    state          text NOT NULL CHECK (state IN ('submitted', 'working', 'input-required',
                       'auth-required', 'completed', 'failed', 'canceled', 'rejected')),
    status_message jsonb,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tasks_initiator_idx ON tasks (initiator, created_at DESC, task_id DESC);
CREATE INDEX tasks_serving_idx ON tasks (serving_agent, created_at DESC, task_id DESC);
CREATE INDEX tasks_context_idx ON tasks (context_id);
CREATE INDEX tasks_open_updated_idx ON tasks (updated_at)
    WHERE state IN ('submitted', 'working', 'input-required', 'auth-required');

CREATE TABLE task_messages (
    message_id    text PRIMARY KEY,
    task_id       text NOT NULL REFERENCES tasks(task_id) ON DELETE CASCADE,
    context_id    text NOT NULL,
    sender        text NOT NULL,
    recipient     text NOT NULL,
    role          text NOT NULL CHECK (role IN ('user', 'agent')),
    parts         jsonb NOT NULL,
    metadata      jsonb,
    content_hash  text NOT NULL,
    -- the recipient's inbox seq for this message, for receipts
    inbox_seq     bigint,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_messages_task_idx ON task_messages (task_id, created_at);

CREATE TABLE task_artifacts (
    task_id      text NOT NULL REFERENCES tasks(task_id) ON DELETE CASCADE,
    artifact_id  text NOT NULL,
    name         text,
    description  text,
    parts        jsonb NOT NULL,
    metadata     jsonb,
    content_hash text NOT NULL,
    created_by   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, artifact_id)
);

CREATE TABLE inbox_events (
    agent_id      text NOT NULL,
    seq           bigint NOT NULL,
    event_id      text NOT NULL UNIQUE,
    type          text NOT NULL,
    task_id       text,
    context_id    text,
    from_agent_id text,
    payload       jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    delivered_at  timestamptz,
    PRIMARY KEY (agent_id, seq)
);

CREATE TABLE outbox_events (
    id              bigserial PRIMARY KEY,
    topic           text NOT NULL,
    key             text NOT NULL,
    payload         jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz
);
-- The relay's claim query walks only due pending rows.
CREATE INDEX outbox_pending_idx ON outbox_events (id) WHERE status = 'pending';
CREATE INDEX outbox_sent_idx ON outbox_events (sent_at) WHERE status = 'sent';
CREATE INDEX outbox_failed_idx ON outbox_events (id) WHERE status = 'failed';
