"""docs/meshd.md cannot rot: its walk-through runs verbatim against the test gateway
(with a stand-in for the ``claude`` CLI), and its other examples are checked."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys

import pytest

from tests.meshd.support import REPO

DOC = REPO / "docs" / "meshd.md"
FAKE_CLAUDE = """#!/usr/bin/env python3
# A stand-in for `claude -p PROMPT` (the tests have no LLM).
import sys
prompt = sys.argv[-1]
print("Paris is the capital of France." if "France" in prompt else "I do not know.")
"""


def blocks(lang: str, text: str | None = None) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text or DOC.read_text(), re.S)


def walkthrough() -> str:
    text = DOC.read_text()
    start = text.index("<!-- meshd-walkthrough:start -->")
    end = text.index("<!-- meshd-walkthrough:end -->")
    (script,) = blocks("bash", text[start:end])
    return script


async def test_walkthrough_runs_verbatim(gateway, uniq, tmp_path):
    for tool in ("bash", "curl", "python3"):
        if shutil.which(tool) is None:
            pytest.fail(f"the meshd walk-through needs {tool} on PATH")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "claude").write_text(FAKE_CLAUDE)
    (fake_bin / "claude").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": os.pathsep.join([str(fake_bin), os.path.dirname(sys.executable), os.environ["PATH"]]),
        "HOME": str(tmp_path / "home"),
        "MESH_URL": gateway,
        "MESH_SUFFIX": uniq,
    }
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", "set -euo pipefail\n" + walkthrough(), cwd=str(work), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out_b, err_b = await asyncio.wait_for(proc.communicate(), 120)
    out, err = out_b.decode(), err_b.decode()
    assert proc.returncode == 0, f"walk-through failed:\n--- stdout\n{out}\n--- stderr\n{err}"

    helper, asker = f"helper@dana{uniq}", f"asker@dana{uniq}"
    assert f"Logged in as {helper}" in out
    # the inbox line announcing the reply, then the task with both messages
    assert re.search(rf"task\.message  from {re.escape(helper)} .*Paris is the capital", out)
    assert f"{asker}: What is the capital of France?" in out
    assert f"{helper}: Paris is the capital of France." in out
    assert "is now inactive" in err  # the daemon stopped cleanly on SIGTERM
    config = tmp_path / "home" / ".config" / "mesh" / "config.json"
    assert json.loads(config.read_text())["url"] == gateway
    assert (config.stat().st_mode & 0o777) == 0o600


def test_other_examples_are_valid():
    for code in blocks("python"):
        compile(code, "docs/meshd.md", "exec")
    (mcp_json,) = blocks("json")
    server = json.loads(mcp_json)["mcpServers"]["mesh"]
    assert (server["command"], server["args"]) == ("mesh", ["mcp"])

    from meshd.cli import build_parser

    parser = build_parser()
    for sh in blocks("sh"):
        for line in sh.splitlines():
            if line.startswith("mesh ") and not re.search(r"…|\[|--help", line):
                parser.parse_args(line.split("#")[0].split()[1:])


def test_daemon_defaults_in_the_docs_are_the_real_ones():
    """The numbers docs/meshd.md gives are DaemonOptions' (the CLI reads its defaults there)."""
    from meshd.cli import build_parser

    text = DOC.read_text()
    para = text[text.index("Options (seconds unless noted):") :]
    para = para[: para.index("\n\n")]
    defaults = vars(build_parser().parse_args(["daemon", "--exec", "x"]))
    found = re.findall(r"((?:`--[a-z-]+`/?)+)[^`(]*\(([\d/]+)\)", para)
    assert len(found) >= 8
    for flags, values in found:
        names = re.findall(r"--([a-z-]+)", flags)
        for name, value in zip(names, values.split("/"), strict=True):
            assert defaults[name.replace("-", "_")] == float(value), name
