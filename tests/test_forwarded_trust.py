"""Whose ``X-Forwarded-For`` web believes. Behind the load balancer only the
balancer's addresses are trusted (``deploy/terraform``: the public subnets), so a
client that forges the header from anywhere else keeps its own address and
cannot step round the per-address throttles."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from app.platform.settings import Settings
from tests.support.servers import serve_app

TF = Path(__file__).resolve().parents[1] / "deploy" / "terraform"
PASSWORD = "correct horse battery"
SLOW = 0.0001  # no token comes back during a test
LIMIT = 3
SPOOFED = 12
# The module's default: the public subnets of vpc_cidr 10.40.0.0/16 (two AZs),
# the way main.tf joins them for --forwarded-allow-ips. The test client
# (127.0.0.1) is outside them, like a client that reaches a task directly.
LB_SUBNETS = "10.40.0.0/20,10.40.16.0/20"


# --- the Terraform module ------------------------------------------------------------

def _tf(name: str) -> str:
    # Comments may say anything; the code is what runs.
    return re.sub(r"(?m)^\s*#.*$", "", (TF / name).read_text())


def test_terraform_web_trusts_only_the_load_balancer() -> None:
    main = _tf("main.tf")
    web = re.search(r"\bweb = \[(.*?)\]", main, re.S)
    assert web, "no web command in main.tf"
    command = web.group(1)
    assert '"--proxy-headers"' in command
    assert re.search(r'"--forwarded-allow-ips",\s*local\.forwarded_allow_ips\b', command), command
    assert '"*"' not in command
    # Nowhere in the module is every peer trusted.
    for tf in TF.glob("*.tf"):
        assert not re.search(r'forwarded[-_]allow[-_]ips[^\n]*"\*"', _tf(tf.name)), tf.name
    local = re.search(r"forwarded_allow_ips = (.+)", main)
    assert local and "var.forwarded_allow_ips" in local.group(1)
    assert "aws_subnet.public[*].cidr_block" in local.group(1)  # where aws_lb.web lives
    assert re.search(r'resource "aws_lb" "web" \{[^}]*subnets\s*=\s*aws_subnet\.public\[\*\]\.id',
                     main)


def test_terraform_variable_is_cidrs_with_a_safe_default() -> None:
    variables = _tf("variables.tf")
    block = re.search(r'variable "forwarded_allow_ips" \{(.*?)\n\}', variables, re.S)
    assert block, "no forwarded_allow_ips variable"
    body = block.group(1)
    assert re.search(r"type\s*=\s*list\(string\)", body)
    assert re.search(r"default\s*=\s*\[\]", body)  # empty: the public subnets
    assert "can(cidrhost(c, 0))" in body  # "*" (or a bare word) fails validation
    assert "description" in body
    readme = (TF / "README.md").read_text()
    assert "forwarded_allow_ips" in readme


def test_procfile_does_not_trust_every_peer() -> None:
    procfile = (TF.parents[1] / "Procfile").read_text()
    assert not re.search(r"forwarded-allow-ips[= ]+['\"]?\*", procfile)


# --- a real gateway ---------------------------------------------------------------

@pytest.fixture
async def limits(migrated: Settings, redis_client: aioredis.Redis) -> Settings:
    async for key in redis_client.scan_iter("mesh:auth:*"):
        await redis_client.delete(key)
    return migrated.model_copy(update={
        "auth_throttle_enabled": True,
        "auth_limits": {"login_failures": (SLOW, LIMIT), "login_failures_account": (SLOW, 10_000),
                        "login": (SLOW, 10_000)}})


@pytest.fixture
async def client(limits: Settings, request: pytest.FixtureRequest
                 ) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(limits, forwarded_allow_ips=request.param) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as http:
        yield http


async def _guesses(http: httpx.AsyncClient, user: str) -> list[int]:
    """LIMIT wrong passwords, then SPOOFED more, each claiming another address."""
    assert (await http.post("/v1/auth/register", json={"username": user, "password": PASSWORD},
                            headers={"X-Forwarded-For": "10.200.0.1"})).status_code == 201
    codes = []
    for i in range(LIMIT + SPOOFED):
        resp = await http.post("/v1/auth/login", json={"username": user, "password": "nope"},
                               headers={"X-Forwarded-For": f"198.51.100.{i + 1}"})
        codes.append(resp.status_code)
    return codes


@pytest.mark.parametrize("client", [LB_SUBNETS], indirect=True)
async def test_a_forged_forwarded_for_from_outside_the_lb_does_not_reset_the_throttle(
        client: httpx.AsyncClient, uniq: str) -> None:
    codes = await _guesses(client, f"spoof{uniq}")
    assert codes[:LIMIT] == [401] * LIMIT
    throttled = codes[LIMIT:]
    assert throttled == [429] * SPOOFED, \
        f"{throttled.count(429)} of {SPOOFED} forged addresses were throttled: {throttled}"


@pytest.mark.parametrize("client", ["*"], indirect=True)
async def test_trusting_every_peer_is_what_let_forged_addresses_through(
        client: httpx.AsyncClient, uniq: str) -> None:
    # The old `--forwarded-allow-ips '*'`: each forged address is a fresh bucket.
    codes = await _guesses(client, f"star{uniq}")
    assert codes == [401] * (LIMIT + SPOOFED)


@pytest.mark.parametrize("client", ["127.0.0.0/8"], indirect=True)
async def test_behind_a_trusted_proxy_each_client_keeps_its_own_bucket(
        client: httpx.AsyncClient, uniq: str) -> None:
    # The test client is the load balancer here: the addresses it forwards count.
    user = f"lb{uniq}"
    codes = await _guesses(client, user)
    assert codes == [401] * (LIMIT + SPOOFED)
    same = [(await client.post("/v1/auth/login", json={"username": user, "password": "nope"},
                               headers={"X-Forwarded-For": "198.51.100.1"})).status_code
            for _ in range(LIMIT)]
    assert same == [401] * (LIMIT - 1) + [429]


@pytest.mark.parametrize("client", ["127.0.0.0/8"], indirect=True)
async def test_through_the_lb_a_forged_header_is_only_the_left_of_the_real_one(
        client: httpx.AsyncClient, uniq: str) -> None:
    # The load balancer appends the address it saw: a client's own X-Forwarded-For
    # ends up to the left of it, and the right-most untrusted entry is the client.
    user = f"chain{uniq}"
    assert (await client.post("/v1/auth/register", json={"username": user, "password": PASSWORD},
                              headers={"X-Forwarded-For": "10.200.0.2"})).status_code == 201
    codes = []
    for i in range(LIMIT + SPOOFED):
        resp = await client.post("/v1/auth/login", json={"username": user, "password": "nope"},
                                 headers={"X-Forwarded-For": f"198.51.100.{i + 1}, 203.0.113.9"})
        codes.append(resp.status_code)
    assert codes == [401] * LIMIT + [429] * SPOOFED, codes
