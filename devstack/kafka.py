"""Single-node Apache Kafka (KRaft) from the official jars on Maven Central.

The broker's shell scripts only wrap two Java main classes, so we resolve
``org.apache.kafka:kafka_2.13`` with Maven once into a cache folder and run
``kafka.tools.StorageTool`` / ``kafka.Kafka`` with ``java -cp``.
"""

from __future__ import annotations

import base64
import fcntl
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from devstack.process import ServiceProcess

KAFKA_VERSION = os.environ.get("MESH_KAFKA_VERSION", "4.1.1")
JARS_CACHE = Path(os.environ.get("MESH_KAFKA_JARS_DIR",
                                 Path.home() / ".cache" / "agent-mesh" / f"kafka-{KAFKA_VERSION}"))

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>agentmesh.local</groupId><artifactId>kafka-runtime</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{version}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId>
      <version>2.24.3</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId>
      <version>2.0.17</version></dependency>
  </dependencies>
</project>
"""

_LOG4J = """status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka.server.KafkaRaftServer
logger.kafka.level = info
"""


def java_available() -> bool:
    return shutil.which("java") is not None and shutil.which("mvn") is not None


def ensure_jars(cache: Path = JARS_CACHE) -> Path:
    """Resolve the broker jars with Maven unless the cache already holds them."""
    libs = cache / "libs"
    if (cache / ".complete").exists():
        return libs
    if not java_available():
        raise RuntimeError("Kafka needs `java` (17+) and `mvn` on PATH")
    cache.mkdir(parents=True, exist_ok=True)
    # Several test workers may start at once: one resolves, the others wait for it.
    with open(cache / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (cache / ".complete").exists():
            return libs
        return _resolve(cache, libs)


def _resolve(cache: Path, libs: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_POM.format(version=KAFKA_VERSION))
        staging = Path(tmp) / "libs"
        result = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
             f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"resolving Kafka {KAFKA_VERSION} with Maven failed:\n"
                               f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
        if libs.exists():
            shutil.rmtree(libs)
        shutil.move(str(staging), libs)
    (cache / ".complete").write_text(KAFKA_VERSION)
    return libs


def _cluster_id() -> str:
    # Kafka wants 16 bytes in URL-safe base64; a leading '-' would read as an option.
    return "A" + base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")[1:]


# The broker's JVM options, under the names Kafka's own start scripts read. The
# defaults suit a small machine that starts brokers often (tests, `make run`): a
# serial collector (no GC threads competing for two cores) and the C1 compiler only
# (a short warm-up); a long-running broker may set KAFKA_JVM_PERFORMANCE_OPTS.
HEAP_OPTS = "-Xms256m -Xmx768m"
JVM_PERFORMANCE_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


class Kafka(ServiceProcess):
    name = "kafka"

    def __init__(self, data_dir: Path, port: int, controller_port: int,
                 jmx_port: int | None = None, env: Mapping[str, str] | None = None) -> None:
        super().__init__(port, data_dir.parent / "kafka.log")
        self.data_dir = data_dir
        self.controller_port = controller_port
        env = env if env is not None else os.environ
        self.jvm_options = [*(env.get("KAFKA_HEAP_OPTS") or HEAP_OPTS).split(),
                            *(env.get("KAFKA_JVM_PERFORMANCE_OPTS") or JVM_PERFORMANCE_OPTS).split()]
        # A JMX port on 127.0.0.1 (no auth): only the bench opens one, to read the
        # broker's request counters (ADR 024).
        self.jmx_port = jmx_port
        self.libs: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "server.properties"

    def _write_config(self) -> None:
        logs = self.data_dir / "logs"
        self.config_path.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={logs}",
            "num.partitions=4",
            "auto.create.topics.enable=true",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "log.retention.hours=24",
            "",
        ]))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J)

    def start(self, timeout: float = 90.0) -> None:
        self.libs = ensure_jars()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        if not (self.data_dir / "logs" / "meta.properties").exists():
            result = subprocess.run(
                ["java", "-cp", f"{self.libs}/*", "kafka.tools.StorageTool", "format",
                 "-t", _cluster_id(), "-c", str(self.config_path), "--ignore-formatted"],
                capture_output=True, text=True,
            )
            if result.returncode != 0:
                raise RuntimeError(f"formatting the Kafka storage in {self.data_dir} failed "
                                   f"(exit {result.returncode}): "
                                   f"{(result.stderr or result.stdout).strip()[-2000:]}")
        super().start(timeout)

    def jmx_options(self) -> list[str]:
        if self.jmx_port is None:
            return []
        return [f"-Dcom.sun.management.jmxremote.port={self.jmx_port}",
                f"-Dcom.sun.management.jmxremote.rmi.port={self.jmx_port}",
                "-Dcom.sun.management.jmxremote.host=127.0.0.1",
                "-Djava.rmi.server.hostname=127.0.0.1",
                "-Dcom.sun.management.jmxremote.authenticate=false",
                "-Dcom.sun.management.jmxremote.ssl=false"]

    def command(self) -> Sequence[str]:
        assert self.libs is not None
        return [
            "java", *self.jvm_options,
            *self.jmx_options(),
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp", f"{self.libs}/*", "kafka.Kafka", str(self.config_path),
        ]
