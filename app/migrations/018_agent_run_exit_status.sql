-- The exit status of a `mesh daemon --exec` run (its command's); NULL for runs
-- that are not a command's, and for a command that could not be started.
ALTER TABLE agent_runs ADD COLUMN exit_status integer;
