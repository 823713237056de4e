-- Teams: broadcasts with a wait policy, the directory, and the
-- state-change history a context timeline reads. See ADR 016.

-- A broadcast: one task per recipient in one shared context. ``outcome`` is NULL
-- while open; the transaction that sets it also writes the sender's single
-- broadcast.completed event (a row lock on this row decides who does).
CREATE TABLE broadcasts (
    broadcast_id  text PRIMARY KEY,
    sender        text NOT NULL,
    context_id    text NOT NULL,
    group_id      text,
    policy        text NOT NULL CHECK (policy IN ('all', 'any', 'n')),
    n             integer NOT NULL CHECK (n >= 1),
    deadline      timestamptz NOT NULL,
    outcome       text CHECK (outcome IN ('met', 'unmet', 'timeout')),
    completed_at  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX broadcasts_open_deadline_idx ON broadcasts (deadline) WHERE outcome IS NULL;
CREATE INDEX broadcasts_context_idx ON broadcasts (context_id);
CREATE INDEX broadcasts_sender_idx ON broadcasts (sender, created_at DESC);

CREATE TABLE broadcast_tasks (
    broadcast_id  text NOT NULL REFERENCES broadcasts(broadcast_id) ON DELETE CASCADE,
    task_id       text NOT NULL UNIQUE,
    recipient     text NOT NULL,
    PRIMARY KEY (broadcast_id, recipient)
);

-- Every state change of a task, for timelines (tasks keep only the current state).
CREATE TABLE task_state_changes (
    id             bigserial PRIMARY KEY,
    task_id        text NOT NULL REFERENCES tasks(task_id) ON DELETE CASCADE,
    context_id     text NOT NULL,
    from_state     text NOT NULL,
    to_state       text NOT NULL,
    set_by         text,
    status_message jsonb,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX task_state_changes_task_idx ON task_state_changes (task_id, id);
CREATE INDEX task_state_changes_context_idx ON task_state_changes (context_id, created_at);
CREATE INDEX task_messages_context_idx ON task_messages (context_id, created_at);

-- The directory: opt-in per agent, searched by full text over name, display
-- name, description and skills (the 'simple' config: agent names are not English).
ALTER TABLE agents ADD COLUMN listed boolean NOT NULL DEFAULT false;
ALTER TABLE agents ADD COLUMN search_doc tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('simple', coalesce(name, '') || ' ' || coalesce(display_name, '')), 'A')
    || setweight(to_tsvector('simple', coalesce(skills::text, '')), 'B')
    || setweight(to_tsvector('simple', coalesce(description, '')), 'C')
) STORED;
CREATE INDEX agents_directory_idx ON agents USING gin (search_doc) WHERE listed;
CREATE INDEX agents_skills_idx ON agents USING gin (skills jsonb_path_ops) WHERE listed;
