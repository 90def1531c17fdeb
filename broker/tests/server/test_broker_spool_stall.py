"""A stalled spool disk fails its appends, in bounded time, and nothing else.

An in-process broker spools on a FUSE passthrough mount (``stallfs``) whose
writes can be made to block, as on a disk that stopped answering. While it
is stalled, appends fail within ``--broker.spool-write-timeout`` with
``UNAVAILABLE`` and a message naming the journal, the directory and the
timeout, and later ones fail at once; List and ``/debug/ready`` keep
answering, and the broker's etcd lease outlives its TTL (before spool writes
left the event loop, one stuck write froze the whole broker and it lost its
lease). Once the disk answers again appends succeed.

Without FUSE here (no ``/dev/fuse``, ``fusermount``, libfuse2 or fusepy) the
test is skipped: the bounded writer itself is covered by the fake stalled
files of ``broker/tests/fragment/test_fragment_disk_worker.py``.
"""

from __future__ import annotations

import asyncio
import gc
import pathlib
import threading
import time
import urllib.request
from typing import Any

import grpc
import pytest

from gazette import allocator, keyspace
from gazette.broker import protocol as pb
from gazette.broker import stallfs, testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import testing as server_testing
from gazette.keyspace import testing as ks_testing

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(stallfs.unavailable() is not None, reason=f"{stallfs.unavailable()}"),
]

WRITE_TIMEOUT = 2.0
LEASE = 3.0
STUCK = "stall/stuck"
OTHER = "stall/other"


def _stub(ch: grpc.aio.Channel) -> pb2_grpc.JournalAsyncStub:
    return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]


def _disk_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("spool-disk")]


async def _member(endpoint: str, key: str) -> tuple[int, int]:
    """(lease, create revision) of the broker's member key: both change if it re-announces."""
    client = await keyspace.connect(endpoint, call_timeout=5)
    try:
        kv = await client.get(key.encode())
    finally:
        await client.close()
    assert kv is not None, f"{key} is gone: the broker lost its lease"
    return kv.lease, kv.create_revision


async def _append_failure(stub: pb2_grpc.JournalAsyncStub, journal: str) -> tuple[Any, float]:
    start = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        resp = await testing.append(stub, journal, [b"while stalled\n"], deadline=30)
        pytest.fail(f"append to a stalled disk answered {resp}")
    return raised.value, time.monotonic() - start


async def _still_serving(stub: pb2_grpc.JournalAsyncStub, ready_url: str) -> None:
    """One List and one /debug/ready, each within a second."""
    call = stub.List(pb.ListRequest(), timeout=1.0)
    listed = await call.read()
    call.cancel()
    assert listed is not grpc.aio.EOF
    assert {j.spec.name for j in listed.journals} >= {STUCK, OTHER}
    with await asyncio.to_thread(urllib.request.urlopen, ready_url, None, 1.0) as r:
        assert r.status == 200


async def _append_once_the_disk_answers(
    stub: pb2_grpc.JournalAsyncStub, journal: str, data: bytes, within: float = 20.0
) -> pb.AppendResponse:
    """Appends ``data``, retrying while the broker still reports the stalled write.

    The write stuck in the kernel returns a moment after the disk is unstalled; until
    it has, an append that writes to the spool is refused as stalled (a zero-byte one,
    as ``wait_writable`` sends, writes nothing and succeeds). Any other failure, or
    the stall outlasting ``within``, fails the test.
    """
    deadline = time.monotonic() + within
    while True:
        try:
            return await testing.append(stub, journal, [data])
        except grpc.aio.AioRpcError as e:
            stalled = e.code() == grpc.StatusCode.UNAVAILABLE and "stalled" in (e.details() or "")
            if not stalled or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


@pytest.mark.timeout(120)
async def test_a_stalled_spool_disk_fails_appends_in_bounded_time_and_nothing_else(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    mount = tmp_path / "mnt"
    with stallfs.StallFS(tmp_path / "disk", mount) as disk:
        try:
            async with server_testing.InProcessCluster(
                etcd_server.endpoint,
                work_dir=tmp_path / "cluster",
                brokers=1,
                lease=f"{LEASE:g}s",
                extra_args=[
                    "--broker.spool-dir", str(mount),
                    "--broker.spool-write-timeout", f"{WRITE_TIMEOUT:g}s",
                ],
            ) as cluster:  # fmt: skip
                broker = cluster[0]
                assert broker.serving is not None
                ready_url = f"http://127.0.0.1:{broker.serving.http_port}/debug/ready"
                member_key = allocator.member_key(cluster.etcd_prefix, broker.zone, broker.suffix)
                await cluster.apply(
                    *(testing.journal_spec(j, stores=[cluster.store_url]) for j in (STUCK, OTHER))
                )
                async with cluster.channel(0) as ch:
                    stub = _stub(ch)
                    for j in (STUCK, OTHER):
                        await testing.wait_writable(stub, j)
                        assert (await testing.append(stub, j, [b"before\n"])).status == pb.OK
                    member = await _member(etcd_server.endpoint, member_key)

                    disk.stall()
                    stalled_at = time.monotonic()
                    # Appends fail within the timeout (plus the RPC's own work), clearly.
                    err, took = await _append_failure(stub, STUCK)
                    assert took < WRITE_TIMEOUT + 2.0, took
                    assert err.code() == grpc.StatusCode.UNAVAILABLE, err
                    details = err.details() or ""
                    assert STUCK in details and str(mount) in details, details
                    assert f"{WRITE_TIMEOUT:g}s" in details, details
                    # The write is still stuck: the next ones fail at once, any journal.
                    for j in (STUCK, OTHER):
                        err, took = await _append_failure(stub, j)
                        assert took < 1.0, (j, took)
                        assert err.code() == grpc.StatusCode.UNAVAILABLE, err
                        assert "stalled" in (err.details() or ""), err.details()

                    # Meanwhile the broker serves, and keeps its lease past its TTL.
                    while time.monotonic() - stalled_at < 2 * LEASE:
                        await _still_serving(stub, ready_url)
                        await asyncio.sleep(0.2)
                    assert await _member(etcd_server.endpoint, member_key) == member

                    disk.unstall()
                    # The stuck write returns; appends work again (the first may still
                    # meet the pipeline it broke, hence the retries).
                    for j in (STUCK, OTHER):
                        await testing.wait_writable(stub, j, within=20)
                        resp = await _append_once_the_disk_answers(stub, j, b"after\n")
                        assert resp.status == pb.OK, resp
                        content, _ = await testing.read(stub, j, 0, end_offset=resp.commit.end)
                        assert content.startswith(b"before\n") and content.endswith(b"after\n")
                        assert b"while stalled" not in content
                    await _still_serving(stub, ready_url)
            # Spool files close when collected: while the disk is still mounted.
            gc.collect()
        finally:
            disk.unstall()
    # The writer threads end on their own once idle (the broker is gone; nothing
    # else stops them): check that none is left behind, stuck or not.
    deadline = time.monotonic() + 15
    while _disk_threads():
        assert time.monotonic() < deadline, _disk_threads()
        await asyncio.sleep(0.1)
