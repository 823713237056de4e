-- The rows of a task create, from the statement's arrays (ADR 051). The same as
-- unnest(...) WITH ORDINALITY, but the planner counts it as ONE row: with unnest
-- of a parameter it guessed more, its generic plan hash-joined and seq-scanned, so
-- the plan cache re-planned the create on every call (half the statement's time).
-- Counted as one row, the generic plan probes indexes like the per-call plans and
-- is kept after five calls. The SET clause keeps it from being inlined, which
-- would bring back unnest's estimate.
CREATE OR REPLACE FUNCTION task_create_rows(
    task_ids text[], context_ids text[], initiators text[], serving_agents text[],
    message_ids text[], parts text[], metadata jsonb[], content_hashes text[],
    created_ats timestamptz[], event_ids text[], types text[], payloads jsonb[],
    traceparents text[])
RETURNS TABLE (task_id text, context_id text, initiator text, serving_agent text,
               message_id text, parts text, metadata jsonb, content_hash text,
               created_at timestamptz, event_id text, type text, payload jsonb,
               traceparent text, ord bigint)
LANGUAGE sql STABLE ROWS 1 SET search_path FROM CURRENT
AS $$
    SELECT * FROM unnest(task_ids, context_ids, initiators, serving_agents, message_ids,
                         parts, metadata, content_hashes, created_ats, event_ids, types,
                         payloads, traceparents) WITH ORDINALITY
$$;
