"""pytest fixtures of a real etcd (register in a conftest.py).

::

    pytest_plugins = ["gazette.keyspace.testing.plugin"]

    @pytest.mark.integration
    async def test_put(etcd: aetcd.Client, etcd_root: str) -> None:
        await etcd.put(f"{etcd_root}/items/a".encode(), b"...")

Fixtures:

* ``etcd_server`` (session): an :class:`~gazette.keyspace.testing.EtcdServer`
  started on free loopback ports on first use, stopped at the session's end.
* ``etcd`` (test): a connected ``aetcd.Client``. The test fails up front if
  etcd holds any key (a previous test didn't clean up), and every key is
  deleted when it ends, pass or fail.
* ``etcd_root`` (test): Gazette's default root, ``/gazette/cluster``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import aetcd
import aetcd.rpc
import pytest
import pytest_asyncio

from gazette.keyspace import etcd as etcd_mod
from gazette.keyspace import testing

__all__ = ["etcd", "etcd_root", "etcd_server"]


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[testing.EtcdServer]:
    server = testing.EtcdServer(work_dir=tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture
async def etcd(etcd_server: testing.EtcdServer) -> AsyncIterator[aetcd.Client]:
    client = await etcd_mod.connect(etcd_server.endpoint, call_timeout=10)
    try:
        stub = await etcd_mod.kv_stub(client)
        left = await stub.Range(
            aetcd.rpc.RangeRequest(key=b"\0", range_end=b"\0", limit=5, keys_only=True)
        )
        if left.kvs:
            keys = [kv.key.decode(errors="replace") for kv in left.kvs]
            pytest.fail(f"etcd is not empty (did a previous test not clean up?): {keys}")
        yield client
    finally:
        try:
            await etcd_mod.delete_all(client)
        finally:
            await client.close()


@pytest.fixture
def etcd_root() -> str:
    return "/gazette/cluster"
