"""`mesh mcp`: the catalogue's mesh tools served to an LLM over MCP (stdio)."""
