"""Owners, their agents and API keys; turning credentials into principals."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from app.domain import ids, registration
from app.domain.schemas import AgentCreate, AgentPatch
from app.platform.errors import Problem, conflict, forbidden, not_found, unauthorized
from app.platform.settings import Settings
from app.responses import AgentList, AgentOut, AgentToken, KeyInfo, NewKey, OwnerToken, Registered
from app.services import a2a_remotes, security
from app.services.auth_throttle import AuthThrottle
from app.services.kdf import Kdf
from app.services.mesh import Mesh
from app.services.principal_cache import PrincipalCache
from app.services.principals import Agent, Owner
from app.store import agents as agents_store
from app.store import keys as keys_store
from app.store import oauth as oauth_store
from app.store import runs as runs_store
from app.store import users as users_store
from app.store.writes import writes


async def register(mesh: Mesh, username: str, password: str, *,
                   kdf: Kdf | None = None) -> Registered:
    settings = mesh.settings
    if not settings.registration_enabled:
        raise forbidden("registration is disabled on this mesh; ask its operator for an account")
    registration.check(username, password, admin_usernames=settings.admin_usernames)
    # argon2 is deliberately slow (~0.5 s): off the event loop, or every stream
    # and request of this process would stall behind one login.
    password_hash = await (kdf or Kdf()).hash_password(password)
    async with mesh.pool.acquire() as conn, conn.transaction():
        user = await users_store.create(conn, username, password_hash,
                                        username in settings.admin_usernames)
        if user is None:
            raise conflict(f"username '{username}' is taken")
        human = await agents_store.create(
            conn, agent_id=ids.agent_id_of(ids.VIRTUAL_USER_NAME, username),
            owner_id=user["user_id"], name=ids.VIRTUAL_USER_NAME, display_name=username,
            description=f"{username}, the human owner", skills=[], kind="virtual-user")
        assert human is not None
    return Registered.of(user, virtual_agent_id=human["agent_id"])


async def login(pool: asyncpg.Pool, settings: Settings, username: str,
                password: str, *, kdf: Kdf | None = None) -> OwnerToken:
    user = await users_store.by_username(pool, username)
    if not await (kdf or Kdf()).verify_password(user["password_hash"] if user else None,
                                               password):
        raise unauthorized("wrong username or password")
    assert user is not None
    token, ttl = security.issue_token(settings, "owner", str(user["user_id"]))
    return OwnerToken(access_token=token, token_type="bearer", expires_in=ttl)


# --- the doors: every way in goes through these (ADR 032) ----------------------------

async def register_at(mesh: Mesh, username: str, password: str, *,
                      address: str, throttle: AuthThrottle | None, kdf: Kdf) -> Registered:
    """A registration from ``address`` (the API's and the console's): the
    per-address bucket, then the process's bounded hasher."""
    if throttle is not None:
        await throttle.attempt("register", address)
    return await register(mesh, username, password, kdf=kdf)


async def login_at(pool: asyncpg.Pool, settings: Settings, username: str, password: str, *,
                   address: str, throttle: AuthThrottle | None, kdf: Kdf) -> OwnerToken:
    """An owner's sign-in from ``address`` (the API's login, the console's form):
    one throttle for both, so failures through one lock the other too, and the
    same bounded hasher."""
    if throttle is not None:
        await throttle.attempt("login", address)
        await throttle.before_login(username, address)
    try:
        return await login(pool, settings, username, password, kdf=kdf)
    except Problem as exc:
        if exc.status == 401 and throttle is not None:
            await throttle.login_failed(username, address)
        raise


async def agent_by_key(pool: asyncpg.Pool, api_key: str, *, address: str,
                       throttle: AuthThrottle | None, where: str = "") -> Agent:
    """The agent an API key names, for every place a key is presented (the token
    exchange, A2A's ``X-API-Key``): failures are throttled per address, and only
    the right secret marks the key used."""
    if throttle is not None:
        await throttle.before_token(address)
    key_id = security.parse_api_key(api_key)
    row = await keys_store.use(pool, key_id, security.hash_api_key(api_key)) if key_id else None
    if row is None:
        if throttle is not None:
            await throttle.token_failed(address)
        raise unauthorized(f"unknown or revoked API key{where}")
    return Agent(row["agent_id"], row["owner_id"], row["kind"], row["key_id"])


