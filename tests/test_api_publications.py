"""Publications: an owner publishes an agent as a template, any owner finds and
forks it. A publication carries exactly the snapshot (display name, description,
skills, instructions) and the publisher's username — never keys, friends,
messages, the webhook or other agents; paging returns each row once; only the
publisher deletes, and forks outlive the publication."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import pytest

from app.platform.settings import Settings
from tests.api_helpers import ok, problem
from tests.support.meshapi import MeshFactory, OwnerHandle
from tests.support.servers import serve_app

SNAPSHOT = ("display_name", "description", "skills", "instructions")
PUBLICATION_FIELDS = {"publication_id", "title", "summary", "tags", "author", "display_name",
                      "description", "skills", "instructions", "fork_count", "created_at",
                      "mine", "source_agent_id"}
SKILLS = [{"id": "review", "name": "Code review", "tags": ["python"], "examples": ["look"],
           "x-extra": {"kept": True}}]


def word() -> str:
    """A word no other test's publication contains."""
    return "w" + uuid.uuid4().hex[:12]


async def publish(owner: OwnerHandle, agent_id: str, *, title: str = "A template",
                  summary: str = "Does things", tags: list[str] | None = None,
                  status: int = 201) -> dict[str, Any]:
    body: dict[str, Any] = {"source_agent_id": agent_id, "title": title, "summary": summary}
    if tags is not None:
        body["tags"] = tags
    return ok(await owner.post("/v1/publications", body), status)  # type: ignore[no-any-return]


async def pages(owner: OwnerHandle, **params: Any) -> list[list[dict[str, Any]]]:
    out, cursor = [], None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        page = ok(await owner.get("/v1/publications", params=query))
        out.append(page["publications"])
        cursor = page["next_cursor"]
        if cursor is None:
            return out
        assert len(out) < 100


async def count_publications(db) -> int:
    return int(await db.fetchval("SELECT count(*) FROM publications"))


# --- the snapshot ---------------------------------------------------------------------

async def test_a_fork_carries_exactly_the_snapshot_field_by_field(mesh: MeshFactory):
    alice, bob = await mesh.owner(), await mesh.owner()
    source = await alice.agent("coder", display_name="Coder Deluxe",
                               description="Reviews pull requests", skills=SKILLS,
                               instructions="Be terse. Answer in French.")
    before = ok(await alice.get(f"/v1/agents/{source.agent_id}"))
    pub = await publish(alice, source.agent_id, tags=["Python", "review", "python"])
    assert set(pub) == PUBLICATION_FIELDS
    for field in SNAPSHOT:
        assert pub[field] == before[field], field
    assert pub["tags"] == ["python", "review"]  # lowercased, duplicates dropped
    assert pub["author"] == alice.username and pub["fork_count"] == 0
    assert pub["mine"] is True and pub["source_agent_id"] == source.agent_id

    # Later edits of the source do not reach the publication: it is a snapshot.
    ok(await alice.patch(f"/v1/agents/{source.agent_id}",
                         {"display_name": "Changed", "instructions": "changed", "skills": []}))

    fork = ok(await bob.post(f"/v1/publications/{pub['publication_id']}/fork",
                             {"name": "mycoder"}), 201)
    assert fork["agent_id"] == f"mycoder@{bob.username}"
    assert fork["forked_from"] == pub["publication_id"]
    for field in SNAPSHOT:
        assert fork[field] == before[field], field
    assert fork["kind"] == "normal" and fork["listed"] is False
    assert fork["status"] == "inactive" and fork["inbox_seq"] == 0
    stored = ok(await bob.get(f"/v1/agents/{fork['agent_id']}"))
    assert {f: stored[f] for f in (*SNAPSHOT, "forked_from")} == \
        {f: fork[f] for f in (*SNAPSHOT, "forked_from")}
    # Nothing else came along: no keys, no friends, no webhook.
    assert ok(await bob.get(f"/v1/agents/{fork['agent_id']}/keys"))["keys"] == []
    friends = ok(await bob.get(f"/v1/agents/{fork['agent_id']}/friends"))
    # Only the implicit friend every agent has: its owner's virtual user.
    assert [f["agent_id"] for f in friends["friends"]] == [bob.human]
    assert friends["incoming_requests"] == friends["outgoing_requests"] == []
    problem(await bob.get(f"/v1/agents/{fork['agent_id']}/webhook"), 404)

    got = ok(await bob.get(f"/v1/publications/{pub['publication_id']}"))
    assert got["fork_count"] == 1
    assert got["mine"] is False and got["source_agent_id"] is None
    assert ok(await alice.get(f"/v1/agents/{source.agent_id}"))["forked_from"] is None


