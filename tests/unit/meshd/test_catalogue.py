"""Both servers of the mesh tools offer exactly the catalogue: a tool without a
handler would silently drop out of the listing, a handler without a spec would be
unreachable."""

from meshd.catalogue import SPECS
from meshd.mcp.server import handlers


async def _never() -> object:
    raise AssertionError("no call is made while the handlers are only listed")


def test_stdio_server_handles_every_catalogue_tool() -> None:
    assert set(handlers(_never)) == set(SPECS)  # type: ignore[arg-type]


def test_gateway_endpoint_handles_every_catalogue_tool() -> None:
    from app.mcp.tools import HANDLERS

    assert set(HANDLERS) == set(SPECS)
