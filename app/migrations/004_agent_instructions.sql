-- An agent's instructions: its system prompt for `mesh agent` (≤ 8 KB, checked by
-- the API), set by its owner and read by the agent itself in GET /v1/mesh/me.
ALTER TABLE agents ADD COLUMN instructions text NOT NULL DEFAULT '';
