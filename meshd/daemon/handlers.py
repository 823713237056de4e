"""What the daemon runs for each inbox event: a command (``--exec``) or a Python callable.

A handler returns the reply text (or ``None`` for no reply) or raises
:class:`HandlerError`; the daemon owns retries, replies, acks and give-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import importlib
import importlib.util
import inspect
import json
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from meshd import tracing
from meshd.daemon.run_reports import CANCELLED
from meshd.models import InboxEvent, Part

if TYPE_CHECKING:
    from meshd.client import MeshClient
    from meshd.daemon.run_reports import RunReports

Reply = str | list[Part] | None
STDERR_TAIL = 2000
# Per attempt of an --exec command; `mesh daemon --timeout` defaults to it.
DEFAULT_TIMEOUT = 300.0


class HandlerError(Exception):
    """One attempt of a handler failed; ``str(e)`` is what the task is failed with."""


@dataclass(frozen=True, slots=True)
class HandlerContext:
    """Passed to a Python handler that takes a second argument."""

    client: MeshClient
    agent_id: str
    attempt: int
    # The runtime's run reports (meshd.daemon.run_reports); None outside the daemon.
    reports: RunReports | None = None


class Handler(Protocol):
    name: str

    async def __call__(self, event: InboxEvent, ctx: HandlerContext) -> Reply: ...


def event_env(event: InboxEvent, agent_id: str) -> dict[str, str]:
    env = {
        "MESH_AGENT_ID": agent_id,
        "MESH_EVENT_ID": event.event_id,
        "MESH_EVENT_TYPE": event.type,
        "MESH_SEQ": str(event.seq),
    }
    for key, value in (
        ("MESH_TASK_ID", event.task_id),
        ("MESH_CONTEXT_ID", event.context_id),
        ("MESH_FROM_AGENT_ID", event.from_agent_id),
    ):
        if value:
            env[key] = value
    # The handler's own requests may join the message's trace.
    traceparent = tracing.current_headers().get(tracing.TRACEPARENT) or event.traceparent
    if traceparent:
        env["TRACEPARENT"] = traceparent
    return env


def parent_death_signal(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die with the daemon (Linux), so a
    ``kill -9`` of the daemon cannot leave a handler finishing behind its back.
    (``mesh up`` asks for SIGTERM instead: an orphaned agent drains.)"""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    number = int(sig)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, number, 0, 0, 0)

    return preexec


def _kill_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


_SHELL_SYNTAX = re.compile(r"[|&;<>()$`\\*?\[\]{}!~#\n]")


def direct_argv(command: str) -> list[str] | None:
    """The argv to run ``command`` without a shell, or None when it needs one.

    A plain command line (``llm -m gpt "be brief"``) runs directly, so the
    program itself is the daemon's child and dies with it; pipes, ``;``,
    redirections, variables or globs need ``/bin/sh``.
    """
    if _SHELL_SYNTAX.search(command):
        return None
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if not argv or "=" in argv[0]:
        return None
    return argv


