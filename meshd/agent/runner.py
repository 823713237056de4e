"""One Claude Agent SDK run per inbox event: the handler ``mesh agent`` gives the daemon.

The daemon calls :class:`AgentRunner` like any ``--handler`` callable and acks the
event only after it returned, so a crash mid-run runs the event again; the
tools' derived message ids keep that re-run from posting twice.

A run ends in one of three ways:

- done: its cost is recorded; if it posted nothing at all and ended with text,
  that text is the reply on the task it serves (``--no-auto-reply`` turns it off);
- a limit (max turns, max budget, wall-clock timeout): never retried; the task
  gets a note naming the limit and the spend and is set ``failed`` if we serve it;
- an error of the SDK, the CLI or the model API: :class:`HandlerError`, which the
  daemon retries (``--attempts``) and then gives up on like any handler.

What the first two leave on the task, and every run's record, is
:mod:`meshd.agent.closing`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKError,
    HookMatcher,
    ResultMessage,
    SystemMessage,
    TextBlock,
    query,
)
from claude_agent_sdk import __version__ as sdk_version
from claude_agent_sdk.types import HookEvent

from meshd.agent import model_api
from meshd.agent.budget import budget_stop
from meshd.agent.closing import RunClosing
from meshd.agent.outcome import Outcome, run_cost, run_kind, sdk_error_is_failure
from meshd.agent.permissions import path_guard
from meshd.agent.policies import actions, notes, sandbox
from meshd.agent.policies.engine import Plan, Policies
from meshd.agent.policies.sandbox import Sandbox
from meshd.agent.prompt import Teammates, system_prompt, wake_prompt
from meshd.agent.sessions import RunLog, SessionStore, conversation_key, peer_of
from meshd.agent.settings import RISKY_TOOLS, AgentSettings, Policy, RunSettings, default_policy
from meshd.agent.tools import RunContext, mesh_server
from meshd.client import MeshClient
from meshd.config import config_path, state_root
from meshd.daemon.handlers import HandlerContext, HandlerError, Reply
from meshd.daemon.run_reports import CANCELLED, RunReports, gateway_outcome
from meshd.errors import MeshError, NotFoundError
from meshd.ids import derived_message_id
from meshd.models import InboxEvent, Task

log = logging.getLogger("meshd.agent")

# Events that change who the agent may talk to: the teammates summary is rebuilt.
TEAM_EVENTS = frozenset({"friend.accepted", "friend.request", "group.notice"})
RUNTIME = f"claude-agent-sdk/{sdk_version}"
# The CLI retries a model API it cannot connect to for about three minutes: a run
# gives up after this many failed connections (a few seconds), naming the URL.
UNREACHABLE_RETRIES = 3
HookSource = Callable[[RunContext], dict[HookEvent, list[HookMatcher]]]


class AgentRunner:
    """The daemon handler that runs the model for each event that needs thought."""

    name = "claude-agent"

    def __init__(
        self, settings: AgentSettings, policy: Policy = default_policy, hooks: HookSource | None = None
    ) -> None:
        self.settings = settings
        self.policy = policy
        # More SDK hooks per run (verification labels, notes, runaway guards): they are
        # added after the workspace guard, which always stays first.
        self.extra_hooks = hooks
        self._ready = False
        self.me = ""
        self.workspace = Path(".")
        self.extra_dirs: list[Path] = []
        self.sessions: SessionStore | None = None
        self.runs: RunLog | None = None
        self.reports: RunReports | None = None
        self.teammates: Teammates | None = None
        self.closing: RunClosing | None = None
        self.policies = Policies(settings.policies)
        # Refuses here, before the daemon connects, when checks would run unsandboxed.
        self.bwrap = sandbox.locate(settings.policies.unsafe_check) if settings.policies.checks else None
        if settings.policies.checks and self.bwrap is None:
            log.warning("--unsafe-check: the checks run without a sandbox (bubblewrap is not installed)")

    def _setup(self, ctx: HandlerContext) -> None:
        if self._ready:
            return
        self.me = ctx.agent_id
        folder = self.settings.state_dir or state_root() / ctx.agent_id
        self.workspace = (self.settings.workspace or folder / "workspace").resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.extra_dirs = [Path(p).resolve() for p in self.settings.extra_dirs]
        self.sessions = SessionStore(folder)
        self.runs = RunLog(folder)
        self.reports = ctx.reports or RunReports(folder, ctx.agent_id)
        self.teammates = Teammates(ctx.client, ttl=self.settings.teammates_ttl)
        self.policies = Policies(self.settings.policies, folder, self.workspace, self._sandbox(folder))
        self.closing = RunClosing(self.settings, self.me, RUNTIME, self.runs, self.policies.metrics)
        self._ready = True
        log.info("agent runtime %s: workspace %s, runs on %s", RUNTIME, self.workspace,
                 ", ".join(sorted(self.settings.run_on)))  # fmt: skip

    def _sandbox(self, folder: Path) -> Sandbox:
        # What a check must not see: where keys, sessions and transcripts of other peers are.
        hidden = [Path.home(), state_root(), folder, config_path()]
        if os.environ.get("CLAUDE_CONFIG_DIR"):
            hidden.append(Path(os.environ["CLAUDE_CONFIG_DIR"]))
        return Sandbox.for_runtime(self.bwrap, self.workspace, hidden)

    def wants(self, event: InboxEvent) -> bool:
        """Whether ``event`` starts a run: configured types, never our own echoes."""
        return event.type in self.settings.run_on and event.from_agent_id != self.me

    async def __call__(self, event: InboxEvent, ctx: HandlerContext) -> Reply:
        self._setup(ctx)
        assert self.teammates is not None and self.closing is not None
        closing = self.closing
        if event.type in TEAM_EVENTS:
            self.teammates.invalidate()
        if not self.wants(event):
            log.debug("seq %d (%s) needs no run", event.seq, event.type)
            return None
        client = ctx.client
        task: Task | None = None
        if event.task_id:
            try:
                task = await client.get_task(event.task_id)
            except NotFoundError:
                task = None
            except MeshError as e:
                raise HandlerError(f"cannot read task {event.task_id}: {e}") from e
        key = self._context_key(event)
        plan = self.policies.plan(event, task, self.me, key)
        if plan.skip is not None:
            log.info("seq %d (%s, task %s): no run, %s", event.seq, event.type, event.task_id, plan.skip)
            if plan.close and task is not None:
                mid = derived_message_id(self.me, f"{event.event_id}/close")
                await actions.close_chit_chat(client, task, mid, self.policies.metrics)
            return None
        rs = plan.settings(self.policy(event, self.settings), self.settings.policies)
        log.info("seq %d: complexity %s (%s), effort %s, thinking %s%s", event.seq, plan.level,
                 plan.level_source, rs.effort, (rs.thinking or {}).get("type"),
                 ", handshake run" if plan.handshake else "")  # fmt: skip
        profile = await self._profile(client)
        stop = budget_stop(profile)
        if stop is not None:
            await closing.budget_note(event, client, *stop)
            return None
        assert self.reports is not None
        # Reported as it starts: the gateway shows it as the agent's current run.
        run_id = await self.reports.start(client, event, model=rs.model)
        run = RunContext(client=client, me=self.me, event=event, run_id=run_id, extra=plan.metadata,
                         finish_reply=plan.verifier.finish if plan.verifier else None)  # fmt: skip
        try:
            outcome = await self._run(event, task, rs, run, plan,
                                      str(profile.get("instructions") or ""))
        except HandlerError as e:
            # Recorded too: an errored run may have spent money before it failed.
            failed = Outcome("error", 0.0, run.turns, int((time.monotonic() - run.started) * 1000),
                             None, "", None)  # fmt: skip
            closing.record(event, run, failed, False, detail=str(e))
            await self._report(run, failed, error=str(e))
            await actions.count_failure(self.policies, run, key, str(e))
            raise
        except BaseException:
            self.reports.stopped(run_id, "failed", error=CANCELLED, turns=run.turns,
                                 duration_ms=int((time.monotonic() - run.started) * 1000))
            raise
        finally:
            assert self.sessions is not None
            self.sessions.opened(run.opened, self.sessions.key_for(event))
        auto = False
        if outcome.kind == "ok":
            auto = await closing.auto_reply(event, task, run, outcome)
            await closing.close(event, task, run, outcome, auto, plan)
            if plan.handshake and task is not None:
                await actions.await_confirmation(run, task)
            self.policies.finished(key, ok=True)
        else:
            await closing.limit_note(event, rs, run, outcome)
            await actions.count_failure(self.policies, run, key, outcome.detail or outcome.kind)
        closing.record(event, run, outcome, auto, detail=outcome.detail)
        await self._report(run, outcome, error=outcome.detail or None)
        return None

    async def _report(self, run: RunContext, outcome: Outcome, *, error: str | None = None) -> None:
        """The run's end, to the gateway (ADR 046)."""
        assert self.reports is not None
        kind, limit = gateway_outcome(outcome.kind)
        await self.reports.end(run.client, run.run_id, kind, limit_hit=limit, turns=outcome.turns,
                               cost_usd=round(outcome.cost_usd, 6), duration_ms=outcome.duration_ms,
                               error=error if kind != "ok" else None)

    # -- the SDK run -------------------------------------------------------------
    def _context_key(self, event: InboxEvent) -> str:
        return conversation_key(event)

    async def _profile(self, client: MeshClient) -> dict[str, Any]:
        """This agent's profile, read once per run: its instructions and daily budget.
        Unreadable (the gateway away): no instructions and no budget check."""
        try:
            return await client.me()
        except MeshError as e:
            log.warning("could not read this agent's instructions and budget: %s", e)
            return {}

    async def _options(self, event: InboxEvent, rs: RunSettings, run: RunContext, plan: Plan,
                       instructions: str) -> ClaudeAgentOptions:  # fmt: skip
        assert self.teammates is not None and self.sessions is not None
        server, mesh_tools = mesh_server(run)
        st = self.settings
        session = self.sessions.get(self.sessions.key_for(event))
        extra = self.extra_dirs
        opts: dict[str, Any] = {
            "system_prompt": self._system_prompt(instructions, await self.teammates.summary(), event),
            "mcp_servers": {"mesh": server},
            "strict_mcp_config": True,
            "tools": list(st.tools),
            "allowed_tools": [*mesh_tools, *st.tools],
            "disallowed_tools": [t for t in RISKY_TOOLS if t not in st.tools],
            "permission_mode": "dontAsk",
            "hooks": self._hooks(run, extra, plan),
            "cwd": str(self.workspace),
            "add_dirs": [str(p) for p in extra],
            # Project settings in the workspace could add hooks that run commands:
            # the model can write there, so none are loaded.
            "setting_sources": [],
            # The prompt quotes other agents' text: no @file expansion from it.
            "verbatim_prompts": True,
            "max_turns": rs.max_turns,
            "max_budget_usd": rs.max_budget_usd,
            "model": rs.model,
            "effort": rs.effort,
            "thinking": rs.thinking,
            # The CLI needs no mesh credentials: the tools run in this process.
            "env": {"MESH_API_KEY": "", "MESH_TOKEN": "", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
            "stderr": lambda line: log.debug("claude: %s", line),
            "cli_path": st.cli_path,
        }
        if session is not None:
            opts.update(resume=session.session_id, fork_session=True)
        return ClaudeAgentOptions(**opts)

    def _system_prompt(self, instructions: str, teammates: str, event: InboxEvent) -> str:
        base = system_prompt(self.me, str(self.workspace), instructions, teammates)
        kept = notes.section(self.workspace, peer_of(event)) if self.settings.policies.notes else ""
        return f"{base}\n\n{kept}" if kept else base

    def _hooks(self, run: RunContext, extra: list[Path], plan: Plan) -> dict[HookEvent, list[HookMatcher]]:
        hooks: dict[HookEvent, list[HookMatcher]] = {
            "PreToolUse": [HookMatcher(hooks=[path_guard(self.workspace, extra)])]
        }
        sources = [plan.hooks(self.policies.metrics)]
        if self.extra_hooks is not None:
            sources.append(self.extra_hooks(run))
        for source in sources:
            for name, matchers in source.items():
                hooks.setdefault(name, []).extend(matchers)
        return hooks

    async def _run(
        self, event: InboxEvent, task: Task | None, rs: RunSettings, run: RunContext, plan: Plan,
        instructions: str,
    ) -> Outcome:
        assert self.sessions is not None
        st = self.settings
        prompt = wake_prompt(event, self.me, task, history=st.history, history_chars=st.history_chars)
        if plan.notes:
            prompt += "\n\n" + "\n\n".join(plan.notes)
        options = await self._options(event, rs, run, plan, instructions)
        stopped = lambda: plan.guards.stopped if plan.guards else None  # noqa: E731
        session_key = self.sessions.key_for(event)
        prior = self.sessions.get(session_key)
        prior_cost = prior.cost_usd if prior else 0.0
        result: ResultMessage | None = None
        session_id: str | None = None
        last_text = ""
        log.info("run for seq %d (%s, task %s) starting%s", event.seq, event.type, event.task_id,
                 " (resuming the context's session)" if prior else "")  # fmt: skip
        timed_out_at: float | None = None
        try:
            async with contextlib.aclosing(query(prompt=prompt, options=options)) as stream:
                try:
                    async with asyncio.timeout(rs.timeout):
                        async for msg in stream:
                            if isinstance(msg, SystemMessage) and msg.subtype == "init":
                                session_id = msg.data.get("session_id") or session_id
                            elif isinstance(msg, SystemMessage) and msg.subtype == "api_retry":
                                _give_up_on_model(msg.data)
                            elif isinstance(msg, AssistantMessage) and msg.parent_tool_use_id is None:
                                run.turns += 1
                                texts = [b.text for b in msg.content if isinstance(b, TextBlock) and b.text]
                                if texts:
                                    last_text = "\n".join(texts).strip()
                            elif isinstance(msg, ResultMessage):
                                result = msg
                except TimeoutError:
                    # Noted before the CLI is shut down, which takes a while of its own.
                    timed_out_at = time.monotonic()
        except ClaudeSDKError as e:
            # After a limit result the SDK raises too; a result, when there is one, is what counts.
            if sdk_error_is_failure(result, stopped()):
                raise HandlerError(f"the agent run failed: {e}") from e
            log.debug("SDK error after the run's result (ignored): %s", e)
        kind = run_kind(result, timed_out=timed_out_at is not None, guard=stopped(),
                        model_url=model_api.base_url())
        total = result.total_cost_usd if result and result.total_cost_usd is not None else None
        cost = run_cost(result, prior_cost)
        session_id = (result.session_id if result else None) or session_id
        ended = timed_out_at or time.monotonic()
        duration = result.duration_ms if result else int((ended - run.started) * 1000)
        turns = result.num_turns if result else run.turns
        if session_id:
            kept = total if total is not None else prior_cost
            self.sessions.put(session_key, session_id, kept)
        if result is not None and kind == "ok" and result.result:
            last_text = result.result.strip() or last_text
        return Outcome(kind, cost, turns, duration, session_id, last_text, total, detail=stopped() or "")



def _give_up_on_model(retry: dict[str, Any]) -> None:
    """Stop a run whose model API cannot be reached or refuses the key, instead of
    letting the CLI retry for minutes: the error names the URL."""
    status, attempt = retry.get("error_status"), int(retry.get("attempt") or 0)
    url = model_api.base_url()
    if status in (401, 403):
        raise HandlerError(f"the model API at {url} refused the credentials (HTTP {status})")
    if status is None and attempt >= UNREACHABLE_RETRIES:
        raise HandlerError(f"the model API at {url} is unreachable ({attempt} connection attempts failed)")
