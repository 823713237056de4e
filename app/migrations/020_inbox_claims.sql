-- A runtime's claim on the event it is handling (ADR 050): `mesh daemon` and
-- `mesh agent` claim each event before their handler runs, so a remote MCP
-- client of the same agent (which takes events after the acked cursor) never
-- takes the one in flight, and the runtime skips an event a client took first.
-- claim_owner is the runtime's consumer id, claim_seq the event it holds,
-- claim_until when the claim lapses unless renewed.
ALTER TABLE agents ADD COLUMN IF NOT EXISTS claim_owner text;
ALTER TABLE agents ADD COLUMN IF NOT EXISTS claim_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN IF NOT EXISTS claim_until timestamptz;
