"""Owners (users)."""

from __future__ import annotations

import asyncpg

Conn = asyncpg.Connection | asyncpg.Pool


async def create(conn: Conn, username: str, password_hash: str, is_admin: bool) -> asyncpg.Record | None:
    """Insert a user; None when the username is taken."""
    return await conn.fetchrow(
        "INSERT INTO users (username, password_hash, is_admin) VALUES ($1, $2, $3) "
        "ON CONFLICT (username) DO NOTHING RETURNING user_id, username, is_admin, created_at",
        username, password_hash, is_admin,
    )


async def by_username(conn: Conn, username: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT user_id, username, password_hash, is_admin FROM users WHERE username = $1", username)


async def by_id(conn: Conn, user_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT user_id, username, is_admin FROM users WHERE user_id = $1", user_id)
