"""Agent Mesh gateway: HTTP functions and the domain the workers share."""
