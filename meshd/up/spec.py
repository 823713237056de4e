"""The file ``mesh up`` reads: which agents to run, each with its key, command and state folder.

Parsed from TOML and checked with pydantic; an entry's ``daemon`` or ``agent``
table holds the options of that command (``max_turns = 10`` is
``--max-turns 10``) and is checked against the command's own parser, so the
file accepts exactly what the command line does. Any mistake is one
:class:`~meshd.errors.ConfigError` naming the entry and the field.
Relative paths (key files, state folders) are taken from the file's folder.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from meshd.config import state_root
from meshd.errors import ConfigError

Kind = Literal["daemon", "agent"]
# Options the supervisor sets itself (state folder, credentials), or that make no sense per agent.
RESERVED = frozenset({"state_dir", "url", "api_key", "token", "config", "json", "help", "verbose"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Restart(_Strict):
    """Backoff between restarts of a crashed agent (as the daemon's reconnects)."""

    initial: float = Field(1.0, gt=0)
    maximum: float = Field(60.0, gt=0)
    # A run that lasted this long was healthy: the next crash starts the backoff over.
    healthy_after: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _order(self) -> Restart:
        if self.maximum < self.initial:
            raise ValueError("maximum must be at least initial")
        return self


class AgentEntry(_Strict):
    id: str = Field(min_length=1, max_length=200)
    key_file: Path | None = None
    key_env: str | None = None
    keyring: bool = False
    state_dir: Path | None = None
    env: dict[str, str] = Field(default_factory=dict)
    daemon: dict[str, Any] | None = None
    agent: dict[str, Any] | None = None

    @field_validator("id")
    @classmethod
    def _plain_id(cls, v: str) -> str:
        if "/" in v or v.strip() != v or v in (".", ".."):
            raise ValueError("an agent id has no '/' and no surrounding spaces")
        return v

    @field_validator("key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_NAME.match(v):
            raise ValueError("must be an environment variable name, e.g. REVIEWER_KEY")
        return v

    @model_validator(mode="after")
    def _one_of_each(self) -> AgentEntry:
        sources = [n for n in ("key_file", "key_env") if getattr(self, n)] + (
            ["keyring"] if self.keyring else []
        )
        if len(sources) != 1:
            raise ValueError(
                "needs exactly one credentials source: key_file = PATH, key_env = NAME or keyring = true"
                + (f" (got {', '.join(sources)})" if sources else "")
            )
        if (self.daemon is None) == (self.agent is None):
            raise ValueError(
                "needs exactly one of a [daemon] table (mesh daemon) or an [agent] table (mesh agent)"
            )
        return self

    @property
    def kind(self) -> Kind:
        return "daemon" if self.daemon is not None else "agent"

    @property
    def options(self) -> dict[str, Any]:
        opts = self.daemon if self.daemon is not None else self.agent
        assert opts is not None
        return opts


class UpFile(_Strict):
    url: str | None = None
    # On SIGTERM, how long each agent may take to drain before it is killed.
    stop_timeout: float = Field(30.0, gt=0)
    restart: Restart = Field(default_factory=Restart)
    agents: list[AgentEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> UpFile:
        seen: set[str] = set()
        for a in self.agents:
            if a.id in seen:
                raise ValueError(f"agent id {a.id!r} appears twice")
            seen.add(a.id)
        return self


class Agent:
    """One entry, resolved: absolute paths and the command line of its child process."""

    def __init__(self, entry: AgentEntry, base: Path) -> None:
        self.entry = entry
        self.id = entry.id
        self.kind: Kind = entry.kind
        self.key_file = _resolve(entry.key_file, base)
        self.state_dir = _resolve(entry.state_dir, base) or state_root() / entry.id
        self.args = options_argv(entry.options)

    def api_key(self, env: Mapping[str, str]) -> str:
        """The key from this entry's source, read now (a rotated key file is picked up on restart)."""
        e = self.entry
        if self.key_file is not None:
            try:
                key = self.key_file.read_text().strip()
            except OSError as err:
                raise ConfigError(
                    f"agent {self.id}: cannot read key_file {self.key_file}: {err.strerror}"
                ) from None
            if not key:
                raise ConfigError(f"agent {self.id}: key_file {self.key_file} is empty")
            return key
        if e.key_env is not None:
            key = env.get(e.key_env, "").strip()
            if not key:
                raise ConfigError(
                    f"agent {self.id}: the environment variable {e.key_env} (key_env) is not set"
                )
            return key
        from meshd.keyring_store import read_key

        return read_key(self.id)

    def argv(self) -> list[str]:
        """``mesh daemon|agent`` arguments (credentials go in the environment, never here)."""
        return [self.kind, *self.args, "--state-dir", str(self.state_dir)]


class Plan:
    def __init__(self, path: Path, spec: UpFile) -> None:
        self.path = path
        self.spec = spec
        base = path.parent
        self.agents = [Agent(e, base) for e in spec.agents]
        dirs = [a.state_dir.resolve() for a in self.agents]
        if len(set(dirs)) != len(dirs):
            raise ConfigError(f"{path}: two agents share a state folder; give each its own state_dir")


def _resolve(p: Path | None, base: Path) -> Path | None:
    if p is None:
        return None
    p = p.expanduser()
    return p if p.is_absolute() else base / p


def options_argv(options: dict[str, Any]) -> list[str]:
    """``{"max_turns": 10, "no_plans": true, "check": ["a", "b"]}`` → the command-line arguments."""
    argv: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                argv.append(flag)
        elif isinstance(value, list):
            for item in value:
                argv += [flag, _scalar(item)]
        else:
            argv += [flag, _scalar(value)]
    return argv


def _scalar(value: Any) -> str:
    if isinstance(value, dict | list):
        raise ValueError("a value here is a string, number or true/false")
    return str(value)


def _subparser(kind: Kind) -> argparse.ArgumentParser:
    from meshd.cli.parser import build_parser

    parser = build_parser()
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[kind]
    raise AssertionError("mesh has no subcommand " + kind)


class _ArgError(Exception):
    pass


def _raise(message: str) -> None:
    raise _ArgError(message)


def check_options(kind: Kind, options: dict[str, Any]) -> str | None:
    """Why ``options`` is not a valid ``mesh <kind>`` command line, naming the field; None if it is."""
    sub = _subparser(kind)
    known = {s[2:].replace("-", "_") for a in sub._actions for s in a.option_strings if s.startswith("--")}
    known |= {"exec"} if kind == "daemon" else set()
    for key in options:
        norm = key.replace("-", "_")
        if norm in RESERVED:
            return f"{kind}.{key}: set by `mesh up` itself (use the entry's state_dir / credentials fields)"
        if norm not in known:
            return f"{kind}.{key}: not an option of `mesh {kind}`"
    try:
        argv = options_argv(options)
    except ValueError as e:
        return f"{kind}: {e}"
    sub.error = _raise  # type: ignore[method-assign]
    try:
        sub.parse_args(argv)
    except _ArgError as e:
        return f"{kind}: {e}"
    return None


def _where(raw: dict[str, Any], loc: tuple[Any, ...]) -> str:
    """``agents[1] (reviewer).daemon`` for a pydantic error location."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
            if i > 0 and loc[i - 1] == "agents":
                try:
                    out += f" ({raw['agents'][part]['id']})"
                except (KeyError, IndexError, TypeError):
                    pass
        else:
            out += ("." if out else "") + str(part)
    return out or "(file)"


def parse_up(text: str, path: Path) -> Plan:
    """The checked plan of a ``mesh up`` file's text; :class:`ConfigError` with every problem found."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    try:
        spec = UpFile.model_validate(raw)
    except ValidationError as e:
        problems = [
            f"{_where(raw, tuple(err['loc']))}: {err['msg'].removeprefix('Value error, ')}"
            for err in e.errors()
        ]
        raise ConfigError(f"{path}: " + "; ".join(problems)) from None
    problems = []
    for i, entry in enumerate(spec.agents):
        why = check_options(entry.kind, entry.options)
        if why:
            problems.append(f"agents[{i}] ({entry.id}).{why}")
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return Plan(path, spec)


def load_up(path: Path) -> Plan:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"no such file: {path}") from None
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    return parse_up(text, path)
