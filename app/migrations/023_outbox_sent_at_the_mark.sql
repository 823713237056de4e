-- The relay's own connection begins its next claim's transaction as it commits
-- the last one, so a transaction may be seconds old when its claim runs: the mark
-- dates the rows by its statement, not by the transaction's start (now()).
CREATE OR REPLACE FUNCTION outbox_mark_sent(ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE outbox_events SET status = 'sent', sent_at = statement_timestamp(), last_error = NULL
    WHERE id = ANY(ids);
END
$$;
