"""docs/a2a.md's "Bring your A2A agent into the mesh" example, run verbatim
against a real gateway, the a2a-bridge worker and a real A2A server."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from tests.support.a2a_remote import Remote
from tests.test_a2a_bridge import bridged_mesh

DOC = Path(__file__).resolve().parents[1] / "docs" / "a2a.md"


def example() -> str:
    text = DOC.read_text()
    start = text.index("<!-- a2a-bridge-example:start -->")
    end = text.index("<!-- a2a-bridge-example:end -->")
    [code] = re.findall(r"```python\n(.*?)```", text[start:end], re.S)
    return code


async def test_the_bridge_doc_example_runs(migrated) -> None:
    async with bridged_mesh(migrated) as b, Remote(api_key="remote-key") as remote:
        caller = await b.owner.agent("caller")
        env = {**os.environ, "MESH_URL": str(b.mesh.http.base_url).rstrip("/"),
               "MESH_OWNER_TOKEN": b.owner.token, "MESH_API_KEY": caller.api_key,
               "CARD_URL": remote.card_url, "REMOTE_API_KEY": "remote-key"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", example(), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            async with asyncio.timeout(90):
                out, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, err.decode()
        assert out.decode().splitlines() == [
            f"agent: helper@{b.owner.username} a2a ['X-Api-Key']",
            "state: completed",
            "reply: you said: hello from the mesh"]
        assert len(remote.received) == 1 and remote.unauthorized == 0
