"""Operations for admins: the outbox, its dead letters with their errors, retry one/all."""

from __future__ import annotations

from starlette.responses import Response

from app.console.web import ActionError, Ctx, action, back, page
from app.platform.errors import Problem, forbidden
from app.services import admin as admin_service


def _admin(ctx: Ctx) -> None:
    if not ctx.owner.is_admin:
        raise forbidden("admin only: this owner is not in MESH_ADMIN_USERNAMES")


async def ops_page(ctx: Ctx, *, error: ActionError | None = None, status: int = 200) -> Response:
    _admin(ctx)
    pool = ctx.state.pool
    overview = await admin_service.outbox_overview(pool)
    dead = await admin_service.dead_letters(pool, after_id=0, limit=100)
    return ctx.render("ops.html", status=status, error=error, nav="ops", overview=overview,
                      dead=dead.dead_letters, more=dead.next_after_id is not None,
                      retried=ctx.query.get("retried"))


@page
async def ops(ctx: Ctx) -> Response:
    return await ops_page(ctx)


@action("retry", ops_page)
async def retry_one(ctx: Ctx) -> Response:
    _admin(ctx)
    raw = ctx.path("row_id")
    if not raw.isdigit():
        raise Problem(422, f"an outbox row id is an integer, got '{raw}'")
    done = await admin_service.retry_one(ctx.state, int(raw))
    return back(f"/console/ops?retried={done.retried}")


@action("retry-all", ops_page)
async def retry_all(ctx: Ctx) -> Response:
    _admin(ctx)
    done = await admin_service.retry_all(ctx.state)
    return back(f"/console/ops?retried={done.retried}")
