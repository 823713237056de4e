-- Runs of the agents' runtimes, reported by them (ADR 046). One row per run:
-- reported when it starts (outcome 'running') and again when it ends; the end
-- report fills in the figures. Retained like tasks (cron retention).
CREATE TABLE agent_runs (
    agent_id     text        NOT NULL REFERENCES agents(agent_id) ON DELETE CASCADE,
    run_id       text        NOT NULL,
    event_id     text,
    task_id      text,
    context_id   text,
    outcome      text        NOT NULL,
    turns        integer     NOT NULL DEFAULT 0,
    cost_usd     numeric(14, 6) NOT NULL DEFAULT 0,
    duration_ms  bigint,
    model        text,
    limit_hit    text,
    error        text,
    started_at   timestamptz NOT NULL DEFAULT now(),
    ended_at     timestamptz,
    PRIMARY KEY (agent_id, run_id)
);
CREATE INDEX agent_runs_recent_idx ON agent_runs (agent_id, started_at DESC, run_id DESC);
CREATE INDEX agent_runs_task_idx ON agent_runs (task_id) WHERE task_id IS NOT NULL;