async def exchange_api_key(pool: asyncpg.Pool, settings: Settings, api_key: str, *,
                           address: str, throttle: AuthThrottle | None) -> AgentToken:
    agent = await agent_by_key(pool, api_key, address=address, throttle=throttle)
    token, ttl = security.issue_token(settings, "agent", agent.agent_id, key_id=agent.key_id)
    return AgentToken(access_token=token, token_type="bearer", expires_in=ttl,
                      agent_id=agent.agent_id)


def is_admin(settings: Settings, user: asyncpg.Record) -> bool:
    """Admin rights need both: the account registered while its name was listed
    (so nobody else can take the name later), and the name still listed now, so
    taking it off MESH_ADMIN_USERNAMES revokes them at the next request."""
    return bool(user["is_admin"]) and user["username"] in settings.admin_usernames


async def resolve(pool: asyncpg.Pool, settings: Settings, token: str, *,
                  cache: PrincipalCache | None = None) -> Owner | Agent:
    """Validate a bearer token and check that what it names still exists and is
    not revoked. With ``cache``, a token that passed is not checked again until a
    credential notice drops it (a revocation reaches every web process at once)."""
    if cache is not None:
        return await cache.resolve(token, functools.partial(_resolve, pool, settings, token))
    return await _resolve(pool, settings, token)


async def _resolve(pool: asyncpg.Pool, settings: Settings, token: str) -> Owner | Agent:
    try:
        claims = security.decode_token(settings, token)
    except security.TokenError as exc:
        raise unauthorized(str(exc)) from exc
    if claims["typ"] == "owner":
        user = await users_store.by_id(pool, int(claims["sub"]))
        if user is None:
            raise unauthorized("the account behind this token no longer exists")
        return Owner(user["user_id"], user["username"], is_admin(settings, user),
                     expires_at=float(claims["exp"]))
    if claims["typ"] == "agent" and "kid" in claims:
        row = await keys_store.live_agent(pool, claims["kid"], claims["sub"])
        if row is None:
            raise unauthorized("the API key behind this token was revoked or its agent deleted; "
                               "get a new key from the agent's owner")
        return Agent(row["agent_id"], row["owner_id"], row["kind"], claims["kid"],
                     expires_at=float(claims["exp"]))
    raise unauthorized("token of an unknown kind")


async def still_valid(pool: asyncpg.Pool, who: Agent) -> bool:
    """Whether an already-authenticated agent's credentials still hold (long-lived
    streams re-check after a revocation notice, and now and then anyway)."""
    if who.grant_id is not None:  # an OAuth client's grant
        return await oauth_store.is_live(pool, who.grant_id, who.agent_id)
    if who.key_id is None:  # an owner acting as its virtual user
        return await agents_store.get(pool, who.agent_id) is not None
    return await keys_store.live_agent(pool, who.key_id, who.agent_id) is not None


async def virtual_user_of(pool: asyncpg.Pool, owner: Owner, *,
                          cache: PrincipalCache | None = None) -> Agent:
    agent_id = ids.agent_id_of(ids.VIRTUAL_USER_NAME, owner.username)

    async def exists() -> bool:
        return await agents_store.get(pool, agent_id) is not None

    found = await (cache.virtual_user_exists(agent_id, exists) if cache is not None
                   else exists())
    if not found:  # only if someone deleted it by hand
        raise Problem(500, f"the virtual-user agent '{agent_id}' is missing")
    return Agent(agent_id, owner.user_id, "virtual-user", expires_at=owner.expires_at)


# --- agents --------------------------------------------------------------------------

async def create_agent(mesh: Mesh, owner: Owner, body: AgentCreate) -> AgentOut:
    if body.name == ids.VIRTUAL_USER_NAME:
        raise conflict(f"the name '{ids.VIRTUAL_USER_NAME}' is reserved for your "
                       "virtual-user agent")
    agent_id = ids.agent_id_of(body.name, owner.username)
    row = await agents_store.create(
        mesh.pool, agent_id=agent_id, owner_id=owner.user_id, name=body.name,
        display_name=body.display_name or body.name, description=body.description or "",
        skills=[s.model_dump(exclude_none=True) for s in body.skills or []],
        instructions=body.instructions or "")
    if row is None:
        raise conflict(f"you already have an agent named '{body.name}' ({agent_id})")
    return AgentOut.of(row)


async def owned_agent(pool: asyncpg.Pool | asyncpg.Connection, owner: Owner,
                      agent_id: str) -> asyncpg.Record:
    row = await agents_store.get_owned(pool, agent_id, owner.user_id)
    if row is None:
        raise not_found(f"no agent '{agent_id}' owned by you")
    return row


