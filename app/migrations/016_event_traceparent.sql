-- A message's trace (ADR 042): the W3C traceparent of the write that made the
-- event, carried with it to every reader. Nullable with no default: adding it
-- rewrites nothing, and an event written while tracing is off stores NULL.
ALTER TABLE inbox_events ADD COLUMN IF NOT EXISTS traceparent text;
