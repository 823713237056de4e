-- An owner's optional daily budget per agent (ADR 047): `mesh agent` starts no
-- run once the UTC day's reported spend reaches it. NULL: no budget.
ALTER TABLE agents ADD COLUMN IF NOT EXISTS daily_budget_usd numeric(12, 4)
    CHECK (daily_budget_usd IS NULL OR daily_budget_usd >= 0);
