"""The A2A request handler, backed by the mesh's task and inbox store.

Not the SDK's DefaultRequestHandler: that one runs an AgentExecutor in this
process and keeps events in an in-memory queue, so the serving agent must be
online and a dropped stream loses what it missed. Here every A2A call is a
mesh service call (app.services.task_creation, app.services.tasks) — the same
unit of work, permissions, idempotency and ordering as the HTTP API — and a
stream is read from the caller's durable inbox (ADR 017).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import (
    RequestHandler,
    validate_request_params,
)
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import validate_page_size

from app.a2a import blocking, call, card, mapping, push
from app.a2a.call import MeshCall
from app.a2a.errors import a2a_errors
from app.a2a.follow import follow
from app.domain.schemas import MessageIn, StatusChange, TaskCreate
from app.services import task_creation, tasks
from app.store import agents as agents_store
from app.store import inbox as inbox_store
from app.web.inputs import check_storable

DEFAULT_PAGE = 50


def _check_same_context(msg: Message, task: dict[str, Any]) -> None:
    """A follow-up may name its context only as its task's (A2A: a contextId
    that differs from the task's is refused)."""
    if msg.context_id and msg.context_id != task["context_id"]:
        raise InvalidParamsError(
            message=f"contextId '{msg.context_id[:200]}' is not the context of task "
                    f"'{task['task_id']}' ('{task['context_id']}'); send the task's contextId "
                    "or none")


def _history_length(request: Any) -> int | None:
    """The request's historyLength (None when unset); negative is invalid."""
    if not request.HasField("history_length"):
        return None
    if request.history_length < 0:
        raise InvalidParamsError(message=f"historyLength must be 0 or more (0: no history; "
                                         f"unset: all), got {request.history_length}")
    return int(request.history_length)