class ExecHandler:
    """Runs ``command`` with the event JSON on stdin.

    Exit 0: stdout (stripped) is the reply, empty means none. Non-zero exit or
    running past ``timeout`` fails the attempt with the exit code and the tail
    of stderr. The command runs in its own process group, which is killed on
    timeout or cancellation. A plain command line is executed directly and
    dies with the daemon (Linux parent-death signal); a shell command line
    (pipes, ``;``) runs under ``/bin/sh``, which dies with the daemon, but the
    programs it started may run on — see docs/meshd.md.
    """

    def __init__(
        self,
        command: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.command = command
        self.name = f"exec:{command}"
        self.timeout = timeout
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self._preexec = parent_death_signal()
        self._argv = direct_argv(command)

    async def __call__(self, event: InboxEvent, ctx: HandlerContext) -> Reply:
        """One run of the command, reported to the gateway when the daemon keeps
        run reports: ok (exit 0), failed (the exit status and the tail of stderr),
        limit (the timeout)."""
        reports = ctx.reports
        if reports is None:
            return await self._execute(event, ctx, {})
        run_id = await reports.start(ctx.client, event)
        began = time.monotonic()
        figures: dict[str, Any] = {}
        try:
            reply = await self._execute(event, ctx, figures)
        except HandlerError as e:
            await reports.end(ctx.client, run_id, figures.pop("outcome", "failed"), error=str(e),
                              duration_ms=_ms_since(began), **figures)
            raise
        except BaseException:
            reports.stopped(run_id, "failed", error=CANCELLED, duration_ms=_ms_since(began))
            raise
        await reports.end(ctx.client, run_id, "ok", exit_status=0, duration_ms=_ms_since(began))
        return reply

    async def _execute(self, event: InboxEvent, ctx: HandlerContext, figures: dict[str, Any]) -> Reply:
        """Run the command once; ``figures`` gets the exit status, or the limit hit."""
        env = {**self.env, **event_env(event, ctx.agent_id), "MESH_ATTEMPT": str(ctx.attempt)}
        kw: dict[str, Any] = {
            "stdin": asyncio.subprocess.PIPE,
            "stdout": asyncio.subprocess.PIPE,
            "stderr": asyncio.subprocess.PIPE,
            "env": env,
            "cwd": self.cwd,
            "start_new_session": True,
            "preexec_fn": self._preexec,
        }
        try:
            if self._argv is not None:
                proc = await asyncio.create_subprocess_exec(*self._argv, **kw)
            else:
                proc = await asyncio.create_subprocess_shell(self.command, **kw)
        except OSError as e:
            raise HandlerError(f"cannot run {self.command!r}: {e.strerror or e}") from e
        data = json.dumps(event.raw).encode()
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await proc.communicate(data)
        except TimeoutError:
            _kill_group(proc, signal.SIGKILL)
            await proc.wait()
            figures.update(outcome="limit", limit_hit="time limit")
            raise HandlerError(
                f"handler timed out after {self.timeout:g}s (command: {self.command})"
            ) from None
        except BaseException:
            # Cancelled (daemon shutting down past its grace): take the whole group down.
            _kill_group(proc, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await proc.wait()
            _kill_group(proc, signal.SIGKILL)
            raise
        stderr = err.decode(errors="replace")
        if stderr.strip():
            sys.stderr.write(stderr if stderr.endswith("\n") else stderr + "\n")
            sys.stderr.flush()
        if proc.returncode != 0:
            figures["exit_status"] = proc.returncode
            tail = stderr.strip()[-STDERR_TAIL:]
            raise HandlerError(
                f"handler exited with status {proc.returncode}" + (f": {tail}" if tail else "")
            )
        text = out.decode(errors="replace").strip()
        return text or None


def _ms_since(began: float) -> int:
    return int((time.monotonic() - began) * 1000)


class CallableHandler:
    """Wraps ``fn(event)`` or ``fn(event, ctx)``, sync (run in a thread) or async."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", repr(fn))
        try:
            params = [
                p
                for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
            ]
        except (TypeError, ValueError):
            params = []
        self._wants_ctx = len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004
        )

    async def __call__(self, event: InboxEvent, ctx: HandlerContext) -> Reply:
        args: tuple[Any, ...] = (event, ctx) if self._wants_ctx else (event,)
        try:
            if self._is_async:
                result = await self.fn(*args)
            else:
                result = await asyncio.to_thread(self.fn, *args)
                if inspect.isawaitable(result):
                    result = await result
        except HandlerError:
            raise
        except Exception as e:
            raise HandlerError(f"{type(e).__name__}: {e}") from e
        return _as_reply(result)


def _as_reply(result: Any) -> Reply:
    if result is None:
        return None
    if isinstance(result, str):
        return result.strip() or None
    if isinstance(result, list):
        return result or None
    if isinstance(result, dict) and isinstance(result.get("parts"), list):
        return result["parts"] or None
    raise HandlerError(f"handler returned {type(result).__name__}; return a str, a list of parts, or None")


def load_callable(spec: str) -> Callable[..., Any]:
    """``package.module:function`` or ``path/to/file.py:function`` → the callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--handler wants module:function, got {spec!r}")
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        mspec = importlib.util.spec_from_file_location(path.stem, path)
        if mspec is None or mspec.loader is None:
            raise ValueError(f"cannot load {path}")
        module = importlib.util.module_from_spec(mspec)
        sys.modules[path.stem] = module
        mspec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"{module_name} has no attribute {attr!r}")
    if not callable(obj):
        raise ValueError(f"{spec} is not callable")
    return obj
