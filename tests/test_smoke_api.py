async def test_walkthrough(mesh):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "hello")
    assert task["state"] == "submitted"
    inbox = await b.inbox()
    assert [e["type"] for e in inbox["events"]][-1] == "task.created"
