"""One trace per message, in a real Jaeger: a task sent with a known traceparent
goes web → relay → bus → push → SSE → `mesh daemon` → its reply, and Jaeger's
query API shows one trace with each process's spans. With tracing off no
exporter exists and events keep their bytes."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.domain.event_wire import encode_event
from app.platform import tracing
from app.platform.settings import Settings
from devstack.jaeger import Jaeger, binary_path
from devstack.process import free_port
from tests.api_helpers import ok, text_message
from tests.meshd.support import Proc, mesh_cmd, mesh_env
from tests.support.isolated import isolated_settings
from tests.support.meshapi import MeshFactory
from tests.support.procs import MeshProcess
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.skipif(
    shutil.which("go") is None and not binary_path().exists(),
    reason="Jaeger is built with the Go toolchain (.ci/run provides it)")

HANDLER = """\
import json, os, sys
event = json.load(sys.stdin)
with open(os.environ["TEST_OUT"], "a") as out:
    out.write(event["type"] + " " + os.environ.get("TRACEPARENT", "-") + "\\n")
print("re: traced")
"""


@pytest.fixture(scope="module")
async def jaeger(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Jaeger]:
    root = tmp_path_factory.mktemp("jaeger")
    service = Jaeger(root / "data", free_port())
    # The first run builds the program (minutes): outside the event loop.
    await asyncio.to_thread(service.start, 600.0)
    try:
        yield service
    finally:
        service.stop()


def _otel(jaeger: Jaeger) -> dict[str, str]:
    # A short export delay: the spans reach Jaeger within a fraction of a second.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_TRACES_SAMPLER": "parentbased_always_on"}


async def _spans(jaeger: Jaeger, trace_id: str,
                 want: set[tuple[str, str]] | Counter[tuple[str, str]],
                 timeout: float = 60.0) -> list[dict]:
    """Poll Jaeger's query API until the trace holds every (service, span) in ``want``
    (as many times as a Counter says: each process exports its spans in batches of
    its own, so one span's arrival says nothing of a later one's)."""
    need = Counter(want)
    async with asyncio.timeout(timeout):
        while True:
            spans = await asyncio.to_thread(jaeger.trace, trace_id)
            have = Counter((s["service"], s["operationName"]) for s in spans)
            if need <= have:
                return spans
            await asyncio.sleep(0.2)


async def test_a_message_and_its_reply_are_one_trace_across_the_processes(
        migrated: Settings, jaeger: Jaeger, tmp_path: Path) -> None:
    iso = await isolated_settings(migrated)
    env = _otel(jaeger)
    procs = [MeshProcess("web", iso, os_env=env), MeshProcess("outbox", iso, os_env=env),
             MeshProcess("push", iso, os_env=env)]
    for proc in procs:
        await proc.start()
    web = procs[0]
    handler = tmp_path / "handler.py"
    handler.write_text(HANDLER)
    seen = tmp_path / "traceparents"
    daemon: Proc | None = None
    try:
        async with MeshFactory.connect(web.url) as mesh:
            a, b = await mesh.pair()
            daemon_env = mesh_env(web.url, b.api_key, tmp_path, TEST_OUT=str(seen), **env)
            daemon = await Proc(mesh_cmd("daemon", "--state-dir", str(tmp_path / "state"),
                                         "--exec", f"{sys.executable} {handler}"),
                                daemon_env, name="daemon").start()
            trace_id = secrets.token_hex(16)
            parent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
            sent = ok(await a.http.post("/v1/mesh/tasks", json={
                "to_agent_id": b.agent_id, "message": text_message("trace me")},
                headers={**a.headers, "traceparent": parent}), 201)
            task_id = sent["task_id"]
            async with asyncio.timeout(60):
                while len(ok(await a.get(f"/v1/mesh/tasks/{task_id}"))["messages"]) < 2:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)  # the reply, seen from outside: nothing to await

        # The handler ran inside the message's trace.
        handed = [line.split() for line in seen.read_text().splitlines()]
        [task_event] = [tp for kind, tp in handed if kind == "task.created"]
        assert task_event.split("-")[1] == trace_id

        # The reply is a second send in the same trace, a descendant of mesh.handle.
        want = Counter({("agent-mesh-web", "mesh.send"): 2,
                        ("agent-mesh-web", "mesh.transaction"): 1,
                        ("agent-mesh-outbox", "mesh.relay"): 1,
                        ("agent-mesh-push", "mesh.push"): 1,
                        ("agent-mesh-web", "mesh.deliver"): 1,
                        ("meshd", "mesh.handle"): 1})
        spans = await _spans(jaeger, trace_id, want)
        sends = [s for s in spans if s["operationName"] == "mesh.send"]  # two, by the wait
        by_id = {s["spanID"]: s for s in spans}

        def ancestors(span: dict) -> list[str]:
            names = []
            while span["references"]:
                ref = next((r for r in span["references"] if r["refType"] == "CHILD_OF"), None)
                if ref is None or ref["spanID"] not in by_id:
                    break
                span = by_id[ref["spanID"]]
                names.append(span["operationName"])
            return names

        assert any("mesh.handle" in ancestors(s) for s in sends), "the reply joins the trace"
        assert all(s["traceID"] == trace_id for s in spans)
    finally:
        if daemon is not None:
            daemon.signal(15)
            await daemon.wait(timeout=20)
        for proc in procs:
            proc.stop_quietly()


async def test_a_message_its_sampler_dropped_travels_with_its_trace_but_leaves_no_span(
        migrated: Settings, jaeger: Jaeger) -> None:
    """A sender's unsampled traceparent (flags 00) is kept with the message — the
    recipient sees its trace id — but no process exports a span for it. A sampled
    message sent right after it is the marker: each process exports in order, so
    once its spans are all in Jaeger, any of the first one's would be too."""
    iso = await isolated_settings(migrated)
    env = _otel(jaeger)
    procs = [MeshProcess(kind, iso, os_env=env) for kind in ("web", "outbox", "push")]
    for proc in procs:
        await proc.start()
    try:
        async with MeshFactory.connect(procs[0].url) as mesh:
            a, b = await mesh.pair()
            dropped, marker = secrets.token_hex(16), secrets.token_hex(16)
            for trace_id, flags in ((dropped, "00"), (marker, "01")):
                ok(await a.http.post("/v1/mesh/tasks", json={
                    "to_agent_id": b.agent_id, "message": text_message(flags)},
                    headers={**a.headers,
                             "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-{flags}"}),
                   201)
            events: list[dict] = []
            after = 0
            async with asyncio.timeout(60):
                while len(events) < 2:
                    page = await b.inbox(wait=5, after=after)
                    events += [e for e in page["events"] if e["type"] == "task.created"]
                    after = page["events"][-1]["seq"] if page["events"] else after
        carried = [e.get("traceparent", "").split("-") for e in events]
        assert [(parts[1], parts[3]) for parts in carried] == [(dropped, "00"), (marker, "01")]
        await _spans(jaeger, marker, {("agent-mesh-web", "mesh.send"),
                                      ("agent-mesh-outbox", "mesh.relay"),
                                      ("agent-mesh-push", "mesh.push"),
                                      ("agent-mesh-web", "mesh.deliver")})
        assert await asyncio.to_thread(jaeger.trace, dropped) == []
    finally:
        for proc in procs:
            proc.stop_quietly()