async def act_as(pool: asyncpg.Pool | asyncpg.Connection, owner: Owner,
                 agent_id: str) -> Agent:
    """The owner's agent ``agent_id`` as the actor of what the owner does on its
    behalf; any other agent is "not found"."""
    row = await owned_agent(pool, owner, agent_id)
    return Agent(row["agent_id"], owner.user_id, row["kind"])


async def agent_views(conn: asyncpg.Pool | asyncpg.Connection,
                      rows: Sequence[Mapping[str, Any]]) -> list[AgentOut]:
    """Agents as their owner (or the agent itself) sees them: the row, today's
    spend, and for bridged agents their remote (one query each for all)."""
    agents = [AgentOut.of(r) for r in rows]
    spent = await runs_store.spend_today(conn, [a.agent_id for a in agents]) if agents else {}
    agents = [a.model_copy(update={"spent_today_usd": round(spent.get(a.agent_id, 0.0), 6)})
              for a in agents]
    return await a2a_remotes.attach(conn, agents)


async def agent_view(conn: asyncpg.Pool | asyncpg.Connection, row: Mapping[str, Any]) -> AgentOut:
    (agent,) = await agent_views(conn, [row])
    return agent


# A null in the body means "not given" for every field but these: null removes them.
NULLABLE = frozenset({"daily_budget_usd"})


async def patch_agent(mesh: Mesh, owner: Owner, agent_id: str, body: AgentPatch) -> AgentOut:
    pool = mesh.pool
    changes = body.model_dump(exclude_unset=True)
    if "skills" in changes:
        changes["skills"] = [s.model_dump(exclude_none=True) for s in body.skills or []]
    changes = {k: v for k, v in changes.items() if v is not None or k in NULLABLE}
    if not changes:
        return await agent_view(pool, await owned_agent(pool, owner, agent_id))
    row = await agents_store.patch(pool, agent_id, owner.user_id, changes)
    if row is None:
        raise not_found(f"no agent '{agent_id}' owned by you")
    return await agent_view(pool, row)


async def delete_agent(mesh: Mesh, owner: Owner, agent_id: str) -> None:
    """``mesh.auth_changed(agent_id)`` runs after the commit (open streams end at once)."""
    async with writes(mesh.pool, wakeup=mesh.wakeup) as tx:
        row = await owned_agent(tx.conn, owner, agent_id)
        if row["kind"] == "virtual-user":
            raise conflict("the virtual-user agent stands for you and cannot be deleted")
        await agents_store.delete(tx.conn, agent_id, owner.user_id)
        tx.after_commit(functools.partial(mesh.auth_changed, agent_id))


async def create_key(mesh: Mesh, owner: Owner, agent_id: str) -> NewKey:
    await owned_agent(mesh.pool, owner, agent_id)
    key = security.new_api_key()
    row = await keys_store.create(mesh.pool, key.key_id, agent_id, key.key_hash)
    return NewKey(key_id=key.key_id, api_key=key.api_key, agent_id=agent_id,
                  created_at=row["created_at"])


async def list_keys(pool: asyncpg.Pool, owner: Owner, agent_id: str) -> list[KeyInfo]:
    await owned_agent(pool, owner, agent_id)
    return [KeyInfo.of(r) for r in await keys_store.list_for_agent(pool, agent_id)]


async def revoke_key(mesh: Mesh, owner: Owner, agent_id: str, key_id: str) -> None:
    """``mesh.auth_changed(agent_id)`` runs after the commit (open streams re-check at once)."""
    async with writes(mesh.pool, wakeup=mesh.wakeup) as tx:
        await owned_agent(tx.conn, owner, agent_id)
        if not await keys_store.revoke(tx.conn, agent_id, key_id):
            raise not_found(f"no key '{key_id}' on agent '{agent_id}'")
        # Revoking a key is the owner cutting the agent off: the OAuth clients acting
        # as it are cut off with it (they hold no key of their own), ADR 040.
        await oauth_store.revoke_for_agent(tx.conn, agent_id)
        tx.after_commit(functools.partial(mesh.auth_changed, agent_id))


async def list_agents(pool: asyncpg.Pool, owner: Owner) -> AgentList:
    return AgentList(agents=await agent_views(pool, await agents_store.list_owned(pool, owner.user_id)))
