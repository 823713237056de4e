"""docs/operations.md cannot rot: every metric, setting, process, cron job and
admin route it names exists, and everything that exists is named there."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase
from starlette.routing import Route

from app.main import api_routes
from app.platform import metrics
from app.platform.settings import Settings
from cron.worker import WorkerSettings

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "operations.md").read_text()
# Read by devstack (make run), not by the mesh's own settings.
DEVSTACK_VARS = {"MESH_STOP_TIMEOUT", "MESH_TRACING"}


def exposed_names() -> set[str]:
    names = set()
    for obj in vars(metrics).values():
        if isinstance(obj, MetricWrapperBase):
            family = obj.describe()[0]
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_every_metric_is_documented() -> None:
    missing = {n for n in exposed_names() if f"`{n}" not in DOC}
    assert not missing, f"metrics missing from docs/operations.md: {sorted(missing)}"


def test_every_documented_setting_exists() -> None:
    fields = {f"MESH_{name.upper()}" for name in Settings.model_fields}
    named = set(re.findall(r"\bMESH_[A-Z0-9_]+\b", DOC))
    assert named - fields - DEVSTACK_VARS == set()
    # The production essentials are all there.
    assert {"MESH_DATABASE_URL", "MESH_REDIS_URL", "MESH_KAFKA_BOOTSTRAP", "MESH_JWT_SECRET",
            "MESH_ADMIN_USERNAMES", "MESH_SENTRY_DSN", "MESH_METRICS_PORT"} <= named


def test_every_procfile_process_and_cron_job_is_described() -> None:
    for line in (REPO / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name = line.split(":", 1)[0]
            assert f"| `{name}` |" in DOC, name
    for job in WorkerSettings.cron_jobs:
        assert f"| `{job.name.removeprefix('cron:')}` |" in DOC, job.name


def test_documented_admin_routes_exist() -> None:
    templates = {(m, r.path) for r in api_routes() if isinstance(r, Route)
                 for m in (r.methods or ())}
    calls = re.findall(r"curl (?:-X (\w+) )?.*?\$MESH(/v1/admin/\S+)", DOC)
    assert len(calls) == 4
    for method, path in calls:
        template = re.sub(r"/\d+/", "/{row_id}/", path)
        assert (method or "GET", template) in templates, (method, path)
