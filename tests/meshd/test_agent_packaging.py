"""``mesh agent`` ships as an optional extra: the plain daemon never loads the SDK."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib

import pytest

from tests.meshd.support import REPO

AGENT = REPO / "meshd" / "agent"
SDK_MODULES = {"runner.py", "tools.py"}  # the only ones that may import claude_agent_sdk


def test_the_extra_is_pinned_alike_in_both_distributions():
    meshd = tomllib.loads((REPO / "meshd" / "pyproject.toml").read_text())
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    pin = meshd["project"]["optional-dependencies"]["claude"]
    assert len(pin) == 1 and pin[0].startswith("claude-agent-sdk==")
    assert root["project"]["optional-dependencies"]["claude"] == pin
    assert {"meshd.cli", "meshd.agent"} <= set(meshd["tool"]["setuptools"]["packages"])
    if os.environ.get("CI") != "true":
        pytest.importorskip("claude_agent_sdk")
    from claude_agent_sdk import __version__

    assert pin[0] == f"claude-agent-sdk=={__version__}"  # the tests ran against the pinned version


def test_only_the_runner_and_its_tools_import_the_sdk():
    for path in sorted(AGENT.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n.split(".")[0] == "claude_agent_sdk" for n in names):
                assert path.name in SDK_MODULES, f"{path.name} imports the SDK"


def test_the_plain_cli_and_daemon_do_not_load_the_sdk():
    code = (
        "import sys, meshd.cli, meshd.cli.run, meshd.daemon.service, meshd.daemon.handlers\n"
        "import meshd.agent.settings\n"
        "meshd.cli.build_parser().parse_args(['agent', '--max-turns', '3'])\n"
        "assert 'claude_agent_sdk' not in sys.modules, 'the SDK was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


def test_help_lists_the_limits_and_the_workspace():
    out = subprocess.run(
        [sys.executable, "-m", "meshd.cli", "agent", "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    for flag in ("--max-turns", "--max-budget-usd", "--timeout", "--workspace", "--no-auto-reply",
                 "--run-on", "--allow-tool", "--url", "--api-key", "--state-dir"):  # fmt: skip
        assert flag in out, flag
