"""The embedded services of ``make run`` / ``make services``, on fixed ports,
and the table that says what runs where."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from devstack.config import SERVICE_URL_VARS, Options, redact
from devstack.kafka import JARS_CACHE
from devstack.ports import ensure_free
from devstack.say import say
from devstack.stack import Ports, Stack


@dataclass
class Services:
    stack: Stack
    urls: dict[str, str]

    @property
    def rows(self) -> list[tuple[str, str, str]]:
        """(service, how, where) for each service."""
        s = self.stack
        rows = [
            ("postgres", "external" if s.postgres is None else "embedded",
             redact(self.urls["MESH_DATABASE_URL"])),
            ("redis", "external" if s.redis is None else "embedded",
             redact(self.urls["MESH_REDIS_URL"])),
        ]
        if s.bus is not None and s.bus.kind != "nats":
            rows.append(("kafka", s.bus.how, s.bus.where))
        if s.nats_how is not None:
            rows.append(("nats", s.nats_how, self.urls.get("MESH_NATS_URL", "")))
        if s.jaeger is not None:
            rows.append(("jaeger", "embedded", f"{s.jaeger.ui_url} (traces UI)"))
        return rows

    def describe(self, data_dir: Path) -> str:
        lines = [f"devstack: data in {data_dir} (logs: {data_dir}/*.log)"]
        for name, how, where in self.rows:
            lines.append(f"  {name:<9} {how:<9} {where}")
        bus = self.stack.bus
        lines.append(f"  bus: {bus.note}" if bus is not None and bus.note
                     else "  bus: Kafka topic inbox.events")
        return "\n".join(lines)


def start_services(opts: Options) -> Services:
    """Start the embedded services the environment does not replace. On any
    failure or interrupt, whatever was started is stopped again."""
    ports = Ports.fixed()
    stack = Stack(opts.data_dir, ports, kafka_policy=opts.kafka_policy,
                  nats_policy=opts.nats_policy, env=opts.env)
    plan, nats_plan = stack.plan(), stack.plan_nats()
    wanted = {"kafka": plan.start_kafka, "nats": nats_plan.start}
    embedded = [name for name, var in SERVICE_URL_VARS.items()
                if not opts.env.get(var) and wanted.get(name, True)]
    for name in embedded:
        ensure_free(getattr(ports, name), f"the embedded {name}",
                    f"set {SERVICE_URL_VARS[name]} to use that server")
    if embedded:
        hint = (" (first run: resolving the Kafka jars with Maven, this can take a minute)"
                if plan.start_kafka and not (JARS_CACHE / ".complete").exists() else "")
        say(f"devstack: starting embedded {', '.join(embedded)}{hint} ...")
    return Services(stack, stack.start())