async def test_no_publication_response_shows_the_publishers_other_data(mesh: MeshFactory):
    alice, bob = await mesh.owner(), await mesh.owner()
    secret = word()
    source = await alice.agent("tpl", description="public text")
    other = await alice.agent(f"o{secret[:10]}", description=f"other-{secret}",
                              instructions=f"other-instr-{secret}")
    peer = await (await mesh.owner()).agent("peer")
    await mesh.befriend(source, peer)
    task = await peer.send(source.agent_id, f"message-{secret}")
    await source.reply(task["task_id"], f"reply-{secret}")
    hook = f"https://93.184.215.14/hooks/{secret}"
    hooked = ok(await alice.http.put(f"/v1/agents/{source.agent_id}/webhook",
                                     json={"url": hook}, headers=alice.headers))
    pub = await publish(alice, source.agent_id, title=f"title {secret}", tags=[secret[:20]])
    pid = pub["publication_id"]
    fork = ok(await bob.post(f"/v1/publications/{pid}/fork", {"name": "copy"}), 201)

    forbidden = [source.api_key, source.key_id, peer.agent_id, task["task_id"],
                 task["context_id"], f"message-{secret}", f"reply-{secret}", hook,
                 hooked["secret"], other.agent_id, f"other-{secret}", f"other-instr-{secret}",
                 source.agent_id]
    seen = [
        (await bob.get(f"/v1/publications/{pid}")).text,
        (await bob.get("/v1/publications", params={"q": secret})).text,
        (await bob.get("/v1/publications", params={"tag": secret[:20]})).text,
        json_text(fork),
    ]
    for text in seen:
        assert pid in text or "agent_id" in text
        for value in forbidden:
            assert value not in text, value
    # The publisher's own view names the source agent and nothing more.
    mine = (await alice.get(f"/v1/publications/{pid}")).text
    for value in forbidden[:-1]:
        assert value not in mine, value
    assert source.agent_id in mine


def json_text(value: Any) -> str:
    import json

    return json.dumps(value)


# --- listing: search, tags, paging ----------------------------------------------------

async def test_search_by_word_and_by_tag(mesh: MeshFactory):
    alice, bob = await mesh.owner(), await mesh.owner()
    agent = await alice.agent("src")
    w1, w2, tag = word(), word(), word()[:20]
    by_title = await publish(alice, agent.agent_id, title=f"Reviewer {w1}", summary="plain")
    by_summary = await publish(alice, agent.agent_id, title="Plain", summary=f"finds {w1} fast")
    tagged = await publish(alice, agent.agent_id, title=f"Tagged {w2}", tags=[tag.upper()])
    both = await publish(alice, agent.agent_id, title=f"{w1} and {w2}", tags=[tag])

    def ids(page: dict[str, Any]) -> list[str]:
        return [p["publication_id"] for p in page["publications"]]

    found = ok(await bob.get("/v1/publications", params={"q": w1}))
    assert set(ids(found)) == {by_title["publication_id"], by_summary["publication_id"],
                               both["publication_id"]}
    assert found["publications"][-1]["publication_id"] == by_summary["publication_id"], \
        "a title match ranks above a summary match"
    assert set(ids(ok(await bob.get("/v1/publications", params={"q": w2})))) == \
        {tagged["publication_id"], both["publication_id"]}
    # Tags are searched as words too, and filtered on in any case.
    assert set(ids(ok(await bob.get("/v1/publications", params={"q": tag})))) == \
        {tagged["publication_id"], both["publication_id"]}
    assert ids(ok(await bob.get("/v1/publications", params={"tag": tag.upper()}))) == \
        [both["publication_id"], tagged["publication_id"]]  # newest first
    assert ids(ok(await bob.get("/v1/publications", params={"q": w1, "tag": tag}))) == \
        [both["publication_id"]]
    assert ids(ok(await bob.get("/v1/publications", params={"q": f"{w1} -{w2}"}))) and \
        both["publication_id"] not in ids(ok(await bob.get("/v1/publications",
                                                           params={"q": f"{w1} -{w2}"})))
    assert ids(ok(await bob.get("/v1/publications", params={"q": word()}))) == []
    assert ids(ok(await bob.get("/v1/publications", params={"tag": word()}))) == []


