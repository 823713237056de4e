"""The owner console at ``/console``: server-rendered pages over the owner services."""
