"""Publications in the console: publish an agent (from its page), browse and
search them (words, tag, pages), fork one into a new agent, delete your own.
The same services as the API (app.services.publications), so the same rules."""

from __future__ import annotations

import re

from starlette.responses import Response

from app.console.views_agents import agent_page
from app.console.web import ActionError, Ctx, action, back, page, validated
from app.domain.schemas import PublicationCreate, PublicationFork
from app.platform.errors import Problem
from app.services import publications
from app.web.inputs import check_storable

PAGE_SIZE = 20


def _tags(raw: str) -> list[str]:
    """Tags are typed as one field: separated by commas or spaces."""
    return [t for t in re.split(r"[\s,]+", raw) if t]


@action("publish-agent", agent_page)
async def publish(ctx: Ctx) -> Response:
    f = ctx.form
    body = validated(PublicationCreate, {"source_agent_id": ctx.path("agent_id"),
                                         "title": f.get("title", ""),
                                         "summary": f.get("summary", ""),
                                         "tags": _tags(f.get("tags", ""))})
    s = ctx.state
    created = await publications.publish(s, ctx.owner, body)
    return back(f"/console/publications/{created.publication_id}?published=1")


@page
async def browse(ctx: Ctx) -> Response:
    q = (ctx.query.get("q") or "").strip()
    tag = (ctx.query.get("tag") or "").strip()
    if len(q) > 200 or len(tag) > 200:
        raise Problem(422, "the search words and the tag are at most 200 characters each")
    check_storable({"q": q, "tag": tag})
    found = await publications.search(ctx.state.pool, ctx.owner, q=q, tag=tag or None,
                                      limit=PAGE_SIZE, cursor=ctx.query.get("cursor") or None)
    return ctx.render("publications.html", nav="publications", found=found,
                      filters={"q": q, "tag": tag})


async def publication_page(ctx: Ctx, *, error: ActionError | None = None,
                           status: int = 200) -> Response:
    pub = await publications.get(ctx.state.pool, ctx.owner, ctx.path("publication_id"))
    return ctx.render("publication.html", status=status, error=error, nav="publications",
                      pub=pub)


@page
async def publication(ctx: Ctx) -> Response:
    return await publication_page(ctx)


@action("fork", publication_page)
async def fork(ctx: Ctx) -> Response:
    body = validated(PublicationFork, {"name": ctx.form.get("name", "").strip()})
    agent = await publications.fork(ctx.state, ctx.owner, ctx.path("publication_id"),
                                    body.name)
    return back(f"/console/agents/{agent.agent_id}?forked=1")


@action("delete-publication", publication_page)
async def delete(ctx: Ctx) -> Response:
    await publications.delete(ctx.state, ctx.owner, ctx.path("publication_id"))
    return back("/console/publications?deleted=1")
