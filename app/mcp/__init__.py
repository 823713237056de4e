"""The gateway as a remote MCP server: ``POST /mcp`` (Streamable HTTP), ADR 040."""
