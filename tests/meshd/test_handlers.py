import asyncio

import psutil
import pytest

from meshd.daemon.handlers import (
    CallableHandler,
    ExecHandler,
    HandlerContext,
    HandlerError,
    direct_argv,
    load_callable,
)
from meshd.models import InboxEvent

EVENT = InboxEvent.from_json(
    {
        "seq": 7,
        "event_id": "e-1-x",
        "type": "task.created",
        "task_id": "t-1",
        "context_id": "c-1",
        "from_agent_id": "a@x",
        "created_at": "2026-01-01T00:00:00+00:00",
        "payload": {"message": {"message_id": "m1", "parts": [{"kind": "text", "text": "hi"}]}},
    }
)
CTX = HandlerContext(client=None, agent_id="b@y", attempt=1)  # type: ignore[arg-type]


async def test_exec_gets_event_on_stdin_and_env_and_stdout_is_the_reply():
    h = ExecHandler(
        "python3 -c 'import json,sys,os; e=json.load(sys.stdin); "
        'print(e["payload"]["message"]["parts"][0]["text"], os.environ["MESH_TASK_ID"], '
        'os.environ["MESH_SEQ"], os.environ["MESH_AGENT_ID"])\''
    )
    assert await h(EVENT, CTX) == "hi t-1 7 b@y"


async def test_exec_empty_output_is_no_reply():
    assert await ExecHandler("cat >/dev/null")(EVENT, CTX) is None


async def test_exec_nonzero_exit_fails_with_status_and_stderr():
    with pytest.raises(HandlerError, match=r"status 4: bad input"):
        await ExecHandler("cat >/dev/null; echo bad input >&2; exit 4")(EVENT, CTX)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


async def test_exec_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    h = ExecHandler(f"sleep 60 & echo $! > {pidfile}; wait", timeout=0.5)
    with pytest.raises(HandlerError, match=r"timed out after 0\.5s"):
        await h(EVENT, CTX)
    pid = int(pidfile.read_text())
    # the background child was in the killed group: it is gone (or a zombie being reaped)
    async with asyncio.timeout(10):
        while True:
            if not _alive(pid):
                break
            await asyncio.sleep(0.05)


async def test_callable_sync_async_and_with_context():
    def sync(event):
        return f"sync {event.text}"

    async def with_ctx(event, ctx):
        return f"{ctx.agent_id} {event.seq}"

    def parts(event):
        return [{"kind": "data", "data": {"n": 1}}]

    assert await CallableHandler(sync)(EVENT, CTX) == "sync hi"
    assert await CallableHandler(with_ctx)(EVENT, CTX) == "b@y 7"
    assert await CallableHandler(parts)(EVENT, CTX) == [{"kind": "data", "data": {"n": 1}}]
    assert await CallableHandler(lambda e: None)(EVENT, CTX) is None


async def test_callable_exceptions_and_bad_returns_fail_the_attempt():
    def boom(event):
        raise RuntimeError("model overloaded")

    with pytest.raises(HandlerError, match="RuntimeError: model overloaded"):
        await CallableHandler(boom)(EVENT, CTX)
    with pytest.raises(HandlerError, match="return a str"):
        await CallableHandler(lambda e: 42)(EVENT, CTX)


def test_load_callable(tmp_path):
    assert load_callable("tests.meshd.sample_handlers:echo").__name__ == "echo"
    f = tmp_path / "myhandler.py"
    f.write_text("def handle(event):\n    return 'ok'\n")
    assert load_callable(f"{f}:handle")(None) == "ok"
    with pytest.raises(ValueError, match="module:function"):
        load_callable("nocolon")
    with pytest.raises(ValueError, match="no attribute"):
        load_callable("tests.meshd.sample_handlers:missing")


def test_plain_command_lines_run_without_a_shell():
    assert direct_argv('llm -m gpt-4o "be brief"') == ["llm", "-m", "gpt-4o", "be brief"]
    assert direct_argv("python3 handler.py --x=1") == ["python3", "handler.py", "--x=1"]
    for shell in ("jq .payload | llm", "a; b", "cat > out", "echo $HOME", "X=1 cmd", "ls *.py"):
        assert direct_argv(shell) is None, shell


async def test_missing_program_fails_the_attempt_clearly():
    with pytest.raises(HandlerError, match="cannot run"):
        await ExecHandler("no-such-program-xyz --flag")(EVENT, CTX)
