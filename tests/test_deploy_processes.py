"""The Terraform module runs every process of the Procfile: a process left out
(as webhook and a2a-bridge once were) means a deployment that silently never
delivers webhooks or bridges remote A2A agents."""

from __future__ import annotations

import re
from pathlib import Path

from devstack.procfile import RELEASE, read

ROOT = Path(__file__).resolve().parents[1]
TF = ROOT / "deploy" / "terraform"


def _procfile() -> dict[str, str]:
    procfile = read(ROOT / "Procfile")
    return {RELEASE: procfile.release, **dict(procfile.processes)}


def _block(text: str, opening: str) -> str:
    """The text between ``opening`` (ending in ``{``) and its closing brace."""
    start = text.index(opening) + len(opening)
    depth, i = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1]


def _keys(block: str) -> set[str]:
    return set(re.findall(r'(?m)^\s*"?([A-Za-z0-9_-]+)"?\s*=', block))


def test_the_module_has_a_command_for_every_procfile_process() -> None:
    main = (TF / "main.tf").read_text()
    commands = _block(main, "commands = {")
    names = set(re.findall(r'(?m)^    "?([A-Za-z0-9_-]+)"?\s*=\s*\[', commands))
    assert names == set(_procfile())
    for name, command in _procfile().items():
        if name == "web":
            continue  # web adds the load balancer's flags (test_forwarded_trust)
        module = re.search(rf'(?m)^    "?{re.escape(name)}"?\s*=\s*\[(.*?)\]', commands, re.S)
        assert module is not None
        assert re.findall(r'"([^"]+)"', module.group(1)) == command.split(), name


def test_every_long_running_process_has_a_default_size_and_is_validated() -> None:
    variables = (TF / "variables.tf").read_text()
    processes = _block(variables, 'variable "processes" {')
    defaults = _keys(_block(processes, "default = {"))
    assert defaults == set(_procfile()) - {RELEASE}
    example = _keys(_block((TF / "example.tfvars").read_text(), "processes = {"))
    assert example == defaults
    listed = re.search(r"sort\(\[(.*?)\]\)", processes)
    assert listed is not None and set(re.findall(r'"([^"]+)"', listed.group(1))) == defaults
