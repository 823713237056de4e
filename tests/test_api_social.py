"""Friends, friend requests, groups, rosters and agent cards."""

from __future__ import annotations

import uuid

from tests.api_helpers import ok, problem, text_message


async def _strangers(mesh):
    alice, bob = await mesh.owner(), await mesh.owner()
    return alice, bob, await alice.agent("a"), await bob.agent("b")


# --- friend requests ------------------------------------------------------------------

async def test_friend_request_accept_flow(mesh):
    _, _, a, b = await _strangers(mesh)
    req = ok(await a.post("/v1/mesh/friends/requests",
                          {"to_agent_id": b.agent_id, "note": "hi, I review code"}), 201)
    assert req["request_id"] and req["status"] == "pending"
    assert (req["from_agent_id"], req["to_agent_id"]) == (a.agent_id, b.agent_id)

    [ev] = (await b.inbox())["events"]
    assert ev["type"] == "friend.request" and ev["from_agent_id"] == a.agent_id
    assert ev["payload"]["request"]["request_id"] == req["request_id"]
    assert ev["payload"]["request"]["note"] == "hi, I review code"

    mine, theirs = ok(await a.get("/v1/mesh/friends")), ok(await b.get("/v1/mesh/friends"))
    assert [r["request_id"] for r in mine["outgoing_requests"]] == [req["request_id"]]
    assert [r["request_id"] for r in theirs["incoming_requests"]] == [req["request_id"]]
    assert theirs["friends"] == [] or all(f["implicit"] for f in theirs["friends"])

    accepted = ok(await b.post(f"/v1/mesh/friends/requests/{req['request_id']}/accept"))
    assert accepted["status"] == "accepted" and accepted["accepted_at"]
    [ev] = (await a.inbox())["events"]
    assert ev["type"] == "friend.accepted" and ev["from_agent_id"] == b.agent_id

    friends = {f["agent_id"]: f for f in ok(await a.get("/v1/mesh/friends"))["friends"]}
    assert friends[b.agent_id]["implicit"] is False and friends[b.agent_id]["since"]
    assert ok(await a.get("/v1/mesh/friends"))["outgoing_requests"] == []
    # Now they may talk.
    await a.send(b.agent_id, "hello friend")


async def test_friend_request_failures(mesh):
    _, _, a, b = await _strangers(mesh)
    problem(await a.post("/v1/mesh/friends/requests", {"to_agent_id": "ghost@nobody"}), 404,
            "ghost@nobody")
    problem(await a.post("/v1/mesh/friends/requests", {"to_agent_id": a.agent_id}), 400,
            "itself")
    req = ok(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}), 201)
    dup = problem(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}), 409,
                  "already pending")
    assert dup["request_id"] == req["request_id"]
    rid = req["request_id"]
    # Only the addressee answers; a stranger does not even learn the request exists.
    problem(await a.post(f"/v1/mesh/friends/requests/{rid}/accept"), 403, "sent to")
    c = await (await mesh.owner()).agent("c")
    problem(await c.post(f"/v1/mesh/friends/requests/{rid}/accept"), 404, rid)
    problem(await c.post(f"/v1/mesh/friends/requests/{rid}/reject"), 404, rid)
    problem(await b.post("/v1/mesh/friends/requests/fr-nope-123/accept"), 404, "fr-nope-123")
    ok(await b.post(f"/v1/mesh/friends/requests/{rid}/accept"))
    problem(await b.post(f"/v1/mesh/friends/requests/{rid}/accept"), 409, "already")
    problem(await b.post(f"/v1/mesh/friends/requests/{rid}/reject"), 409, "already")
    problem(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}), 409,
            "already friends")
    problem(await a.post("/v1/mesh/friends/requests", {"to_agent_id": "Bad Id"}), 422,
            "to_agent_id")


async def test_reject_then_ask_again(mesh):
    _, _, a, b = await _strangers(mesh)
    rid = ok(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}), 201)[
        "request_id"]
    rejected = ok(await b.post(f"/v1/mesh/friends/requests/{rid}/reject"))
    assert rejected["status"] == "rejected"
    problem(await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id,
                                            "message": text_message("x")}), 403)
    assert ok(await b.get("/v1/mesh/friends"))["incoming_requests"] == []
    again = ok(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}), 201)
    assert again["request_id"] != rid


