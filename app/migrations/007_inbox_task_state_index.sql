-- The owner console's task page shows a task's state history, read from the
-- state-change events its participants received (task.created, task.status,
-- task.timeout). A partial index keeps that read off a full scan of a busy
-- agent's inbox while costing nothing for the far more common message events.
CREATE INDEX IF NOT EXISTS inbox_events_task_state_idx ON inbox_events (task_id, created_at)
    WHERE type IN ('task.created', 'task.status', 'task.timeout');
