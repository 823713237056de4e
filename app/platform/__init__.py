"""What every process shares: settings, Postgres, metrics, logging, tracing, retries."""