async def test_mutual_request_accepts_the_pending_one(mesh):
    _, _, a, b = await _strangers(mesh)
    req = ok(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}), 201)
    resp = await b.post("/v1/mesh/friends/requests", {"to_agent_id": a.agent_id})
    body = ok(resp, 200)
    assert body["request_id"] == req["request_id"] and body["status"] == "accepted"
    assert (await a.inbox())["events"][-1]["type"] == "friend.accepted"
    await b.send(a.agent_id, "we are friends now")


async def test_remove_friend(mesh):
    a, b = await mesh.pair()
    await a.send(b.agent_id, "before")
    resp = await b.delete(f"/v1/mesh/friends/{a.agent_id}")
    assert resp.status_code == 204
    problem(await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id,
                                            "message": text_message("after")}), 403,
            "neither friends nor share a group")
    problem(await a.delete(f"/v1/mesh/friends/{b.agent_id}"), 404, "not a friend")
    assert b.agent_id not in {f["agent_id"] for f in ok(await a.get("/v1/mesh/friends"))["friends"]}


async def test_friendship_on_behalf_of_own_agent(mesh):
    alice, bob, a, b = await _strangers(mesh)
    req = ok(await alice.post(f"/v1/agents/{a.agent_id}/friends/requests",
                              {"to_agent_id": b.agent_id}), 201)
    assert req["from_agent_id"] == a.agent_id
    incoming = ok(await bob.get(f"/v1/agents/{b.agent_id}/friends"))["incoming_requests"]
    assert [r["request_id"] for r in incoming] == [req["request_id"]]
    # Alice may not answer a request on behalf of the agent that sent it.
    problem(await alice.post(f"/v1/agents/{a.agent_id}/friends/requests/{req['request_id']}/"
                             "accept"), 403)
    ok(await bob.post(f"/v1/agents/{b.agent_id}/friends/requests/{req['request_id']}/accept"))
    friends = ok(await alice.get(f"/v1/agents/{a.agent_id}/friends"))["friends"]
    assert b.agent_id in {f["agent_id"] for f in friends}
    resp = await alice.delete(f"/v1/agents/{a.agent_id}/friends/{b.agent_id}")
    assert resp.status_code == 204
    problem(await alice.delete(f"/v1/agents/{a.agent_id}/friends/{b.agent_id}"), 404)

    # Reject on behalf, too.
    req2 = ok(await bob.post(f"/v1/agents/{b.agent_id}/friends/requests",
                             {"to_agent_id": a.agent_id}), 201)
    rejected = ok(await alice.post(f"/v1/agents/{a.agent_id}/friends/requests/"
                                   f"{req2['request_id']}/reject"))
    assert rejected["status"] == "rejected"


# --- cards -----------------------------------------------------------------------------

async def test_card_only_for_agents_you_may_talk_to(mesh):
    owner = await mesh.owner()
    a = await owner.agent("a", display_name="Alpha", description="does a",
                          skills=[{"id": "s1", "name": "Skill one"}])
    stranger = await (await mesh.owner()).agent("s")
    friend = await (await mesh.owner()).agent("f")
    await mesh.befriend(friend, a)

    card = ok(await friend.get(f"/v1/mesh/agents/{a.agent_id}/card"))
    assert card["agent_id"] == a.agent_id and card["name"] == "Alpha"
    assert card["description"] == "does a" and card["skills"] == [{"id": "s1", "name": "Skill one"}]
    assert "inbox_seq" not in card and "owner_id" not in card
    assert ok(await a.get(f"/v1/mesh/agents/{a.agent_id}/card"))["agent_id"] == a.agent_id
    assert ok(await owner.get(f"/v1/mesh/agents/{a.agent_id}/card"))["agent_id"] == a.agent_id
    problem(await stranger.get(f"/v1/mesh/agents/{a.agent_id}/card"), 403, "may not talk")
    problem(await stranger.get("/v1/mesh/agents/ghost@nobody/card"), 404, "ghost@nobody")


# --- groups ------------------------------------------------------------------------------

