"""Owner side: publications, agents published as templates for other owners."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.schemas import PublicationCreate, PublicationFork
from app.platform.errors import Problem
from app.responses import AgentOut, PublicationOut, PublicationPage
from app.services import publications
from app.services.principals import Owner
from app.web.endpoint import endpoint, json, query_param
from app.web.inputs import body, check_storable, int_query, valid_id
from app.web.state import state

Q_MAX = 200


@endpoint("Publish one of your agents as a template: a snapshot of its display name, "
     "description, skills and instructions (never its keys, friends, history or webhook), "
     "with a title, a summary and tags", body=PublicationCreate, response=PublicationOut,
     auth="owner", status=201, tag="publications")
async def create_publication(request: Request, me: Owner) -> Response:
    data = await body(request, PublicationCreate)
    s = state(request)
    return json(await publications.publish(s, me, data), 201)


@endpoint("Find publications: ?q= words over title, tags and summary (ranked), ?tag= one tag, "
     "?limit=, ?cursor=; newest first without words",
     response=PublicationPage, auth="owner", tag="publications",
     params=[query_param("q", "words to search for", type_="string", maxLength=Q_MAX),
             query_param("tag", "a tag (any case)", type_="string", maxLength=Q_MAX),
             query_param("limit", "most publications (default 20)", minimum=1, maximum=100),
             query_param("cursor", "next_cursor of the previous page", type_="string")])
async def list_publications(request: Request, me: Owner) -> Response:
    q = request.query_params
    for name in ("q", "tag"):
        if len(q.get(name, "")) > Q_MAX:
            raise Problem(422, f"{name} is longer than {Q_MAX} characters")
    # A NUL byte would reach Postgres as a 500: a 422 naming the parameter.
    check_storable({"q": q.get("q", ""), "tag": q.get("tag", "")})
    limit = int_query(request, "limit", default=20, minimum=1, maximum=100)
    assert limit is not None
    return json(await publications.search(state(request).pool, me, q=q.get("q", ""),
                                          tag=q.get("tag") or None, limit=limit,
                                          cursor=q.get("cursor") or None))


@endpoint("Get a publication", response=PublicationOut, auth="owner", tag="publications")
async def get_publication(request: Request, me: Owner) -> Response:
    publication_id = valid_id("publication_id", request.path_params["publication_id"])
    return json(await publications.get(state(request).pool, me, publication_id))


@endpoint("Fork a publication: a new agent of yours named {name}@{your username}, with the "
     "template's fields and forked_from set", body=PublicationFork, response=AgentOut,
     auth="owner", status=201, tag="publications")
async def fork_publication(request: Request, me: Owner) -> Response:
    publication_id = valid_id("publication_id", request.path_params["publication_id"])
    data = await body(request, PublicationFork)
    return json(await publications.fork(state(request), me, publication_id, data.name), 201)


@endpoint("Delete a publication you published; agents forked from it stay", auth="owner",
     status=204, tag="publications")
async def delete_publication(request: Request, me: Owner) -> Response:
    publication_id = valid_id("publication_id", request.path_params["publication_id"])
    await publications.delete(state(request), me, publication_id)
    return Response(status_code=204)


routes = [
    Route("/v1/publications", create_publication, methods=["POST"]),
    Route("/v1/publications", list_publications, methods=["GET"]),
    Route("/v1/publications/{publication_id}", get_publication, methods=["GET"]),
    Route("/v1/publications/{publication_id}", delete_publication, methods=["DELETE"]),
    Route("/v1/publications/{publication_id}/fork", fork_publication, methods=["POST"]),
]
