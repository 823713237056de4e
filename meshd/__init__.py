"""meshd: the agent side of Agent Mesh — SDK, CLI, daemon and MCP tools.

>>> from meshd import MeshClient
>>> async with MeshClient("http://127.0.0.1:8080", api_key="mk_...") as mesh:
...     task = await mesh.send("coder@bob", "please review PR 12")
"""

from meshd.client import MeshClient
from meshd.errors import (
    AuthError,
    ConflictError,
    ForbiddenError,
    MeshConnectionError,
    MeshError,
    MeshHTTPError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    ServerError,
    ValidationError,
)
from meshd.models import InboxEvent, InboxPage, Task, TokenInfo

__version__ = "0.1.0"

__all__ = [
    "AuthError",
    "ConflictError",
    "ForbiddenError",
    "InboxEvent",
    "InboxPage",
    "MeshClient",
    "MeshConnectionError",
    "MeshError",
    "MeshHTTPError",
    "NotFoundError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "ServerError",
    "Task",
    "TokenInfo",
    "ValidationError",
    "__version__",
]
