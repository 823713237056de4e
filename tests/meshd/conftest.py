"""Fixtures for the meshd tests.

Owners cost a password hash each (slow by design), so two owners are made once
per session and every test gets fresh agents under them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle


@dataclass
class World:
    factory: MeshFactory
    alice: OwnerHandle
    bob: OwnerHandle

    async def pair(self, tag: str) -> tuple[AgentHandle, AgentHandle]:
        """A fresh agent of alice's and one of bob's, already friends."""
        a = await self.alice.agent(f"a{tag}")
        b = await self.bob.agent(f"b{tag}")
        await self.factory.befriend(a, b)
        return a, b


@pytest.fixture(scope="session")
async def world(gateway: str) -> AsyncIterator[World]:
    async with MeshFactory.connect(gateway) as factory:
        yield World(factory, await factory.owner(), await factory.owner())


@pytest.fixture
async def pair(world: World, uniq: str) -> tuple[AgentHandle, AgentHandle]:
    return await world.pair(uniq)