def _gid() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


async def test_group_lifecycle_and_group_messaging(mesh):
    alice, bob = await mesh.owner(), await mesh.owner()
    a1, a2 = await alice.agent("a1"), await alice.agent("a2")
    b = await bob.agent("b")
    gid = _gid()
    group = ok(await alice.post("/v1/groups", {"group_id": gid, "name": "Crew"}), 201)
    assert group == {"group_id": gid, "name": "Crew", "member_count": 0, "created_at":
                     group["created_at"]}
    problem(await alice.post("/v1/groups", {"group_id": gid, "name": "again"}), 409, gid)
    problem(await bob.post("/v1/groups", {"group_id": gid, "name": "mine"}), 409, "taken")

    # Two of alice's own agents trust each other (ADR 030), group or not.
    ok(await a1.post("/v1/mesh/tasks", {"to_agent_id": a2.agent_id,
                                        "message": text_message("x")}), 201)
    a1_seq = ok(await a1.get("/v1/mesh/me"))["inbox_seq"]
    m1 = ok(await alice.post(f"/v1/groups/{gid}/members", {"agent_id": a1.agent_id}), 201)
    assert m1["role"] == "member"
    ok(await alice.post(f"/v1/groups/{gid}/members", {"agent_id": a2.agent_id, "role": "admin"}),
       201)
    [notice] = (await a1.inbox(after=a1_seq))["events"]
    assert notice["type"] == "group.notice"
    assert notice["payload"]["group_id"] == gid and notice["payload"]["notice"] == "added"
    await a1.send(a2.agent_id, "group peers may talk")

    # Re-adding changes the role, 200 not 201, no second notice.
    again = ok(await alice.post(f"/v1/groups/{gid}/members",
                                {"agent_id": a1.agent_id, "role": "admin"}), 200)
    assert again["role"] == "admin"
    assert len((await a1.inbox(after=a1_seq))["events"]) == 1

    # Bob's agent: not a friend of any of alice's agents → 403; once befriended → allowed.
    problem(await alice.post(f"/v1/groups/{gid}/members", {"agent_id": b.agent_id}), 403,
            "befriend")
    await mesh.befriend(b, a1)
    invited = ok(await alice.post(f"/v1/groups/{gid}/members", {"agent_id": b.agent_id}), 201)
    assert invited["status"] == "invited"  # another owner's agent joins when it accepts
    ok(await b.post(f"/v1/mesh/groups/invitations/{gid}/accept"))
    # b and a2 are not friends, but share the group now.
    await b.send(a2.agent_id, "hello via the group")

    listed = ok(await alice.get("/v1/groups"))["groups"]
    assert [(g["group_id"], g["member_count"]) for g in listed] == [(gid, 3)]
    detail = ok(await alice.get(f"/v1/groups/{gid}"))
    assert {m["agent_id"]: m["role"] for m in detail["members"]} == {
        a1.agent_id: "admin", a2.agent_id: "admin", b.agent_id: "member"}

    mine = ok(await b.get("/v1/mesh/groups"))["groups"]
    assert [(g["group_id"], g["role"], g["member_count"]) for g in mine] == [(gid, "member", 3)]
    roster = ok(await b.get(f"/v1/mesh/groups/{gid}/roster"))
    assert roster["name"] == "Crew"
    assert {m["agent_id"] for m in roster["members"]} == {a1.agent_id, a2.agent_id, b.agent_id}

    # Removing b: a removal notice, and b and a2 can no longer talk.
    seq = ok(await b.get("/v1/mesh/me"))["inbox_seq"]
    assert (await alice.delete(f"/v1/groups/{gid}/members/{b.agent_id}")).status_code == 204
    [removed] = (await b.inbox(after=seq))["events"]
    assert removed["type"] == "group.notice" and removed["payload"]["notice"] == "removed"
    problem(await b.post("/v1/mesh/tasks", {"to_agent_id": a2.agent_id,
                                            "message": text_message("x")}), 403)
    problem(await b.get(f"/v1/mesh/groups/{gid}/roster"), 404, gid)
    problem(await alice.delete(f"/v1/groups/{gid}/members/{b.agent_id}"), 404, "not a member")

    seqs = {x.agent_id: ok(await x.get("/v1/mesh/me"))["inbox_seq"] for x in (a1, a2, b)}
    assert (await alice.delete(f"/v1/groups/{gid}")).status_code == 204
    # Every remaining member hears of the deletion once; b, removed before, does not.
    for member in (a1, a2):
        [gone] = (await member.inbox(after=seqs[member.agent_id]))["events"]
        assert gone["type"] == "group.notice" and gone["payload"] == {
            "group_id": gid, "name": "Crew", "notice": "deleted"}
    assert (await b.inbox(after=seqs[b.agent_id]))["events"] == []
    problem(await alice.get(f"/v1/groups/{gid}"), 404, gid)
    problem(await b.post("/v1/mesh/tasks", {"to_agent_id": a2.agent_id,
                                            "message": text_message("x")}), 403)


