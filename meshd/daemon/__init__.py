"""The daemon: one handler run per inbox event, in order and once; its loop,
handlers, retries, state folder and run reports."""
