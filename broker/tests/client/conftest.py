"""Fixtures of the client unit tests: an in-process fake broker and a client of it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from client_fakes import FakeBroker, InstantClock

from gazette.broker import client


@pytest.fixture
async def fake() -> AsyncIterator[FakeBroker]:
    broker = FakeBroker()
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


@pytest.fixture
def clock() -> InstantClock:
    return InstantClock()


@pytest.fixture
async def jc(fake: FakeBroker, clock: InstantClock) -> AsyncIterator[client.JournalClient]:
    async with client.JournalClient(client.ClientConfig(address=fake.endpoint), clock=clock) as c:
        yield c
