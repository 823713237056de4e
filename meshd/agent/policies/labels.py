"""Verification labels on the replies the runtime posts: facts from hooks and re-runs.

A PostToolUse / PostToolUseFailure hook records each shell command the model ran
(Bash) and its exit code. When a reply is posted (``mesh_reply`` or the
auto-reply) the runtime labels it:

- ``independently verified``: the workspace has configured checks
  (``mesh agent --check CMD``), the runtime re-ran them itself and all exited 0;
- ``failed checks``: a re-run check failed, or (no checks configured) the last
  run of a command the model ran failed;
- ``agent verified``: no checks configured, the model ran commands, all exit 0;
- ``unverified``: nothing was checked.

The checks are re-run when the reply claims verification (:data:`CLAIM`, English
and Chinese) or the model ran commands; the claim only decides *whether* to
check, the label is always what the checks returned. The label goes into the
message metadata (``mesh_verification``) and a trailing line of the text, which
the receiving model reads in its next prompt (the line is left out when nothing
was checked and nothing claimed: the metadata still says ``unverified``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from dataclasses import dataclass, field
from typing import Any

from claude_agent_sdk import HookMatcher
from claude_agent_sdk.types import HookEvent

from meshd.agent.policies.metrics import PolicyMetrics
from meshd.agent.policies.sandbox import SANDBOX_HOME, Sandbox, check_env

log = logging.getLogger("meshd.agent")

LABELS = ("independently verified", "agent verified", "failed checks", "unverified")
# A claim of verification ("all tests pass", "I verified it", "编译通过"), not any word near one:
# "it works like this" and "not verified" claim nothing (a label line there is only noise).
CLAIM = re.compile(
    r"(?<!not )(?<!n't )(?<!never )(?<!be )(?<!been )(?<!no )"
    r"\b(tests? (pass|passed|are green|succeed|succeeded)|all (tests|checks) (pass|passed)|verified"
    r"|compiles|builds? (pass|passes|passed|fine|succeeded|ok))\b|测试通过|编译通过|已验证|验证通过",
    re.I,
)
EXIT = re.compile(r"exit code[: ]+(-?\d+)", re.I)
OUTPUT_CHARS = 400


def claims_verification(text: str) -> bool:
    return CLAIM.search(text) is not None


def reported(msg: Any) -> str | None:
    """The label another runtime put on ``msg`` (with its checks), for the reader's prompt."""
    meta = getattr(msg, "metadata", None) or {}
    v = meta.get("mesh_verification") if isinstance(meta, dict) else None
    if not isinstance(v, dict) or v.get("label") not in LABELS:
        return None
    checks = [c for c in v.get("checks") or [] if isinstance(c, dict)][:10]
    listed = "; ".join(
        f"`{str(c.get('command'))[:200]}` exit {c.get('exit_code')} ({c.get('by')})" for c in checks
    )
    return str(v["label"]) + (f" — {listed}" if listed else "")


@dataclass
class Check:
    command: str
    exit_code: int
    by: str  # "agent" (the model ran it) or "runtime" (re-run by mesh agent)
    output: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"command": self.command, "exit_code": self.exit_code, "by": self.by}


async def run_check(command: str, sandbox: Sandbox, timeout: float) -> Check:
    """Run one check in ``sandbox`` (docs/decisions/031-peer-isolation.md)."""
    with contextlib.ExitStack() as stack:
        temp = sandbox.home()
        home = stack.enter_context(temp) if temp is not None else SANDBOX_HOME
        return await _run(command, sandbox, check_env(home), timeout)


async def _run(command: str, sandbox: Sandbox, env: dict[str, str], timeout: float) -> Check:
    argv = sandbox.argv(command)
    # Its own process group: a timed-out check is killed with everything it started.
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=str(sandbox.workspace), env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return Check(command, -1, "runtime", f"timed out after {timeout:g} s")
    return Check(command, proc.returncode or 0, "runtime", out.decode(errors="replace")[-OUTPUT_CHARS:])


@dataclass
class Verifier:
    """One run's record of commands, and the labelling of its replies."""

    checks: tuple[str, ...]
    sandbox: Sandbox | None  # where the checks run; None: no checks are run
    metrics: PolicyMetrics
    timeout: float = 300.0
    ran: list[Check] = field(default_factory=list)
    _rerun: list[Check] | None = None

    async def _post(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        if data.get("tool_name") == "Bash":
            resp = data.get("tool_response")
            code = 0
            if isinstance(resp, dict):
                raw = resp.get("exit_code", resp.get("exitCode", resp.get("returnCode")))
                code = int(raw) if isinstance(raw, int) else (1 if resp.get("interrupted") else 0)
            self._record(data, code)
        return {}

    async def _failure(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        if data.get("tool_name") == "Bash":
            m = EXIT.search(str(data.get("error") or ""))
            self._record(data, int(m.group(1)) if m else 1)
        return {}

    def _record(self, data: Any, code: int) -> None:
        command = str((data.get("tool_input") or {}).get("command", ""))
        self.ran.append(Check(command, code, "agent"))
        log.info("verification: the model ran %r, exit %d", command[:200], code)

    def hooks(self) -> dict[HookEvent, list[HookMatcher]]:
        return {
            "PostToolUse": [HookMatcher(matcher="Bash", hooks=[self._post])],
            "PostToolUseFailure": [HookMatcher(matcher="Bash", hooks=[self._failure])],
        }

    async def label(self, text: str) -> tuple[str, list[Check]]:
        if self.checks and self.sandbox is not None and (self.ran or claims_verification(text)):
            if self._rerun is None:  # once per run: the checks are the workspace's, not the reply's
                self._rerun = [await run_check(c, self.sandbox, self.timeout) for c in self.checks]
            ok = all(c.exit_code == 0 for c in self._rerun)
            return ("independently verified" if ok else "failed checks"), self._rerun
        if self.ran:
            last: dict[str, Check] = {}
            for c in self.ran:  # a command fixed and run again counts by its last run
                last[c.command] = c
            ok = all(c.exit_code == 0 for c in last.values())
            return ("agent verified" if ok else "failed checks"), list(last.values())
        return "unverified", []

    async def finish(self, text: str) -> tuple[str, dict[str, Any]]:
        """The reply's text with its trailing label line, and the metadata to merge."""
        label, checks = await self.label(text)
        self.metrics.inc("label_" + label.replace(" ", "_"))
        meta = {"mesh_verification": {"label": label, "checks": [c.as_json() for c in checks]}}
        if not checks and not claims_verification(text):
            # Nothing checked and nothing claimed ("It is 42."): the metadata says unverified;
            # a trailing line on every answer would only be noise (and turn "thanks" into work).
            return text, meta
        listed = "; ".join(f"`{c.command}` exit {c.exit_code}" for c in checks)
        line = f"[verification: {label}" + (f" — {listed}" if listed else "") + "]"
        return f"{text.rstrip()}\n\n{line}", meta
