"""docs/a2a.md's example, run verbatim with the official client against the real
gateway while the called agent answers through the mesh API."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from tests.support.meshapi import MeshFactory

DOC = Path(__file__).resolve().parents[1] / "docs" / "a2a.md"


def example() -> str:
    text = DOC.read_text()
    start, end = text.index("<!-- a2a-example:start -->"), text.index("<!-- a2a-example:end -->")
    [code] = re.findall(r"```python\n(.*?)```", text[start:end], re.S)
    return code


async def test_the_a2a_doc_example_runs(gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    env = {**os.environ, "MESH_URL": gateway, "MESH_API_KEY": a.api_key, "MESH_TO": b.agent_id}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", example(), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(90):
            first = (await proc.stdout.readline()).decode()
            match = re.fullmatch(r"task: (\S+) TASK_STATE_SUBMITTED\n", first)
            assert match, first + (await proc.stderr.read()).decode()  # type: ignore[union-attr]
            task_id = match.group(1)
            for path, body in ((f"/v1/mesh/tasks/{task_id}/status", {"state": "working"}),
                               (f"/v1/mesh/tasks/{task_id}/messages",
                                {"parts": [{"kind": "text", "text": "looks good, one nit"}]}),
                               (f"/v1/mesh/tasks/{task_id}/status", {"state": "completed"})):
                r = await b.post(path, body)
                assert r.status_code in (200, 201), r.text
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert [re.sub(r"^seq \d+: ", "", line) for line in lines] == [
        "TASK_STATE_WORKING ", "TASK_STATE_WORKING looks good, one nit", "TASK_STATE_COMPLETED "]
    seqs = [int(re.match(r"seq (\d+):", line).group(1)) for line in lines]  # type: ignore[union-attr]
    assert seqs == sorted(set(seqs))
