"""Jaeger for traces: the official ``jaeger`` program (v2), built from the Go
module proxy into ``.mesh/tools/`` once, like Kafka's jars from Maven.

Run all-in-one with in-memory storage: OTLP/HTTP in (the mesh's exporters
point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at it), the UI and its query API out.
Ports are ours to choose (a config file), so tests run it on free ports.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devstack.process import ServiceProcess, free_port

JAEGER_MODULE = "github.com/jaegertracing/jaeger"
JAEGER_VERSION = "v1.75.0"
JAEGER_TOOLS = Path(__file__).resolve().parents[1] / ".mesh" / "tools"
MISSING_GO = "needs the Go toolchain (`go` on PATH) to build Jaeger from the module proxy"

_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def binary_path(tools: Path = JAEGER_TOOLS) -> Path:
    return tools / f"jaeger-{JAEGER_VERSION}"


def ensure_binary(tools: Path = JAEGER_TOOLS) -> Path:
    """The built ``jaeger`` program, building it first when it is not there.
    Jaeger's own go.mod has replace directives, so it is built as a tool of a
    throwaway module (``go get -tool``), not with ``go install``."""
    target = binary_path(tools)
    if target.exists():
        return target
    if shutil.which("go") is None:
        raise RuntimeError(f"Jaeger {MISSING_GO}")
    tools.mkdir(parents=True, exist_ok=True)
    # One build at a time (CI starts one in the background; a test that needs
    # the program meanwhile waits for it here instead of building it twice).
    with open(tools / ".jaeger-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            _build(target)
    return target


def _build(target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        steps = [["go", "mod", "init", "meshtools/jaeger"],
                 ["go", "get", "-tool", f"{JAEGER_MODULE}/cmd/jaeger@{JAEGER_VERSION}"],
                 # No symbol tables or DWARF: a smaller binary, a shorter link.
                 ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(target) + ".part",
                  f"{JAEGER_MODULE}/cmd/jaeger"]]
        for step in steps:
            done = subprocess.run(step, cwd=tmp, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"building Jaeger {JAEGER_VERSION} failed at "
                                   f"{' '.join(step)}:\n{done.stderr[-3000:]}")
    Path(str(target) + ".part").rename(target)


class Jaeger(ServiceProcess):
    name = "jaeger"

    def __init__(self, data_dir: Path, query_port: int, otlp_port: int | None = None) -> None:
        super().__init__(query_port, data_dir.parent / "jaeger.log")
        self.data_dir = data_dir
        self.otlp_port = otlp_port or free_port()
        self._health_port = free_port()
        self._grpc_port = free_port()

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def otlp_endpoint(self) -> str:
        """For ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the SDK appends /v1/traces)."""
        return f"http://127.0.0.1:{self.otlp_port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "jaeger.yaml"

    def start(self, timeout: float = 60.0) -> None:
        self.binary = ensure_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(_CONFIG.format(query=self.port, query_grpc=self._grpc_port,
                                                   health=self._health_port,
                                                   otlp=self.otlp_port))
        super().start(timeout)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self._health_port}/status",
                                        timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def command(self) -> Sequence[str]:
        return [str(self.binary), "--config", str(self.config_path)]

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans Jaeger holds for ``trace_id`` (its query API), [] if none yet."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/api/traces/{trace_id}", timeout=5) as r:
                body = json.load(r)
        except OSError:
            return []
        data = body.get("data") or []
        if not data:
            return []
        processes = data[0].get("processes", {})
        return [{**span, "service": processes.get(span["processID"], {}).get("serviceName")}
                for span in data[0].get("spans", [])]


if __name__ == "__main__":  # python -m devstack.jaeger: build it ahead of time (CI)
    print(ensure_binary())
