"""Graceful exits that cannot drain: SIGTERM of a broker whose journals have nowhere
to go, and of every broker at once. Each exits 0 in bounded time having persisted
what it held, and the journal comes back with every acknowledged byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import time

import grpc
import pytest

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.integration

LEASE_S = 3
DRAIN_S = 4


def _stub(ch: grpc.aio.Channel) -> pb2_grpc.JournalAsyncStub:
    return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]


def _three_zones(
    etcd_server: ks_testing.EtcdServer, work_dir: pathlib.Path
) -> contextlib.AbstractContextManager[testing.BrokerCluster]:
    return testing.running_cluster(
        etcd_server.endpoint,
        work_dir,
        brokers=3,
        zones=("zone-a", "zone-b", "zone-c"),
        lease=f"{LEASE_S}s",
        extra_args=("--broker.drain-timeout", f"{DRAIN_S}s"),
    )


async def _append_lines(stub: pb2_grpc.JournalAsyncStub, name: str, n: int) -> bytes:
    data = b""
    for i in range(n):
        line = b"line %d of %s\n" % (i, name.encode())
        assert (await testing.append(stub, name, [line])).status == pb.OK
        data += line
    return data


async def _wait_appendable(stub: pb2_grpc.JournalAsyncStub, name: str, limit_s: float) -> float:
    """Seconds until an append of ``name`` succeeds (retrying every failure)."""
    started = time.monotonic()
    async with asyncio.timeout(limit_s):
        while True:
            with contextlib.suppress(grpc.aio.AioRpcError):
                if (await testing.append(stub, name, [b"after\n"])).status == pb.OK:
                    return time.monotonic() - started
            await asyncio.sleep(0.2)


@pytest.mark.timeout(240)
async def test_sigterm_with_nowhere_to_go_exits_after_the_drain_timeout(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    # Three brokers in three zones, replication 3: the journals of an exiting
    # broker have nowhere to go. It used to wait forever.
    with _three_zones(etcd_server, tmp_path) as cluster:
        name = "shutdown/nowhere"
        spec = testing.journal_spec(name, replication=3, stores=[cluster.store_url])
        async with cluster.channel(0) as ch:
            stub = _stub(ch)
            assert (await testing.apply_specs(stub, spec)).status == pb.OK
            await testing.wait_writable(stub, name)
            expected = await _append_lines(stub, name, 20)
        started = time.monotonic()
        code = await asyncio.to_thread(cluster[2].terminate, 60)
        took = time.monotonic() - started
        assert code == 0, cluster[2].log_tail()
        assert took < DRAIN_S + 20, f"exit took {took:.1f}s"
        assert "did not drain" in cluster[2].log_tail(80)
        async with cluster.channel(0) as ch:
            stub = _stub(ch)
            content, _ = await testing.read(stub, name, block=True, end_offset=len(expected))
            assert content == expected
        await asyncio.to_thread(cluster.restart, 2)
        async with cluster.channel(0) as ch:
            await _wait_appendable(_stub(ch), name, 60)


@pytest.mark.timeout(300)
async def test_sigterm_of_every_broker_persists_everything_and_the_journal_resumes(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    with _three_zones(etcd_server, tmp_path) as cluster:
        name = "shutdown/all"
        spec = testing.journal_spec(name, replication=3, stores=[cluster.store_url])
        async with cluster.channel(0) as ch:
            stub = _stub(ch)
            assert (await testing.apply_specs(stub, spec)).status == pb.OK
            await testing.wait_writable(stub, name)
            expected = await _append_lines(stub, name, 30)
        started = time.monotonic()
        codes = await asyncio.gather(
            *(asyncio.to_thread(cluster[i].terminate, 60) for i in range(3))
        )
        took = time.monotonic() - started
        assert codes == [0, 0, 0], [cluster[i].log_tail() for i in range(3)]
        assert took < 30, f"exits took {took:.1f}s"
        stored = sorted((cluster.file_root / name).glob("*.raw"))
        assert max(int(p.name.split("-")[1], 16) for p in stored) == len(expected)

        for i in range(3):
            await asyncio.to_thread(cluster.restart, i)
        async with cluster.channel(1) as ch:
            stub = _stub(ch)
            # Fresh spools trail the persisted fragments: the journal resumes at their
            # end by itself (after a lease and a listing), without reset-head.
            waited = await _wait_appendable(stub, name, 90)
            print(f"\njournal writable again {waited:.1f}s after the restart")
            content, _ = await testing.read(
                stub, name, block=True, end_offset=len(expected) + len(b"after\n")
            )
            assert content == expected + b"after\n"
