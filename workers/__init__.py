"""Background workers: the outbox relay, the push fan-out and the message bus they share."""