@pytest.mark.parametrize("by", ["tag", "q"])
async def test_paging_returns_each_publication_exactly_once(mesh: MeshFactory, by: str):
    alice, bob = await mesh.owner(), await mesh.owner()
    agent = await alice.agent("src")
    marker = word()[:20]
    made = [await publish(alice, agent.agent_id, title=f"Number {i} {marker}", tags=[marker])
            for i in range(25)]
    params = {by: marker, "limit": 10}
    first = ok(await bob.get("/v1/publications", params=params))
    assert len(first["publications"]) == 10 and first["next_cursor"]
    # Published while someone pages: before the cursor, so neither repeated nor skipping.
    late = await publish(alice, agent.agent_id, title=f"Late {marker}", tags=[marker])
    rest = []
    cursor = first["next_cursor"]
    while cursor:
        page = ok(await bob.get("/v1/publications", params={**params, "cursor": cursor}))
        rest.append(page["publications"])
        cursor = page["next_cursor"]
    sizes = [len(first["publications"]), *map(len, rest)]
    assert sizes == [10, 10, 5], sizes
    seen = [p["publication_id"] for page in [first["publications"], *rest] for p in page]
    assert len(seen) == len(set(seen)) == 25
    assert set(seen) == {p["publication_id"] for p in made}
    assert late["publication_id"] not in seen
    # A fresh listing has it first.
    again = await pages(bob, **params)
    assert again[0][0]["publication_id"] == late["publication_id"]
    assert sum(map(len, again)) == 26


async def test_cursor_errors_are_400(mesh: MeshFactory):
    alice = await mesh.owner()
    agent = await alice.agent("src")
    marker = word()[:20]
    for _ in range(3):
        await publish(alice, agent.agent_id, tags=[marker])
    page = ok(await alice.get("/v1/publications", params={"tag": marker, "limit": 1}))
    problem(await alice.get("/v1/publications", params={"tag": word()[:20], "limit": 1,
                                                        "cursor": page["next_cursor"]}),
            400, "another search")
    forged = [
        "not-base64!!",
        base64.urlsafe_b64encode(b"o:10").decode(),  # the directory's form
        base64.urlsafe_b64encode(b"k:0.0:99999999999999999999:00000000").decode(),
        base64.urlsafe_b64encode(b"k:nan:1:00000000").decode(),
        base64.urlsafe_b64encode(b"k:0.1:1:00000000\x00").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ]
    for cursor in forged:
        problem(await alice.get("/v1/publications", params={"cursor": cursor}), 400, "cursor")


# --- forks and deletes ----------------------------------------------------------------

async def test_forks_count_in_the_same_transaction(mesh: MeshFactory, db):
    alice, bob = await mesh.owner(), await mesh.owner()
    pub = await publish(alice, (await alice.agent("src")).agent_id)
    pid = pub["publication_id"]
    ok(await bob.post(f"/v1/publications/{pid}/fork", {"name": "one"}), 201)
    ok(await alice.post(f"/v1/publications/{pid}/fork", {"name": "mine"}), 201)
    # A refused fork counts nothing and creates nothing.
    body = problem(await bob.post(f"/v1/publications/{pid}/fork", {"name": "one"}), 409,
                   "already have an agent")
    assert body["status"] == 409
    problem(await bob.post(f"/v1/publications/{pid}/fork", {"name": "human"}), 409, "reserved")
    assert ok(await bob.get(f"/v1/publications/{pid}"))["fork_count"] == 2
    assert await db.fetchval("SELECT count(*) FROM agents WHERE forked_from = $1", pid) == 2
    # Concurrent forks: each one counted once.
    results = await asyncio.gather(*[bob.post(f"/v1/publications/{pid}/fork", {"name": f"c{i}"})
                                     for i in range(8)])
    assert [r.status_code for r in results] == [201] * 8
    assert ok(await bob.get(f"/v1/publications/{pid}"))["fork_count"] == 10
    assert await db.fetchval("SELECT count(*) FROM agents WHERE forked_from = $1", pid) == 10


