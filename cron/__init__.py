"""Periodic maintenance: ``cron.jobs`` (what each job does) and ``cron.worker`` (the arq
process that runs them on a schedule; the Procfile ``cron`` line)."""