class MeshRequestHandler(RequestHandler):
    async def _task_json(self, c: MeshCall, task_id: str) -> dict[str, Any]:
        """The caller's task with the endpoint's agent, or task-not-found — the same
        answer for "absent", "not yours" and "with another agent"."""
        with a2a_errors():
            detail = (await tasks.get_task(c.state.pool, c.me, task_id)).model_dump(mode="json")
        if c.target not in (detail["initiator"], detail["serving_agent"]):
            raise TaskNotFoundError(message=f"no task '{task_id}' between you and '{c.target}'")
        return detail

    async def _send(self, c: MeshCall, params: SendMessageRequest) -> str:
        """The message as a mesh write: a new task, or a message on the caller's
        task. Idempotent by the A2A messageId (the mesh message_id)."""
        s, msg = c.state, params.message
        body = mapping.message_from_a2a(msg)
        config = params.configuration.task_push_notification_config \
            if params.configuration.HasField("task_push_notification_config") else None
        with a2a_errors(closed=UnsupportedOperationError):
            check_storable(body)
            if msg.task_id:
                task = await self._task_json(c, msg.task_id)
                _check_same_context(msg, task)
                checked = since = None
                if config is not None:  # checked before the write; from the write on
                    checked = await push.check_config(s, config, msg.task_id)
                    since = await inbox_store.last_task_seq(s.pool, c.me.agent_id, msg.task_id)
                await tasks.append_message(s, c.me, msg.task_id, MessageIn.model_validate(body))
                if checked is not None and since is not None:
                    await push.put(s, c.me.agent_id, msg.task_id, checked, since)
                return msg.task_id
            create = TaskCreate.model_validate(
                {"to_agent_id": c.target, "message": body, "context_id": msg.context_id or None})
            # A new task's id is the mesh's: a config's id defaults to it afterwards.
            checked = None if config is None else await push.check_config(s, config, "-")
            created, _ = await task_creation.create_task(s, c.me, create)
            if checked is not None and config is not None:
                checked = dataclasses.replace(checked, config_id=push.config_id_of(
                    config.id, created.task_id))
                await push.put(s, c.me.agent_id, created.task_id, checked, 0)
            return created.task_id

    @validate_request_params  # the spec's required fields (messageId, parts, …)
    async def on_message_send(self, params: SendMessageRequest,
                              context: ServerCallContext) -> Task | Message:
        # An answer, not a receipt: the task once it settles, within the gateway's
        # window and the caller's share of waits (ADR 036); then, or with
        # returnImmediately, the task as it is (the serving agent may be offline).
        c = call.of(context)
        history = _history_length(params.configuration)
        seconds = c.state.settings.a2a_blocking_seconds
        if params.configuration.return_immediately or seconds <= 0:
            task_id = await self._send(c, params)
            return mapping.task(await self._task_json(c, task_id), history_length=history)
        # The slot before the write: whoever sees the message knows its wait is counted.
        with blocking.SLOTS.take(c.me.agent_id) as waiting:
            follow_up = params.message.task_id
            since = 0
            if waiting and follow_up:
                since = await inbox_store.last_task_seq(c.state.pool, c.me.agent_id, follow_up)
            task_id = await self._send(c, params)
            if not waiting:
                detail = await self._task_json(c, task_id)
            else:
                detail = await blocking.until_settled(c, task_id, self._task_json, since,
                                                      seconds)
        return mapping.task(detail, history_length=history)

    @validate_request_params
    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event]:
        c = call.of(context)
        task_id = await self._send(c, params)
        async for event in follow(c, task_id, self._task_json):
            yield event

    @validate_request_params
    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Event]:
        c = call.of(context)
        if c.resume_after is None:
            detail = await self._task_json(c, params.id)
            if mapping.is_terminal(detail["state"]):
                # The spec's answer; a resume (Last-Event-ID) still replays what was missed.
                raise UnsupportedOperationError(
                    message=f"task '{params.id}' is {detail['state']}: nothing more will "
                            "happen; read it with GetTask, or resume with Last-Event-ID")
        async for event in follow(c, params.id, self._task_json):
            yield event

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        c = call.of(context)
        history = _history_length(params)
        return mapping.task(await self._task_json(c, params.id), history_length=history)

    @validate_request_params
    async def on_list_tasks(self, params: ListTasksRequest,
                            context: ServerCallContext) -> ListTasksResponse:
        c = call.of(context)
        _history_length(params)
        if params.HasField("page_size"):
            validate_page_size(params.page_size)  # the spec's 1…100, the SDK's wording
        size = params.page_size or DEFAULT_PAGE
        with a2a_errors():
            page = await tasks.list_tasks(
                c.state.pool, c.me, state=mapping.state_from_a2a(params.status),
                context_id=params.context_id or None, cursor=params.page_token or None,
                limit=size, peer=c.target)
        found = [mapping.task(t.model_dump(mode="json")) for t in page.tasks]
        return ListTasksResponse(tasks=found, next_page_token=page.next_cursor or "",
                                 page_size=size, total_size=len(found))

    @validate_request_params
    async def on_cancel_task(self, params: CancelTaskRequest,
                             context: ServerCallContext) -> Task:
        c = call.of(context)
        s = c.state
        detail = await self._task_json(c, params.id)
        if mapping.is_terminal(detail["state"]):
            # A2A's answer even to a repeat of our own cancel (the mesh API's is a 200).
            raise TaskNotCancelableError(message=f"task '{params.id}' is already "
                                                 f"{detail['state']}")
        with a2a_errors(conflict=TaskNotCancelableError):
            await tasks.change_status(s, c.me, params.id, StatusChange(state="canceled"))
        return mapping.task(await self._task_json(c, params.id))

    async def on_get_extended_agent_card(self, params: GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> AgentCard:
        c = call.of(context)
        row = await agents_store.get(c.state.pool, c.target)
        if row is None:  # deleted since the route checked it
            raise InvalidRequestError(message=f"unknown agent '{c.target}'")
        return card.full_card(c.base_url, row, card.VERSION)

    # Push notifications (ADR 039): a config is the caller's, on a task it can see
    # (GetTask's check); the webhook process delivers the task's events to it.
    @validate_request_params
    async def on_create_task_push_notification_config(
            self, params: TaskPushNotificationConfig,
            context: ServerCallContext) -> TaskPushNotificationConfig:
        c = call.of(context)
        await self._task_json(c, params.task_id)
        checked = await push.check_config(c.state, params, params.task_id)
        # From now on: what the task's stream would show after this point.
        since = await inbox_store.last_task_seq(c.state.pool, c.me.agent_id, params.task_id)
        return await push.put(c.state, c.me.agent_id, params.task_id, checked, since)

    @validate_request_params
    async def on_get_task_push_notification_config(
            self, params: GetTaskPushNotificationConfigRequest,
            context: ServerCallContext) -> TaskPushNotificationConfig:
        c = call.of(context)
        await self._task_json(c, params.task_id)
        return await push.get(c.state, c.me.agent_id, params.task_id, params.id)

    @validate_request_params
    async def on_list_task_push_notification_configs(
            self, params: ListTaskPushNotificationConfigsRequest,
            context: ServerCallContext) -> ListTaskPushNotificationConfigsResponse:
        c = call.of(context)
        if params.page_size:  # 0: unset (the field has no presence)
            validate_page_size(params.page_size)
        await self._task_json(c, params.task_id)
        configs, next_token = await push.page(c.state, c.me.agent_id, params.task_id,
                                              params.page_size or push.DEFAULT_PAGE,
                                              params.page_token)
        return ListTaskPushNotificationConfigsResponse(configs=configs,
                                                       next_page_token=next_token)

    @validate_request_params
    async def on_delete_task_push_notification_config(
            self, params: DeleteTaskPushNotificationConfigRequest,
            context: ServerCallContext) -> None:
        c = call.of(context)
        await self._task_json(c, params.task_id)
        await push.delete(c.state, c.me.agent_id, params.task_id, params.id)
