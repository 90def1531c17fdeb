"""Fixtures of the client tests.

Unit tests use ``fake`` (an in-process fake broker) and ``jc`` (a client of it);
integration tests use ``brokers`` (real broker processes over the session's
etcd, able to reach the session's S3 server) and ``s3_bucket``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from client_fakes import FakeBroker, InstantClock

from gazette.broker import client, testing
from gazette.broker.fragment import testing as fragment_testing
from gazette.broker.fragment.testing import s3_bucket, s3_server
from gazette.keyspace import testing as ks_testing

__all__ = ["brokers", "clock", "fake", "jc", "native", "s3_bucket", "s3_server"]


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
def native() -> bool:
    """Whether ``jc`` appends and reads through the native data plane (the default
    where it is installed); modules of append and read tests run both ways."""
    return True


@pytest.fixture
async def jc(
    fake: FakeBroker, clock: InstantClock, native: bool
) -> AsyncIterator[client.JournalClient]:
    cfg = client.ClientConfig(address=fake.endpoint, native_appends=native, native_reads=native)
    async with client.JournalClient(cfg, clock=clock) as c:
        yield c


# --- Real brokers ----------------------------------------------------------------


@pytest.fixture(scope="module")
def brokers(
    etcd_server: ks_testing.EtcdServer,
    s3_server: fragment_testing.S3Server,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[testing.BrokerCluster]:
    """Four real brokers in two zones under a fresh etcd root; killed and wiped afterwards."""
    root = f"/gazette/client-test-{uuid.uuid4().hex[:8]}"
    cluster = testing.BrokerCluster(
        etcd_server.endpoint,
        work_dir=tmp_path_factory.mktemp("brokers"),
        brokers=4,
        etcd_prefix=root,
        env=dict(s3_server.env),
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()
        # A thread of its own: the fixture may be torn down inside a running loop.
        ks_testing.wipe_prefix(etcd_server.endpoint, root + "/")
