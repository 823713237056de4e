"""A2A v1.0 for every mesh agent, on the official ``a2a-sdk``:
the SDK parses and answers JSON-RPC; the mesh's own task and inbox store
answers the questions (ADR 017)."""
