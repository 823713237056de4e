"""``meshd`` installs on its own: its distribution declares only httpx, httpx-sse, mcp,
pydantic (its models; mcp brings it anyway) and keyring (``mesh login --keyring``), and no
module imports anything else outside the standard library — in particular not the gateway's
``app``. The one exception is
``meshd/agent`` (``mesh agent``), which may import its optional ``claude`` extra
(``tests/meshd/test_agent_packaging.py`` narrows that to the runner and its tools)."""

from __future__ import annotations

import ast
import sys
import tomllib

from tests.meshd.support import REPO

MESHD = REPO / "meshd"
ALLOWED = {"meshd", "httpx", "httpx_sse", "jsonschema", "mcp", "pydantic", "keyring"}
# Optional extras: the sub-package that may import each (meshd/pyproject.toml's optional-dependencies).
EXTRAS = {"claude_agent_sdk": MESHD / "agent", "opentelemetry": MESHD / "tracing.py"}


def test_distribution_metadata():
    meta = tomllib.loads((MESHD / "pyproject.toml").read_text())
    deps = {d.split(">")[0].split("<")[0].split("=")[0] for d in meta["project"]["dependencies"]}
    assert deps == {"httpx", "httpx-sse", "jsonschema", "mcp", "pydantic", "keyring"}
    assert meta["project"]["scripts"] == {"mesh": "meshd.cli:main"}
    assert meta["tool"]["setuptools"]["package-dir"] == {"meshd": "."}
    # every folder with modules is a package the distribution ships
    folders = {p.parent for p in MESHD.rglob("*.py")}
    shipped = {".".join(("meshd", *f.relative_to(MESHD).parts)) for f in folders}
    assert set(meta["tool"]["setuptools"]["packages"]) == shipped


def test_modules_import_only_the_stdlib_and_declared_dependencies():
    for path in sorted(MESHD.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in EXTRAS and path.is_relative_to(EXTRAS[top]):
                    continue
                assert top in sys.stdlib_module_names or top in ALLOWED, f"{path.name}: {name}"
