"""What the HTTP edges (api, console, a2a, mcp) share: errors, auth throttles, middleware, streams."""
