"""Speaking to a group: one transaction writes every other member's
``group.message`` inbox event, each with that member's next seq."""

from __future__ import annotations

from datetime import UTC, datetime

from app.domain import ids
from app.domain.schemas import GroupMessageIn, dump_parts
from app.platform.errors import forbidden, not_found
from app.responses import GroupMessageOut
from app.services.mesh import Mesh
from app.services.principals import Agent
from app.store import social as social_store
from app.store import teams as teams_store
from app.store.writes import NewEvent, writes

# Recipients per append statement: a 10 000-member group is 20 statements in one
# transaction, not 10 000 round trips, and no statement carries unbounded arrays.
GROUP_BATCH = 500


def batches(items: list[str], size: int) -> list[list[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


async def post(mesh: Mesh, me: Agent, group_id: str, body: GroupMessageIn, *,
               batch: int = GROUP_BATCH) -> GroupMessageOut:
    message_id = ids.new_message_id(me.agent_id)
    out = GroupMessageOut(group_id=group_id, message_id=message_id, sender=me.agent_id,
                          parts=dump_parts(body.parts), metadata=body.metadata, recipients=0,
                          created_at=datetime.now(UTC))
    async with writes(mesh.pool, topic=mesh.settings.bus_topic, wakeup=mesh.wakeup) as tx:
        group = await social_store.get_group(tx.conn, group_id)
        if group is None:
            raise not_found(f"unknown group '{group_id}'")
        members = await teams_store.members_in_lock_order(tx.conn, group_id)
        if me.agent_id not in members:
            raise forbidden(f"'{me.agent_id}' is not a member of group '{group_id}'; only "
                            "members may post to it")
        message = out.wire()
        del message["recipients"]  # each member sees the message, not the fan-out count
        payload = {"group_id": group_id, "group_name": group["name"], "message": message}
        written = 0
        for chunk in batches([m for m in members if m != me.agent_id], batch):
            # A member deleted meanwhile simply gets nothing.
            written += len(await tx.append([
                NewEvent(agent_id=m, type="group.message", from_agent_id=me.agent_id,
                         payload=payload) for m in chunk], skip_missing=True))
    return out.model_copy(update={"recipients": written})
