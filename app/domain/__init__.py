"""Domain rules as plain functions, shared by the HTTP layer, workers and cron."""