async def test_only_the_publisher_deletes_and_forks_stay(mesh: MeshFactory, db):
    alice, bob = await mesh.owner(), await mesh.owner()
    pub = await publish(alice, (await alice.agent("src")).agent_id)
    pid = pub["publication_id"]
    fork = ok(await bob.post(f"/v1/publications/{pid}/fork", {"name": "kept"}), 201)

    missing = problem(await bob.delete(f"/v1/publications/{pid}-nope"), 404)
    theirs = problem(await bob.delete(f"/v1/publications/{pid}"), 404)
    assert theirs["detail"].replace(pid, "X") == missing["detail"].replace(f"{pid}-nope", "X")
    assert ok(await bob.get(f"/v1/publications/{pid}"))["publication_id"] == pid

    resp = await alice.delete(f"/v1/publications/{pid}")
    assert resp.status_code == 204 and resp.content == b""
    problem(await bob.get(f"/v1/publications/{pid}"), 404, pid)
    problem(await alice.delete(f"/v1/publications/{pid}"), 404)
    problem(await bob.post(f"/v1/publications/{pid}/fork", {"name": "late"}), 404, pid)
    stays = ok(await bob.get(f"/v1/agents/{fork['agent_id']}"))
    assert stays["forked_from"] == pid and stays["description"] == fork["description"]
    assert await db.fetchval("SELECT count(*) FROM publications WHERE publication_id = $1",
                             pid) == 0


async def test_a_deleted_source_agent_leaves_the_publication(mesh: MeshFactory):
    alice, bob = await mesh.owner(), await mesh.owner()
    source = await alice.agent("gone", description="kept in the snapshot")
    pid = (await publish(alice, source.agent_id))["publication_id"]
    assert (await alice.delete(f"/v1/agents/{source.agent_id}")).status_code == 204
    got = ok(await alice.get(f"/v1/publications/{pid}"))
    assert got["source_agent_id"] is None and got["description"] == "kept in the snapshot"
    ok(await bob.post(f"/v1/publications/{pid}/fork", {"name": "gone"}), 201)


# --- refusals ---------------------------------------------------------------------------

async def test_publishing_another_owners_agent_is_a_uniform_404(mesh: MeshFactory, db):
    alice, bob = await mesh.owner(), await mesh.owner()
    theirs = await bob.agent("theirs")
    before = await count_publications(db)
    other = problem(await alice.post("/v1/publications", {
        "source_agent_id": theirs.agent_id, "title": "t", "summary": "s"}), 404)
    nobody = f"nobody@{bob.username}"
    none = problem(await alice.post("/v1/publications", {
        "source_agent_id": nobody, "title": "t", "summary": "s"}), 404)
    assert other["detail"].replace(theirs.agent_id, "X") == none["detail"].replace(nobody, "X")
    problem(await alice.post("/v1/publications", {
        "source_agent_id": alice.human, "title": "t", "summary": "s"}), 404)
    assert await count_publications(db) == before


@pytest.mark.parametrize(("body", "fields"), [
    ({}, {"source_agent_id", "title", "summary"}),
    ({"title": "", "summary": "s"}, {"title"}),
    ({"title": "   ", "summary": "s"}, {"title"}),
    ({"title": "t" * 121, "summary": "s" * 2001}, {"title", "summary"}),
    ({"title": "t", "summary": "s", "tags": [f"t{i}" for i in range(11)]}, {"tags"}),
    ({"title": "t", "summary": "s", "tags": ["two words", "x" * 33, "-lead"]},
     {"tags.0", "tags.1", "tags.2"}),
    ({"title": "t", "summary": "s", "tags": "python"}, {"tags"}),
    ({"title": "t", "summary": "s", "instructions": "sneaked in"}, {"instructions"}),
    ({"title": 5, "summary": ["s"]}, {"title", "summary"}),
])
async def test_bad_publish_bodies_are_422_naming_each_field(mesh: MeshFactory, db, body, fields):
    alice = await mesh.owner()
    agent = await alice.agent("src")
    full = {"source_agent_id": agent.agent_id, **body} if body else body
    before = await count_publications(db)
    got = problem(await alice.post("/v1/publications", full), 422)
    assert {e["field"] for e in got["errors"]} == fields, got["errors"]
    assert len(got["errors"]) == len(fields)
    assert await count_publications(db) == before