async def test_a2a_in_nats_between_webhook_and_long_poll_out_is_one_trace(
        migrated: Settings, jaeger: Jaeger) -> None:
    """The other edges: a task sent over A2A (JSON-RPC, traceparent header), the NATS
    bus, delivered by webhook (the header) and read by long-poll."""
    if not migrated.nats_url:
        pytest.skip("no nats-server here (CI has one)")
    iso = await isolated_settings(migrated, bus="nats", webhook_allow_private=True,
                                  webhook_sweep_seconds=0.5)
    env = _otel(jaeger)
    procs = [MeshProcess(kind, iso, os_env=env) for kind in ("web", "outbox", "push", "webhook")]
    for proc in procs:
        await proc.start()
    rx = Receiver()
    await rx.start()
    try:
        async with MeshFactory.connect(procs[0].url) as mesh:
            a = await (await mesh.owner()).agent("a")
            owner_b = await mesh.owner()
            b = await owner_b.agent("b")
            await mesh.befriend(a, b)
            created = ok(await owner_b.http.put(f"/v1/agents/{b.agent_id}/webhook",
                                                json={"url": rx.url}, headers=owner_b.headers))
            rx.secret = created["secret"]
            trace_id = secrets.token_hex(16)
            parent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
            message = {"messageId": secrets.token_hex(8), "role": "ROLE_USER",
                       "parts": [{"text": "over A2A"}]}
            answer = await a.http.post(f"/a2a/{b.agent_id}", json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": message, "configuration": {"returnImmediately": True}}},
                headers={**a.headers, "A2A-Version": "1.0", "traceparent": parent})
            assert "result" in answer.json(), answer.text
            await rx.wait(lambda r: any(x.headers.get("traceparent", "").split("-")[1:2]
                                        == [trace_id] for x in r.received))
            page = await b.inbox(wait=0)
            assert any(e.get("traceparent", "").split("-")[1:2] == [trace_id]
                       for e in page["events"])
            # A remote MCP tool call names its trace in _meta.traceparent.
            mcp_trace = secrets.token_hex(16)
            call = await a.http.post("/mcp", json={
                "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                    "name": "mesh_send_message",
                    "arguments": {"to_agent_id": b.agent_id, "text": "over MCP"},
                    "_meta": {"traceparent": f"00-{mcp_trace}-{secrets.token_hex(8)}-01",
                              "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                              "io.modelcontextprotocol/clientCapabilities": {}}}},
                headers={"Authorization": f"Bearer {a.api_key}", "MCP-Protocol-Version":
                         "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "mesh_send_message",
                         "Accept": "application/json, text/event-stream"})
            assert call.status_code == 200 and "error" not in call.json(), call.text
        want = {("agent-mesh-web", "mesh.send"), ("agent-mesh-outbox", "mesh.relay"),
                ("agent-mesh-push", "mesh.push"), ("agent-mesh-webhook", "mesh.deliver"),
                ("agent-mesh-web", "mesh.deliver")}
        spans = await _spans(jaeger, trace_id, want)
        how = {s["service"]: {t["value"] for t in s["tags"] if t["key"] == "mesh.delivery"}
               for s in spans if s["operationName"] == "mesh.deliver"}
        assert how["agent-mesh-webhook"] == {"webhook"} and "long-poll" in how["agent-mesh-web"]
        await _spans(jaeger, mcp_trace, {("agent-mesh-web", "mesh.mcp.call"),
                                         ("agent-mesh-web", "mesh.transaction"),
                                         ("agent-mesh-outbox", "mesh.relay"),
                                         ("agent-mesh-webhook", "mesh.deliver")})
    finally:
        await rx.stop()
        for proc in procs:
            proc.stop_quietly()


async def test_a_mesh_agent_run_puts_its_turns_and_cost_on_mesh_handle(
        migrated: Settings, jaeger: Jaeger, tmp_path: Path) -> None:
    from tests.meshd.agent_support import DONE, agent_proc, runs, started
    from tests.support.model_server import ModelServer, Reply

    def answer(req: object) -> Reply:
        reply = Reply(text="It is 42.")
        reply.input_tokens, reply.output_tokens = 20_000, 3_000  # priced by the CLI
        return reply

    iso = await isolated_settings(migrated)
    env = _otel(jaeger)
    procs = [MeshProcess(kind, iso, os_env=env) for kind in ("web", "outbox", "push")]
    for proc in procs:
        await proc.start()
    agent: Proc | None = None
    try:
        with ModelServer(answer) as model:
            async with MeshFactory.connect(procs[0].url) as mesh:
                a, b = await mesh.pair()
                agent = await started(agent_proc(procs[0].url, b, tmp_path, "b", model, env=env))
                trace_id = secrets.token_hex(16)
                ok(await a.http.post("/v1/mesh/tasks", json={
                    "to_agent_id": b.agent_id, "message": text_message("6*7?")},
                    headers={**a.headers, "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}),
                   201)
                await agent.wait_log(DONE)
        [rec] = runs(tmp_path, "b")
        spans = await _spans(jaeger, trace_id, {("meshd", "mesh.handle")})
        [handle] = [s for s in spans if s["operationName"] == "mesh.handle"]
        tags = {t["key"]: t["value"] for t in handle["tags"]}
        assert (tags["mesh.run.outcome"], tags["mesh.run.turns"]) == ("ok", rec["turns"])
        assert tags["mesh.run.cost_usd"] == rec["cost_usd"] > 0.01
    finally:
        if agent is not None:
            await agent.stop()
        for proc in procs:
            proc.stop_quietly()


def test_tracing_off_creates_no_exporter_and_keeps_the_event_bytes(
        migrated: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime

    from app.main import create_app

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    create_app(migrated)
    assert tracing.enabled is False and tracing.exporters_created == 0
    assert tracing.current_traceparent() is None
    row = {"seq": 1, "event_id": "e-1", "type": "task.created", "task_id": None,
           "context_id": None, "from_agent_id": None, "payload": {},
           "created_at": datetime(2026, 1, 1, tzinfo=UTC), "traceparent": None}
    assert b"traceparent" not in encode_event(row)
