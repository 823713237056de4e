"""The console's URL map, mounted at ``/console`` by app.main."""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from app.console import (
    views_agents,
    views_auth,
    views_dashboard,
    views_feed,
    views_oauth,
    views_ops,
    views_publications,
    views_social,
    views_tasks,
)
from app.console.web import HERE, post_only

GET, POST = ["GET"], ["POST"]


def console_routes() -> list[BaseRoute]:
    routes: list[BaseRoute] = [
        Route("/", views_dashboard.dashboard, methods=GET),
        Route("/partials/counters", views_dashboard.counters, methods=GET),
        Route("/signin", views_auth.signin_page, methods=GET),
        Route("/signin", views_auth.signin, methods=POST),
        Route("/register", views_auth.register_page, methods=GET),
        Route("/register", views_auth.register, methods=POST),
        Route("/signout", views_auth.signout, methods=POST),
        Route("/agents", views_agents.agents, methods=GET),
        Route("/agents", views_agents.create_agent, methods=POST),
        Route("/agents/{agent_id}", views_agents.agent, methods=GET),
        Route("/agents/{agent_id}", views_agents.edit_agent, methods=POST),
        Route("/agents/{agent_id}/runs/live", views_agents.run_live, methods=GET),
        Route("/agents/{agent_id}/delete", views_agents.confirm_delete, methods=GET),
        Route("/agents/{agent_id}/delete", views_agents.delete_agent, methods=POST),
        Route("/agents/{agent_id}/keys", views_agents.create_key, methods=POST),
        Route("/agents/{agent_id}/keys/{key_id}/revoke", views_agents.revoke_key, methods=POST),
        Route("/agents/{agent_id}/webhook", views_agents.put_webhook, methods=POST),
        Route("/agents/{agent_id}/webhook/delete", views_agents.delete_webhook, methods=POST),
        Route("/agents/{agent_id}/publish", views_publications.publish, methods=POST),
        Route("/publications", views_publications.browse, methods=GET),
        Route("/publications/{publication_id}", views_publications.publication, methods=GET),
        Route("/publications/{publication_id}/fork", views_publications.fork, methods=POST),
        Route("/publications/{publication_id}/delete", views_publications.delete,
              methods=POST),
        Route("/tasks", views_tasks.tasks, methods=GET),
        Route("/tasks", views_tasks.start_task, methods=POST),
        Route("/tasks/{task_id}", views_tasks.task, methods=GET),
        Route("/tasks/{task_id}/messages", views_tasks.answer, methods=POST),
        Route("/tasks/{task_id}/cancel", views_tasks.cancel, methods=POST),
        Route("/tasks/{task_id}/status", views_tasks.decide, methods=POST),
        Route("/friends", views_social.friends, methods=GET),
        Route("/friends", views_social.send_request, methods=POST),
        Route("/friends/{agent_id}/requests/{request_id}/{verb:str}", views_social.answer_request,
              methods=POST),
        Route("/friends/{agent_id}/remove/{friend_id}", views_social.remove_friend, methods=POST),
        Route("/groups", views_social.groups, methods=GET),
        Route("/groups", views_social.create_group, methods=POST),
        Route("/groups/{group_id}", views_social.group, methods=GET),
        Route("/groups/{group_id}/members", views_social.add_member, methods=POST),
        Route("/groups/{group_id}/members/{agent_id}/remove", views_social.remove_member,
              methods=POST),
        Route("/groups/{group_id}/delete", views_social.delete_group, methods=POST),
        Route("/groups/{group_id}/invitations/{agent_id}/{verb:str}",
              views_social.answer_invitation, methods=POST),
        Route("/groups/{group_id}/leave/{agent_id}", views_social.leave_group, methods=POST),
        Route("/feed", views_feed.feed, methods=GET),
        Route("/feed/stream", views_feed.stream, methods=GET),
        Route("/oauth/authorize", views_oauth.consent, methods=GET),
        Route("/oauth/authorize", views_oauth.decide, methods=POST),
        Route("/connections", views_oauth.connections, methods=GET),
        Route("/connections/{grant_id}/revoke", views_oauth.disconnect, methods=POST),
        Route("/ops", views_ops.ops, methods=GET),
        Route("/ops/dead/retry", views_ops.retry_all, methods=POST),
        Route("/ops/dead/{row_id}/retry", views_ops.retry_one, methods=POST),
    ]
    routes += post_only_pages(routes)
    routes.append(Mount("/static", StaticFiles(directory=str(HERE / "static")), name="console-static"))
    return [Mount("/console", routes=routes)]


def post_only_pages(routes: list[BaseRoute]) -> list[BaseRoute]:
    """A GET of an address that only takes a form (an old tab, a copied link, the
    history) gets a console page saying so, with a link to the page the form is
    on, instead of Starlette's bare 405."""
    gets = [r.path for r in routes if isinstance(r, Route) and "GET" in (r.methods or ())]
    extra: list[BaseRoute] = []
    for r in routes:
        if not isinstance(r, Route) or r.path in gets or any(
                isinstance(e, Route) and e.path == r.path for e in extra):
            continue
        home = max((g for g in gets if _under(r.path, g)), key=len, default="/")
        extra.append(Route(r.path, post_only(home), methods=GET))
    return extra


def _under(path: str, prefix: str) -> bool:
    return prefix == "/" or path.startswith(prefix.rstrip("/") + "/")
