"""Delivery between processes: protocol names, the notice hub, the after-commit signal."""
