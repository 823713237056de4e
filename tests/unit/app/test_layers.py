"""The gateway's folders are its layers: each imports only from the layers below
it, no module imports itself back through others, and nothing lies loose beside
the packages but the ASGI entry point."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[3] / "app"

# Lower imports from nothing higher; equal ranks are separate layers that do not
# import each other (the edges: REST, console, A2A, MCP).
RANK = {
    "platform": 0,  # settings, Postgres, metrics, logging, tracing, retries, errors
    "domain": 1,  # rules and wire forms as plain code
    "responses": 2,  # the response shapes the services return
    "store": 3,  # SQL, one module per aggregate, and the unit of work
    "delivery": 4,  # protocol names, notice hub, the after-commit signal
    "services": 5,  # operations, one transaction each
    "web": 6,  # what the HTTP edges share: state, auth, inputs, endpoint, streams
    "api": 7, "console": 7, "a2a": 7, "mcp": 7,
    "main": 8,
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in APP.rglob("*.py"):
        parts = list(path.relative_to(APP.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            out.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {target for target in out if target.split(".")[0] == "app"}


def _graph() -> dict[str, set[str]]:
    modules = _modules()

    def resolve(target: str) -> str:
        while target not in modules and "." in target:
            target = target.rpartition(".")[0]
        return target if target in modules else ""

    return {name: {m for t in _imports(name, path) if (m := resolve(t)) and m != name}
            for name, path in modules.items()}


def _layer(module: str) -> str:
    return module.split(".")[1] if "." in module else "app"


def test_nothing_lies_loose_beside_the_layers() -> None:
    loose = sorted(p.name for p in APP.glob("*.py") if p.name not in {"__init__.py", "main.py"})
    assert loose == []
    packages = {p.name for p in APP.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(RANK), f"a package without a layer: {packages - set(RANK)}"


def test_no_layer_imports_upward_or_sideways() -> None:
    wrong = sorted(f"{a} -> {b}" for a, targets in _graph().items() for b in targets
                   if _layer(a) != _layer(b) and RANK[_layer(b)] >= RANK[_layer(a)])
    assert wrong == []


def test_no_import_cycles() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_graph_holds_the_real_imports() -> None:
    """The checks above read a graph built from the real imports, not an empty one."""
    graph = _graph()
    assert "app.store.events" in graph["app.store.writes"]
    assert any(_layer(b) == "platform" for b in graph["app.services.accounts"])
