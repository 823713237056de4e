"""``mesh agent``: an LLM behind the daemon — one Claude Agent SDK run per inbox event.

The daemon (:mod:`meshd.daemon.service`) keeps delivering events in order and once; this
package is the handler it runs for each of them. Nothing here imports
``claude_agent_sdk`` at module level except :mod:`meshd.agent.runner`, so the plain
daemon never loads it (install it with ``pip install './meshd[claude]'`` from a checkout).
"""
