"""What the runtime does on the mesh when a policy says so (not the model: these are enforced).

Every write carries an id derived from the event, so a run repeated after a
crash posts nothing twice.
"""

from __future__ import annotations

import logging

from meshd.agent.policies.engine import Policies
from meshd.agent.policies.metrics import PolicyMetrics
from meshd.agent.tools import RunContext
from meshd.client import MeshClient
from meshd.daemon.retries import set_failed
from meshd.errors import MeshError
from meshd.models import Task

log = logging.getLogger("meshd.agent")


async def close_chit_chat(client: MeshClient, task: Task, message_id: str, metrics: PolicyMetrics) -> None:
    """Complete a task we serve whose last messages only exchanged acknowledgements."""
    note = "Closed by the runtime: the last messages only exchanged acknowledgements."
    try:
        if task.state in ("submitted", "input-required"):
            await client.set_status(task.task_id, "working")
        await client.set_status(task.task_id, "completed", note, message_id=message_id)
        metrics.inc("guard_chit_chat_closed", task.task_id)
    except MeshError as e:
        log.warning("could not close task %s after chit-chat: %s", task.task_id, e)


async def await_confirmation(run: RunContext, task: Task) -> None:
    """After a handshake run: the task waits in ``input-required``, whatever the model did."""
    client = run.client
    try:
        now = await client.get_task(task.task_id)
        if now.terminal or now.state == "input-required":
            return
        if now.state == "submitted":
            await client.set_status(task.task_id, "working")
        await client.set_status(
            task.task_id,
            "input-required",
            "Waiting for your confirmation of my understanding (above) before I start.",
            message_id=run.message_id(f"{run.event.event_id}/handshake-wait"),
        )
        log.info("task %s set to input-required (handshake)", task.task_id)
    except MeshError as e:
        log.warning("could not set task %s input-required for the handshake: %s", task.task_id, e)


async def count_failure(policies: Policies, run: RunContext, key: str, why: str) -> None:
    """Count a failed run; when it opens the context's breaker, fail the task and tell the owner."""
    if not policies.finished(key, ok=False):
        return
    n = policies.config.failed_runs
    note = (
        f"Circuit breaker: {n} runs in a row failed for context {key} (last: {why[:200]}). "
        "This agent runs no more for it until `mesh agent` restarts."
    )
    log.warning("%s", note)
    client, event = run.client, run.event
    try:
        if event.task_id:
            task = await client.get_task(event.task_id)
            if not task.terminal and task.serving_agent == run.me:
                await set_failed(client, task, note, message_id=run.message_id(f"{key}/breaker"))
    except MeshError as e:
        log.warning("could not fail task %s for the circuit breaker: %s", event.task_id, e)
    # The owner's human account (human@{owner}) hears of it as a task from its agent.
    owner = run.me.rpartition("@")[2]
    try:
        await client.send(f"human@{owner}", note, message_id=run.message_id(f"{key}/breaker-owner"))
    except MeshError as e:
        log.warning("could not tell the owner about the circuit breaker for %s: %s", key, e)
