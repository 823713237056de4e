"""What a devstack run is configured by: the environment, read once, and the
few things kept in the data folder across runs (the JWT secret)."""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from devstack.bus import BOOTSTRAP_VAR, NATS_URL_VAR, KafkaPolicy, NatsPolicy

REPO = Path(__file__).resolve().parents[1]
SERVICE_URL_VARS = {
    "postgres": "MESH_DATABASE_URL",
    "redis": "MESH_REDIS_URL",
    "kafka": BOOTSTRAP_VAR,
    "nats": NATS_URL_VAR,
}


@dataclass
class Options:
    data_dir: Path
    procfile: Path
    kafka_policy: KafkaPolicy = KafkaPolicy.FALLBACK
    nats_policy: NatsPolicy = NatsPolicy.OFF
    stop_timeout: float = 15.0
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    @classmethod
    def from_env(cls, *, want_kafka: bool = True) -> Options:
        env = dict(os.environ)
        return cls(
            data_dir=Path(env.get("MESH_DATA_DIR") or REPO / ".mesh").resolve(),
            procfile=Path(env.get("MESH_PROCFILE") or REPO / "Procfile").resolve(),
            kafka_policy=KafkaPolicy.FALLBACK if want_kafka else KafkaPolicy.OFF,
            nats_policy=NatsPolicy.for_run(env),
            stop_timeout=float(env.get("MESH_STOP_TIMEOUT", "15")),
            env=env,
        )


def ensure_jwt_secret(data_dir: Path, env: dict[str, str]) -> str:
    """MESH_JWT_SECRET from the environment, else one generated once and kept in
    ``<data>/jwt_secret`` (mode 0600), so tokens survive a restart."""
    if env.get("MESH_JWT_SECRET"):
        return env["MESH_JWT_SECRET"]
    path = data_dir / "jwt_secret"
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        path.chmod(0o600)
        secret = path.read_text().strip()
        if secret:
            return secret
        path.unlink()
        return ensure_jwt_secret(data_dir, env)
    with os.fdopen(fd, "w") as f:
        secret = secrets.token_urlsafe(48)
        f.write(secret + "\n")
    return secret


def redact(url: str) -> str:
    """A URL fit for printing: the password, if any, replaced by ***."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc}"))


def process_env(opts: Options, urls: dict[str, str], jwt_secret: str) -> dict[str, str]:
    """The environment every Procfile process gets: ours, plus the service URLs
    (and the bus choice), the JWT secret, and this virtualenv's bin/ first on PATH."""
    env = dict(opts.env)
    env.update(urls)
    if BOOTSTRAP_VAR not in urls:
        env.pop(BOOTSTRAP_VAR, None)
    env["MESH_JWT_SECRET"] = jwt_secret
    env.setdefault("PYTHONUNBUFFERED", "1")
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", os.defpath)])
    return env
