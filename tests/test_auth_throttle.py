"""Register, login and API-key exchange are throttled by client
address and by account (429 + Retry-After), and the KDF runs a bounded number
of hashes at a time, off the event loop.

Client addresses come from ``X-Forwarded-For``, which uvicorn trusts from
127.0.0.1 (its default ``forwarded_allow_ips``), as behind a real proxy."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from app.platform.errors import Problem
from app.platform.settings import Settings
from app.services.kdf import Kdf
from tests.api_helpers import problem
from tests.support.servers import serve_app

PASSWORD = "correct horse battery"
SLOW = 0.0001  # a refill so slow that no test sees a token come back


@pytest.fixture
async def throttled(migrated: Settings, redis_client: aioredis.Redis,
                    request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    limits: dict[str, tuple[float, int]] = getattr(request, "param", {})
    # Buckets live in the session's Redis: start each test with full ones.
    async for key in redis_client.scan_iter("mesh:auth:*"):
        await redis_client.delete(key)
    settings = migrated.model_copy(update={"auth_throttle_enabled": True,
                                           "auth_limits": limits})
    async with serve_app(settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        yield http


def at(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


async def register(http: httpx.AsyncClient, username: str, address: str = "10.9.0.1"
                   ) -> httpx.Response:
    return await http.post("/v1/auth/register", json={"username": username,
                                                      "password": PASSWORD},
                           headers=at(address))


async def login(http: httpx.AsyncClient, username: str, password: str, address: str
                ) -> httpx.Response:
    return await http.post("/v1/auth/login", json={"username": username, "password": password},
                           headers=at(address))


def too_many(resp: httpx.Response, *fragments: str) -> None:
    problem(resp, 429, *fragments)
    assert int(resp.headers["Retry-After"]) >= 1


@pytest.mark.parametrize("throttled", [{"login_failures": (SLOW, 3),
                                        "login_failures_account": (SLOW, 6)}], indirect=True)
async def test_failed_logins_back_off_per_account_and_address_not_the_owner(
        throttled: httpx.AsyncClient, uniq: str) -> None:
    http = throttled
    user = f"victim{uniq}"
    assert (await register(http, user)).status_code == 201
    for _ in range(3):
        problem(await login(http, user, "wrong password", "10.1.0.1"), 401)
    # The guesser's address backs off, even with the right password now (no hash spent).
    too_many(await login(http, user, PASSWORD, "10.1.0.1"), "failed logins", "your address")
    # The owner, elsewhere, is not locked out.
    assert (await login(http, user, PASSWORD, "10.1.0.2")).status_code == 200
    # Many addresses guessing one account meet the looser per-account cap.
    for address in ("10.1.0.3", "10.1.0.3", "10.1.0.4"):
        problem(await login(http, user, "wrong password", address), 401)
    too_many(await login(http, user, "wrong password", "10.1.0.5"), "for this account")


@pytest.mark.parametrize("throttled", [{"login": (SLOW, 5)}], indirect=True)
async def test_logins_are_limited_per_address(throttled: httpx.AsyncClient) -> None:
    for i in range(5):
        problem(await login(throttled, f"nobody{i}", "wrong password", "10.2.0.1"), 401)
    too_many(await login(throttled, "nobody9", "wrong password", "10.2.0.1"), "login attempts")
    problem(await login(throttled, "nobody9", "wrong password", "10.2.0.2"), 401)


@pytest.mark.parametrize("throttled", [{"register": (SLOW, 3)}], indirect=True)
async def test_registrations_are_limited_per_address(throttled: httpx.AsyncClient,
                                                     uniq: str) -> None:
    for i in range(3):
        assert (await register(throttled, f"r{i}{uniq}", "10.3.0.1")).status_code == 201
    too_many(await register(throttled, f"r9{uniq}", "10.3.0.1"), "registrations")
    assert (await register(throttled, f"r9{uniq}", "10.3.0.2")).status_code == 201


@pytest.mark.parametrize("throttled", [{"token_failures": (SLOW, 3)}], indirect=True)
async def test_bad_api_keys_back_off_per_address(throttled: httpx.AsyncClient,
                                                 uniq: str) -> None:
    http = throttled
    assert (await register(http, f"k{uniq}")).status_code == 201
    token = (await login(http, f"k{uniq}", PASSWORD, "10.4.0.9")).json()["access_token"]
    owner = {"Authorization": f"Bearer {token}"}
    agent = (await http.post("/v1/agents", json={"name": "a"}, headers=owner)).json()
    key = (await http.post(f"/v1/agents/{agent['agent_id']}/keys", headers=owner)).json()
    for i in range(3):
        resp = await http.post("/v1/auth/token", json={"api_key": f"mk_bogus{i}_x"},
                               headers=at("10.4.0.1"))
        problem(resp, 401)
    too_many(await http.post("/v1/auth/token", json={"api_key": key["api_key"]},
                             headers=at("10.4.0.1")), "API-key")
    resp = await http.post("/v1/auth/token", json={"api_key": key["api_key"]},
                           headers=at("10.4.0.2"))
    assert resp.status_code == 200, resp.text


async def test_kdf_runs_a_bounded_number_of_hashes_and_refuses_past_its_queue() -> None:
    kdf = Kdf(concurrency=1, queue=3)
    release = threading.Event()
    entered = threading.Semaphore(0)
    active = 0
    most = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        entered.release()
        release.wait(30)
        with lock:
            active -= 1

    tasks = [asyncio.create_task(kdf._run(work)) for _ in range(3)]
    await asyncio.to_thread(entered.acquire)  # the first is inside the KDF
    with pytest.raises(Problem) as refused:
        await kdf._run(work)
    assert refused.value.status == 503 and refused.value.headers["Retry-After"] == "1"
    release.set()
    await asyncio.gather(*tasks)
    assert most == 1
    assert await kdf.verify_password(await kdf.hash_password("pw one two"), "pw one two")


def a2a_call(text: str = "hello") -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
        "role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": text}]}}}


async def key_last_used(http: httpx.AsyncClient, owner: dict[str, str], agent_id: str,
                        key_id: str) -> str | None:
    keys = (await http.get(f"/v1/agents/{agent_id}/keys", headers=owner)).json()["keys"]
    return next(k["last_used_at"] for k in keys if k["key_id"] == key_id)  # type: ignore[no-any-return]


@pytest.mark.parametrize("throttled", [{"token_failures": (SLOW, 3)}], indirect=True)
async def test_wrong_x_api_keys_back_off_and_leave_last_used_alone(
        throttled: httpx.AsyncClient, uniq: str) -> None:
    """An attacker who knows a key id (it is in every key, and in logs) tries
    secrets through A2A's ``X-API-Key`` and the token exchange."""
    http = throttled
    assert (await register(http, f"x{uniq}")).status_code == 201
    token = (await login(http, f"x{uniq}", PASSWORD, "10.5.0.9")).json()["access_token"]
    owner = {"Authorization": f"Bearer {token}"}
    target = (await http.post("/v1/agents", json={"name": "t"}, headers=owner)).json()
    key = (await http.post(f"/v1/agents/{target['agent_id']}/keys", headers=owner)).json()
    forged = f"mk_{key['key_id']}_not-the-secret"

    statuses = []
    for _ in range(5):
        resp = await http.post(f"/a2a/{target['agent_id']}", json=a2a_call(),
                               headers={"X-API-Key": forged, **at("10.5.0.1")})
        statuses.append(resp.status_code)
    assert statuses == [401, 401, 401, 429, 429], statuses
    too_many(resp, "API-key")
    # The failures share the exchange's bucket: the same address is refused there too.
    too_many(await http.post("/v1/auth/token", json={"api_key": forged}, headers=at("10.5.0.1")),
             "API-key")
    problem(await http.post("/v1/auth/token", json={"api_key": forged}, headers=at("10.5.0.2")),
            401)
    # No wrong secret marked the key used.
    assert await key_last_used(http, owner, target["agent_id"], key["key_id"]) is None
    # The right key from the locked address is refused without a look-up; elsewhere it works.
    too_many(await http.post(f"/a2a/{target['agent_id']}", json=a2a_call(),
                             headers={"X-API-Key": key["api_key"], **at("10.5.0.1")}), "API-key")
    resp = await http.post("/v1/auth/token", json={"api_key": key["api_key"]},
                           headers=at("10.5.0.3"))
    assert resp.status_code == 200, resp.text
    assert await key_last_used(http, owner, target["agent_id"], key["key_id"]) is not None