async def test_groups_of_another_owner_are_404(mesh):
    alice, mallory = await mesh.owner(), await mesh.owner()
    m = await mallory.agent("m")
    gid = _gid()
    ok(await alice.post("/v1/groups", {"group_id": gid, "name": "Private"}), 201)
    problem(await mallory.get(f"/v1/groups/{gid}"), 404, gid)
    problem(await mallory.delete(f"/v1/groups/{gid}"), 404, gid)
    problem(await mallory.post(f"/v1/groups/{gid}/members", {"agent_id": m.agent_id}), 404, gid)
    problem(await mallory.delete(f"/v1/groups/{gid}/members/{m.agent_id}"), 404, gid)
    assert ok(await mallory.get("/v1/groups"))["groups"] == []
    problem(await m.get(f"/v1/mesh/groups/{gid}/roster"), 404, gid)
    problem(await alice.post(f"/v1/groups/{gid}/members", {"agent_id": "ghost@nobody"}), 404,
            "ghost@nobody")


async def test_group_validation(mesh):
    owner = await mesh.owner()
    for body, field in [({"group_id": "x", "name": "n"}, "group_id"),
                        ({"group_id": "-bad", "name": "n"}, "group_id"),
                        ({"group_id": _gid(), "name": ""}, "name"),
                        ({"group_id": _gid()}, "name")]:
        data = problem(await owner.post("/v1/groups", body), 422, field)
        assert field in {e["field"] for e in data["errors"]}
    gid = _gid()
    ok(await owner.post("/v1/groups", {"group_id": gid, "name": "n"}), 201)
    a = await owner.agent("a")
    problem(await owner.post(f"/v1/groups/{gid}/members", {"agent_id": a.agent_id,
                                                           "role": "boss"}), 422, "role")


async def test_the_human_reaches_whoever_its_own_agents_may_reach(mesh):
    """human@owner may start work with a friend (or group peer) of one of its owner's
    agents — the person speaks for their agents — but not with a stranger."""
    alice, bob, carol = await mesh.owner(), await mesh.owner(), await mesh.owner()
    coder, reviewer = await alice.agent("coder"), await bob.agent("reviewer")
    stranger = await carol.agent("stranger")
    await mesh.befriend(coder, reviewer)

    def task_to(agent_id: str) -> dict:
        return {"to_agent_id": agent_id, "message": text_message("from a person")}

    created = ok(await alice.post("/v1/mesh/tasks", task_to(reviewer.agent_id)), 201)
    assert created["initiator"] == alice.human
    # The answer comes back to the person on that task, and the reviewer may also
    # start work with the person it already works for through coder.
    assert (await reviewer.inbox())["events"][-1]["task_id"] == created["task_id"]
    ok(await reviewer.post("/v1/mesh/tasks", task_to(alice.human)), 201)

    problem(await alice.post("/v1/mesh/tasks", task_to(stranger.agent_id)), 403)
    problem(await stranger.post("/v1/mesh/tasks", task_to(alice.human)), 403)
    # carol's person does not inherit alice's agents' friendships; bob's reaches
    # coder through its own reviewer.
    problem(await carol.post("/v1/mesh/tasks", task_to(reviewer.agent_id)), 403)
    ok(await bob.post("/v1/mesh/tasks", task_to(coder.agent_id)), 201)
