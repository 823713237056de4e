"""Publications: an owner publishes one of their agents as a template; any
signed-in owner finds it (words, tag) and forks it into an agent of their own.

A publication is a snapshot taken at publish time — display name, description,
skills, instructions — and never a view of the agent: keys, friends, tasks,
inbox, webhook and presence stay behind, and later edits of the agent do not
reach it. Readers see the publisher's username as ``author`` and nothing else
of theirs. A publication someone else published is "not found" to a delete, as
an agent of someone else's is to a publish."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import asyncpg

from app.domain import cursors, ids
from app.domain.schemas import PublicationCreate
from app.platform.errors import Problem, conflict, not_found
from app.platform.settings import Settings
from app.responses import AgentOut, PublicationOut, PublicationPage
from app.services.mesh import Mesh
from app.services.principals import Owner
from app.store import agents as agents_store
from app.store import publications as store

# k:<rank>:<seq>:<search>: the keyset of the last row and a digest of the search
# it belongs to. The rank is a float's repr (it round-trips exactly).
_CURSOR = re.compile(r"k:([0-9]{1,3}(?:\.[0-9]{1,20})?(?:e-[0-9]{1,3})?):([0-9]{1,19}):"
                     r"([0-9a-f]{8})")
SEQ_MAX = 2**63 - 1


def new_publication_id() -> str:
    return f"pub-{ids.now_ms()}-{ids.base36(8)}"


def _out(row: asyncpg.Record, me: Owner) -> PublicationOut:
    mine = row["owner_id"] == me.user_id
    return PublicationOut.of(row, mine=mine,
                             source_agent_id=row["source_agent_id"] if mine else None)


def check_limits(settings: Settings, body: PublicationCreate) -> None:
    """The operator's limits (app.platform.settings), at most the schema's ceilings; a 422
    naming each field that is over, like a validation error."""
    errors: list[dict[str, Any]] = []
    if len(body.title) > settings.publication_title_max:
        errors.append({"field": "title", "message": f"is {len(body.title)} characters; at "
                       f"most {settings.publication_title_max} are allowed"})
    if len(body.summary) > settings.publication_summary_max:
        errors.append({"field": "summary", "message": f"is {len(body.summary)} characters; at "
                       f"most {settings.publication_summary_max} are allowed"})
    if len(body.tags) > settings.publication_tags_max:
        errors.append({"field": "tags", "message": f"has {len(body.tags)} tags; at most "
                       f"{settings.publication_tags_max} are allowed"})
    for i, tag in enumerate(body.tags):
        if len(tag) > settings.publication_tag_max:
            errors.append({"field": f"tags.{i}", "message": f"is {len(tag)} characters; at "
                           f"most {settings.publication_tag_max} are allowed"})
    if errors:
        summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        raise Problem(422, f"invalid request: {summary}", errors=errors)


async def publish(mesh: Mesh, me: Owner, body: PublicationCreate) -> PublicationOut:
    settings = mesh.settings
    check_limits(settings, body)
    async with mesh.pool.acquire() as conn, conn.transaction():
        source = await agents_store.get_owned(conn, body.source_agent_id, me.user_id)
        if source is None or source["kind"] != "normal":
            # The virtual-user agent stands for the owner: it is no template.
            raise not_found(f"no agent '{body.source_agent_id}' owned by you to publish")
        await store.serialize_publishing_of(conn, me.user_id)
        have = await store.count_of(conn, me.user_id)
        if have >= settings.publications_per_owner_max:
            raise conflict(f"you have {have} publications, the most allowed; delete one "
                           "before publishing another", count=have,
                           limit=settings.publications_per_owner_max)
        row = await store.create(conn, publication_id=new_publication_id(),
                                 owner_id=me.user_id, source=source, title=body.title,
                                 summary=body.summary, tags=body.tags)
    return _out(row, me)


async def get(pool: asyncpg.Pool, me: Owner, publication_id: str) -> PublicationOut:
    row = await store.get(pool, publication_id)
    if row is None:
        raise not_found(f"no publication '{publication_id}'")
    return _out(row, me)


async def search(pool: asyncpg.Pool, me: Owner, *, q: str, tag: str | None, limit: int,
                 cursor: str | None) -> PublicationPage:
    q, tag = q.strip(), (tag.strip().lower() or None) if tag else None
    digest = _search_digest(q, tag)
    after = decode_cursor(cursor, digest) if cursor else None
    rows = await store.search(pool, q=q, tag=tag, after=after, limit=limit + 1)
    more, rows = len(rows) > limit, rows[:limit]
    last = rows[-1] if rows else None
    return PublicationPage(
        publications=[_out(r, me) for r in rows],
        next_cursor=encode_cursor(last["rank"], last["seq"], digest) if more and last else None)


async def fork(mesh: Mesh, me: Owner, publication_id: str, name: str) -> AgentOut:
    """A new agent of ``me`` with the publication's snapshot, ``forked_from`` it;
    the fork count moves in the same transaction (a refused name counts nothing)."""
    if name == ids.VIRTUAL_USER_NAME:
        raise conflict(f"the name '{ids.VIRTUAL_USER_NAME}' is reserved for your "
                       "virtual-user agent")
    agent_id = ids.agent_id_of(name, me.username)
    async with mesh.pool.acquire() as conn, conn.transaction():
        row = await store.count_fork(conn, publication_id)
        if row is None:
            raise not_found(f"no publication '{publication_id}'")
        agent = await agents_store.create(conn, agent_id=agent_id, owner_id=me.user_id,
                                          name=name, forked_from=publication_id,
                                          **store.snapshot(row))
        if agent is None:
            raise conflict(f"you already have an agent named '{name}' ({agent_id})")
    return AgentOut.of(agent)


async def delete(mesh: Mesh, me: Owner, publication_id: str) -> None:
    """The publisher's only; its forks stay as they are."""
    if not await store.delete(mesh.pool, publication_id, me.user_id):
        raise not_found(f"no publication '{publication_id}' published by you")


# --- cursors -------------------------------------------------------------------------

def _search_digest(q: str, tag: str | None) -> str:
    # A cursor continues the search it came from; with other words its keyset
    # would skip or repeat rows, so it is refused instead.
    return hashlib.sha256(f"{q}\x00{tag or ''}".encode()).hexdigest()[:8]


def encode_cursor(rank: float, seq: int, digest: str) -> str:
    return cursors.pack(f"k:{rank!r}:{seq}:{digest}")


def decode_cursor(cursor: str, digest: str) -> tuple[float, int]:
    match = cursors.unpack(cursor, _CURSOR)
    seq = int(match[2])
    if seq > SEQ_MAX:
        raise cursors.invalid()
    if match[3] != digest:
        raise Problem(400, "this cursor belongs to another search (other q or tag); "
                           "start again without a cursor")
    return float(match[1]), seq
