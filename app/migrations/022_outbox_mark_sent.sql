-- The relay's sent mark, called in the simple query that commits its claim
-- ("SELECT outbox_mark_sent('{…}'); COMMIT": one round trip for both). The UPDATE
-- written out in that query text was parsed and planned anew for every batch;
-- PL/pgSQL keeps its statements' plans for the session, so here it is planned
-- like a prepared statement, and the query around it plans one function call.
CREATE OR REPLACE FUNCTION outbox_mark_sent(ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE outbox_events SET status = 'sent', sent_at = now(), last_error = NULL
    WHERE id = ANY(ids);
END
$$;
