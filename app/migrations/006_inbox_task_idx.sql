-- A2A streams read one task's events out of an agent's inbox (ADR 017):
-- WHERE agent_id = … AND task_id = … AND seq > … ORDER BY seq.
CREATE INDEX IF NOT EXISTS inbox_events_task_idx ON inbox_events (agent_id, task_id, seq);
