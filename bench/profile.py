"""Where the web process's CPU goes: py-spy samples it from outside, the bench
summarises the stacks (ADR 024).

py-spy reads the target's memory with ``process_vm_readv`` (ptrace permission):
no hook in the web process, nothing in the production path. ``--nonblocking``
keeps it from pausing the target for each sample, so the web process runs as
in the unprofiled runs; py-spy's own CPU is metered separately. Idle samples
(the loop waiting in epoll) are not recorded, so sample shares are shares of
the web process's busy time — py-spy counts a runnable thread waiting for a core
as busy, so on a loaded machine the shares also hold run-queue time; a
preempted thread waits where it ran, which keeps the shares close to CPU
shares, except that waiting right after a wake-up counts for the event loop.
Time in C code (asyncpg's Cython protocol, uvloop, hiredis) counts for the
nearest Python frame above it. A non-blocking read can race the interpreter
and get a stack without its outer frames; its innermost frames, which is what
self time counts, are still right.

The raw output is py-spy's collapsed-stack text (``frame;frame;… count``, the
input of flamegraph.pl / speedscope / inferno), gzipped next to the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Third-party packages by the part of the stack they stand for.
GROUPS = {
    "uvicorn": "framework: uvicorn/httptools", "httptools": "framework: uvicorn/httptools",
    "h11": "framework: uvicorn/httptools", "uvloop": "framework: uvicorn/httptools",
    "starlette": "framework: starlette", "sse_starlette": "framework: starlette",
    "anyio": "framework: anyio", "asyncpg": "asyncpg", "redis": "redis",
    "aiokafka": "kafka", "orjson": "json", "msgspec": "json", "pydantic": "pydantic",
    "pydantic_core": "pydantic", "jwt": "auth libs (jwt, argon2)", "argon2": "auth libs (jwt, argon2)",
    "sentry_sdk": "observability (sentry, prometheus)",
    "prometheus_client": "observability (sentry, prometheus)",
}
STDLIB_GROUPS = {"json": "json", "asyncio": "asyncio (stdlib)", "logging": "logging"}


def pyspy() -> str | None:
    """The py-spy binary of this venv (or PATH), or None."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def can_profile(pid: int) -> str | None:
    """None when py-spy can read ``pid``; otherwise why not (no binary, ptrace refused…)."""
    binary = pyspy()
    if binary is None:
        return "py-spy is not installed (`pip install -e '.[dev]'`)"
    result = subprocess.run([binary, "dump", "--pid", str(pid)], capture_output=True, text=True,
                            timeout=30)
    if result.returncode != 0:
        return f"`py-spy dump` failed: {(result.stderr or result.stdout).strip()[:300]}"
    return None


class Recorder:
    """``py-spy record`` on one pid until :meth:`stop` (SIGINT makes it write the file)."""

    def __init__(self, pid: int, out: Path, rate: int = 200) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        binary = pyspy()
        assert binary is not None
        self.proc = await asyncio.create_subprocess_exec(
            binary, "record", "--pid", str(self.pid), "--rate", str(self.rate), "--format", "raw",
            "--nolineno", "--full-filenames", "--nonblocking", "--output", str(self.out),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
        await asyncio.sleep(0.5)   # attached before the load starts
        if self.proc.returncode is not None:
            raise RuntimeError(f"py-spy exited at once: {await self._stderr()}")

    async def _stderr(self) -> str:
        assert self.proc is not None and self.proc.stderr is not None
        return (await self.proc.stderr.read()).decode(errors="replace")[-1000:]

    async def stop(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote no profile: {await self._stderr()}")


# --- the summary ------------------------------------------------------------------------

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*)\)$")


def parse_collapsed(text: str) -> list[tuple[list[str], int]]:
    """py-spy's raw format: one ``outer;…;inner count`` line per distinct stack."""
    out = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


def split_frame(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame)
    return (m["func"], m["file"]) if m else (frame, "")


def module_of(path: str, repo: Path = REPO) -> str:
    """A file → a short module name: ``app/api/tasks.py``, ``asyncpg``, ``asyncio``…"""
    p = path.replace("\\", "/")
    m = re.search(r"/site-packages/([^/]+)", p)   # before the repo: the venv may be inside it
    if m:
        return m.group(1).split(".")[0]
    root = str(repo).rstrip("/") + "/"
    if p.startswith(root):
        return p[len(root):]
    m = re.search(r"/lib/python3\.\d+/([^/]+)", p)
    if m:
        return m.group(1).removesuffix(".py")
    return p or "?"


def group_of(module: str) -> str:
    """The report's groups: framework parts, our code per module, asyncpg, redis, json…"""
    if module.endswith(".py") and "/" in module:   # a file of this repository
        return f"ours: {module}"
    if module in GROUPS:
        return GROUPS[module]
    if module in STDLIB_GROUPS:
        return STDLIB_GROUPS[module]
    if module.startswith("<") or module == "?":
        return "other"
    return f"other: {module}"


@dataclass
class Summary:
    samples: int = 0
    self_groups: Counter[str] = field(default_factory=Counter)
    total_groups: Counter[str] = field(default_factory=Counter)
    self_funcs: Counter[str] = field(default_factory=Counter)
    total_funcs: Counter[str] = field(default_factory=Counter)

    def pct(self, n: int) -> float:
        return 100.0 * n / self.samples if self.samples else 0.0


def summarize(text: str, repo: Path = REPO) -> Summary:
    """Self % (the innermost frame) and total % (anywhere in the stack, once per
    sample) per group and per function. A sample whose innermost Python frame is
    the event loop's ``run``/``run_forever`` is time in uvloop's C code (socket
    I/O, callbacks' C parts): it counts as "event loop (uvloop, C)"."""
    s = Summary()
    for frames, count in parse_collapsed(text):
        s.samples += count
        names = []
        groups = []
        for frame in frames:
            func, path = split_frame(frame)
            module = module_of(path, repo)
            names.append(f"{func} ({module})")
            groups.append(group_of(module))
        if not names:
            continue
        leaf_group = groups[-1]
        if leaf_group == "asyncio (stdlib)" and names[-1].split(" (")[0].split(".")[-1] in (
                "run", "run_forever", "run_until_complete"):
            leaf_group = "event loop (uvloop, C)"
            s.total_groups[leaf_group] += count
        s.self_groups[leaf_group] += count
        s.self_funcs[names[-1]] += count
        for g in set(groups):
            s.total_groups[g] += count
        for n in set(names):
            s.total_funcs[n] += count
    return s


def write_gz(src: Path, dest: Path) -> int:
    """Gzip ``src`` to ``dest``; returns the compressed size."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(gzip.compress(src.read_bytes(), 9))
    return dest.stat().st_size