async def test_other_bad_input_is_4xx_problem_json(mesh: MeshFactory, db):
    alice = await mesh.owner()
    agent = await alice.agent("src")
    pid = (await publish(alice, agent.agent_id))["publication_id"]
    agents_before = int(await db.fetchval("SELECT count(*) FROM agents"))
    problem(await alice.post(f"/v1/publications/{pid}/fork", {"name": "Bad Name"}), 422, "name")
    problem(await alice.post(f"/v1/publications/{pid}/fork", {}), 422, "name")
    problem(await alice.post(f"/v1/publications/{pid}/fork", {"name": "x", "extra": 1}), 422)
    problem(await alice.http.post(f"/v1/publications/{pid}/fork", content=b"name=x",
                                  headers={**alice.headers,
                                           "Content-Type": "application/x-www-form-urlencoded"}),
            415)
    problem(await alice.http.post("/v1/publications", content=b"{not json",
                                  headers={**alice.headers, "Content-Type": "application/json"}),
            400, "JSON")
    problem(await alice.get("/v1/publications/x"), 422, "publication_id")
    problem(await alice.get("/v1/publications/a%00bc"), 422, "NUL")
    problem(await alice.get("/v1/publications", params={"limit": 0}), 422, "limit")
    problem(await alice.get("/v1/publications", params={"limit": "ten"}), 422, "limit")
    problem(await alice.get("/v1/publications", params={"q": "x" * 201}), 422, "q")
    problem(await alice.get("/v1/publications", params={"tag": "x" * 201}), 422, "tag")
    problem(await alice.get("/v1/publications", params={"q": "a\x00b"}), 422, "q", "NUL")
    problem(await alice.get("/v1/publications", params={"tag": "a\x00b"}), 422, "tag", "NUL")
    assert ok(await alice.get("/v1/publications", params={"q": "\"unbalanced -( or"}))
    problem(await agent.get("/v1/publications"), 403, "owner token")
    problem(await agent.post("/v1/publications", {}), 403, "owner token")
    problem(await mesh.http.get("/v1/publications"), 401, "bearer")
    assert int(await db.fetchval("SELECT count(*) FROM agents")) == agents_before
    assert ok(await alice.get(f"/v1/publications/{pid}"))["fork_count"] == 0


# --- the operator's limits --------------------------------------------------------------

@pytest.fixture
async def limited(migrated: Settings):
    settings = migrated.model_copy(update={
        "publications_per_owner_max": 3, "publication_title_max": 10,
        "publication_summary_max": 20, "publication_tags_max": 2, "publication_tag_max": 5})
    async with serve_app(settings) as url, MeshFactory.connect(url) as factory:
        yield factory


async def test_settings_lower_the_limits_and_cap_publications(limited: MeshFactory, db):
    alice = await limited.owner()
    agent = await limited.owner()  # another owner's count is their own
    src = await alice.agent("src")
    got = problem(await alice.post("/v1/publications", {
        "source_agent_id": src.agent_id, "title": "t" * 11, "summary": "s" * 21,
        "tags": ["a", "b", "toolong"]}), 422, "title", "summary", "tags")
    assert {e["field"] for e in got["errors"]} == {"title", "summary", "tags", "tags.2"}

    # The cap holds under concurrency: six at once, three are published.
    results = await asyncio.gather(*[alice.post("/v1/publications", {
        "source_agent_id": src.agent_id, "title": f"t{i}", "summary": "s"}) for i in range(6)])
    statuses = sorted(r.status_code for r in results)
    assert statuses == [201] * 3 + [409] * 3, statuses
    refused = next(r for r in results if r.status_code == 409)
    body = problem(refused, 409, "most allowed")
    assert body["count"] == 3 and body["limit"] == 3
    owned = await db.fetchval("SELECT count(*) FROM publications p JOIN users u "
                              "ON u.user_id = p.owner_id WHERE u.username = $1", alice.username)
    assert owned == 3
    first = next(r.json() for r in results if r.status_code == 201)
    assert (await alice.delete(f"/v1/publications/{first['publication_id']}")).status_code == 204
    await publish(alice, src.agent_id, title="again")
    await publish(agent, (await agent.agent("mine")).agent_id, title="theirs")


async def test_the_api_documents_the_publication_routes(mesh: MeshFactory):
    spec = ok(await mesh.http.get("/openapi.json"))
    paths = spec["paths"]
    assert set(paths["/v1/publications"]) == {"get", "post"}
    assert set(paths["/v1/publications/{publication_id}"]) == {"get", "delete"}
    assert set(paths["/v1/publications/{publication_id}/fork"]) == {"post"}
    listed = {p["name"] for p in paths["/v1/publications"]["get"]["parameters"]}
    assert listed == {"q", "tag", "limit", "cursor"}
    assert "201" in paths["/v1/publications/{publication_id}/fork"]["post"]["responses"]
    schema = spec["components"]["schemas"]["PublicationCreate"]
    assert schema["properties"]["tags"]["maxItems"] == 10
