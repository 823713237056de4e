"""Collaboration policies of ``mesh agent`` (ADR 013).

One module per policy. :mod:`.config` and :mod:`.complexity`, :mod:`.chitchat`
import no SDK (the CLI parser reads their defaults); :mod:`.guards` and
:mod:`.handshake` build SDK hooks and are imported by the runner only.
"""

from meshd.agent.policies.config import PolicyConfig

__all__ = ["PolicyConfig"]
