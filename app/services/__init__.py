"""Operations: one transaction each, combining domain rules and store calls.
Route handlers, workers and cron call these; none of them builds SQL."""
