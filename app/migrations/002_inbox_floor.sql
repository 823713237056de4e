-- An agent_id may be reused after its agent was deleted (same owner, same name).
-- The new agent's inbox starts above everything its predecessor received:
-- reads never return a seq at or below this floor, whatever `after` says.
ALTER TABLE agents ADD COLUMN inbox_floor bigint NOT NULL DEFAULT 0;
