-- Who made the task's last state change: the agent whose POST …/status set it,
-- NULL for the initial 'submitted' and for system moves (the activity timeout).
-- A repeat of the same change by the same agent is then answered as a replay
-- (200, nothing written) instead of a 409 (docs/decisions/012-unit-of-work-and-replay.md).
ALTER TABLE tasks ADD COLUMN state_set_by text;
