"""A2A push-notification configs: checked, stored, announced (ADR 039).

A config belongs to the agent that registered it and to one task that agent can
see (the same check as GetTask); what it receives is that task's events in the
agent's own inbox — what SubscribeToTask would stream it — POSTed by the webhook
process (workers.webhook, channel ``push``) with the webhook rules: in order,
once per 2xx, retried with backoff behind a breaker, SSRF-guarded at
registration and at every connect. The token and the credentials are sealed at
rest and write-only: Get and List never show them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from a2a.types.a2a_pb2 import AuthenticationInfo, TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from asyncpg import Record
from redis.exceptions import RedisError

from app.delivery import protocol as delivery
from app.delivery.webhook_signing import Sealer
from app.platform.webhook_target import TargetRefused, check
from app.store import push_configs as push_store
from app.web.state import State

log = logging.getLogger("mesh.a2a.push")

# Per agent and task: a client needs one or two, a loop creating thousands is abuse.
MAX_PER_TASK = 10
ID_MAX = 128
TOKEN_MAX = 1024
CREDENTIALS_MAX = 4096
DEFAULT_PAGE = 50
# RFC 9110 token characters: an auth scheme is one.
_SCHEME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
# A header value sent as given: visible ASCII and spaces, nothing that ends a line.
_HEADER_VALUE = re.compile(r"^[\x20-\x7e]*$")


@dataclass(frozen=True)
class Checked:
    """A config that passed every check, its secrets sealed."""

    config_id: str
    url: str
    token: str | None
    scheme: str | None
    credentials: str | None


def _header_value(name: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise InvalidParamsError(message=f"{name} is {len(value)} characters; at most {limit}")
    if not _HEADER_VALUE.match(value):
        raise InvalidParamsError(message=f"{name} is sent as an HTTP header value: printable "
                                         "ASCII only (no line breaks or control characters)")


def config_id_of(raw: str, task_id: str) -> str:
    """The config's id: as given, or the task's id (the SDK's default)."""
    config_id = raw or task_id
    if len(config_id) > ID_MAX or not _HEADER_VALUE.match(config_id):
        raise InvalidParamsError(message=f"a push config id is 1 to {ID_MAX} printable ASCII "
                                         "characters")
    return config_id


async def check_config(state: State, config: TaskPushNotificationConfig,
                       task_id: str) -> Checked:
    """Everything about a config that does not need the store; InvalidParams
    naming what is wrong (never a secret) otherwise."""
    if not config.url:
        raise InvalidParamsError(message="a push config needs a url (http or https)")
    try:
        await check(config.url, allow_private=state.settings.webhook_allow_private)
    except TargetRefused as exc:
        raise InvalidParamsError(message=f"push url refused: {exc}") from None
    sealer = Sealer.from_settings(state.settings)
    token = config.token or None
    if token is not None:
        _header_value("token", token, TOKEN_MAX)
    scheme = credentials = None
    if config.HasField("authentication"):
        auth = config.authentication
        if not _SCHEME.match(auth.scheme):
            raise InvalidParamsError(message="authentication.scheme must be an HTTP auth scheme "
                                             "(e.g. 'Bearer', 'Basic')")
        if not auth.credentials:
            raise InvalidParamsError(message="authentication.credentials is required: they are "
                                             "sent as 'Authorization: <scheme> <credentials>'")
        _header_value("authentication.credentials", auth.credentials, CREDENTIALS_MAX)
        scheme, credentials = auth.scheme, sealer.seal(auth.credentials)
    return Checked(config_id_of(config.id, task_id), config.url,
                   None if token is None else sealer.seal(token), scheme, credentials)


def as_a2a(row: Record) -> TaskPushNotificationConfig:
    out = TaskPushNotificationConfig(id=row["config_id"], task_id=row["task_id"], url=row["url"])
    if row["auth_scheme"]:
        out.authentication.CopyFrom(AuthenticationInfo(scheme=row["auth_scheme"]))
    return out


async def put(state: State, agent_id: str, task_id: str, checked: Checked,
              after_seq: int) -> TaskPushNotificationConfig:
    """Store it (its deliveries start after ``after_seq`` in the agent's inbox)
    and wake the webhook processes."""
    row = await push_store.put(state.pool, agent_id, task_id, checked.config_id, checked.url,
                               token=checked.token, auth_scheme=checked.scheme,
                               auth_credentials=checked.credentials, after_seq=after_seq,
                               limit=MAX_PER_TASK)
    if row is None:
        raise InvalidParamsError(message=f"task '{task_id}' has {MAX_PER_TASK} push configs of "
                                         "yours already; delete one or reuse its id")
    try:
        await state.redis.publish(delivery.NOTIFY_CHANNEL, delivery.push_notice(agent_id))
    except (RedisError, OSError) as exc:  # the webhook process's sweep finds it anyway
        log.warning("could not announce a push config of %s (%s)", agent_id, exc)
    return as_a2a(row)


def _missing(task_id: str, config_id: str) -> TaskNotFoundError:
    return TaskNotFoundError(message=f"task '{task_id}' has no push config '{config_id[:200]}' "
                                     "of yours")


async def get(state: State, agent_id: str, task_id: str,
              config_id: str) -> TaskPushNotificationConfig:
    row = await push_store.get(state.pool, agent_id, task_id, config_id_of(config_id, task_id))
    if row is None:
        raise _missing(task_id, config_id or task_id)
    return as_a2a(row)


async def page(state: State, agent_id: str, task_id: str, size: int,
               token: str) -> tuple[list[TaskPushNotificationConfig], str]:
    rows = await push_store.list_for(state.pool, agent_id, task_id, token, size)
    configs = [as_a2a(r) for r in rows]
    return configs, (configs[-1].id if len(configs) == size else "")


async def delete(state: State, agent_id: str, task_id: str, config_id: str) -> None:
    config_id = config_id_of(config_id, task_id)
    if not await push_store.delete(state.pool, agent_id, task_id, config_id):
        raise _missing(task_id, config_id)
