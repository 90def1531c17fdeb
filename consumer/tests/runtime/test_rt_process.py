"""A consumer process against a real etcd and broker (in-process): shards assigned, messages
consumed and published exactly once, transactions committed, drain on stop.

The store here is an in-memory stand-in for a remote database (a fenced
checkpoint per shard), shared by the processes of a test; PostgreSQL has its
own tests (test_store_sql.py) and the stream-sum test runs them all together.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Collection
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from gazette import keyspace, message
from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.client import AsyncOperation
from gazette.broker.server import testing as server_testing
from gazette.consumer import protocol as pc
from gazette.consumer import runtime
from gazette.consumer.runtime import config, process
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SOURCES = ["rt/in/part-0", "rt/in/part-1"]
OUT = "rt/out"
NDJSON = pb.CONTENT_TYPE_JSON_LINES


class Num(message.JSONMessage):
    pass


@dataclasses.dataclass
class Row:
    fence: int = 0
    checkpoint: bytes = b""
    state: dict[str, int] = dataclasses.field(default_factory=dict)


class MemoryDB:
    """A remote database in a dict: a fenced checkpoint and state per shard."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.commits = 0


class MemoryStore:
    def __init__(self, db: MemoryDB, fqn: str) -> None:
        self.db = db
        self.fqn = fqn
        self.fence = 0
        self.pending: dict[str, int] = {}

    async def restore_checkpoint(self, shard: runtime.Shard) -> pc.Checkpoint:
        row = self.db.rows.setdefault(self.fqn, Row())
        row.fence += 1
        self.fence = row.fence
        return pc.Checkpoint.FromString(row.checkpoint)

    def start_commit(
        self, shard: runtime.Shard, cp: pc.Checkpoint, wait_for: Collection[AsyncOperation]
    ) -> AsyncOperation:
        state, self.pending = self.pending, {}

        async def commit() -> None:
            for op in wait_for:
                await op.wait()
                if op.error is not None:
                    raise RuntimeError(f"dependency failed: {op.error}")
            row = self.db.rows[self.fqn]
            if row.fence != self.fence:
                raise RuntimeError("checkpoint fence was updated (ie, by a new primary)")
            row.checkpoint = cp.SerializeToString()
            row.state.update(state)
            self.db.commits += 1

        return shard.run_operation("commit", commit())

    async def destroy(self) -> None:
        pass


class Echo:
    """Counts each input number into its shard's state and publishes it to OUT, in transaction."""

    def __init__(self, db: MemoryDB) -> None:
        self.db = db

    async def new_store(self, shard: runtime.Shard) -> runtime.Store:
        return MemoryStore(self.db, shard.fqn)

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        return Num()

    async def consume_message(
        self, shard: Any, store: Any, env: message.Envelope, pub: message.Publisher
    ) -> None:
        doc = env.message.doc  # type: ignore[attr-defined]
        if message.get_flags(env.message.get_uuid()) == message.Flags.ACK_TXN:
            return
        store.pending[str(doc["n"])] = store.pending.get(str(doc["n"]), 0) + 1
        pub.publish_uncommitted(lambda _m: (OUT, NDJSON), Num({"UUID": "", "n": doc["n"]}))

    async def finalize_txn(self, shard: Any, store: Any, pub: message.Publisher) -> None:
        pass


def shard_spec(shard_id: str, source: str) -> pc.ShardSpec:
    spec = pc.ShardSpec(id=shard_id, hot_standbys=1)
    spec.sources.add(journal=source)
    spec.max_txn_duration.CopyFrom(duration_pb2.Duration(nanos=200_000_000))
    return spec


@pytest.fixture
async def cluster(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[tuple[server_testing.InProcessCluster, client.JournalClient]]:
    async with (
        server_testing.InProcessCluster(etcd_server.endpoint, work_dir=tmp_path, brokers=1) as c,
        client.JournalClient(client.ClientConfig(address=c[0].endpoint)) as jc,
    ):
        req = pb.ApplyRequest()
        for name in [*SOURCES, OUT]:
            spec = testing.journal_spec(name, labels=[(pb.LABEL_CONTENT_TYPE, NDJSON)])
            req.changes.add(upsert=spec)
        await client.apply_journals(jc, req)
        deadline = time.monotonic() + 30
        for name in [*SOURCES, OUT]:
            while True:
                try:
                    await asyncio.wait_for(client.append(jc, name, b""), 5)
                    break
                except (client.errors.ClientError, TimeoutError):
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
        yield c, jc


async def read_committed(jc: client.JournalClient, journal: str) -> list[int]:
    out: list[int] = []
    seq = message.Sequencer({}, [], 256)
    req = pb.ReadRequest(journal=journal, offset=0, block=False)
    async with message.ReadCommittedIter(jc, req, lambda _s: Num(), seq) as it:
        async for env in it:
            if message.get_flags(env.message.get_uuid()) != message.Flags.ACK_TXN:
                out.append(int(env.message.doc["n"]))  # type: ignore[attr-defined]
    return out


def consumer_config(etcd: str, broker: str, prefix: str, suffix: str) -> config.Config:
    return config.parse(
        [
            "--consumer.app", "unused:Unused",
            "--consumer.zone", "zone-a",
            "--consumer.id", suffix,
            "--consumer.host", "127.0.0.1",
            "--consumer.http-port", "-1",
            "--broker.address", broker,
            "--etcd.address", etcd,
            "--etcd.prefix", prefix,
            "--etcd.lease", "3s",
            "--consumer.drain-timeout", "10s",
        ]
    )  # fmt: skip


async def test_shards_consume_and_publish_exactly_once(
    cluster: tuple[server_testing.InProcessCluster, client.JournalClient],
    etcd_server: ks_testing.EtcdServer,
    etcd: Any,
) -> None:
    brokers, jc = cluster
    prefix = "/gazette/consumers/rt-test"
    changes = [
        (f"shard-{i:03d}", shard_spec(f"shard-{i:03d}", src).SerializeToString(), 0)
        for i, src in enumerate(SOURCES)
    ]
    await keyspace.apply_changes(etcd, prefix, changes)

    db = MemoryDB()
    app = Echo(db)
    stops = [asyncio.Event(), asyncio.Event()]
    starts: list[asyncio.Future[process.Serving]] = []
    tasks = []
    for i, stop in enumerate(stops):
        cfg = consumer_config(etcd_server.endpoint, brokers[0].endpoint, prefix, f"consumer-{i}")
        fut: asyncio.Future[process.Serving] = asyncio.get_running_loop().create_future()
        starts.append(fut)
        tasks.append(asyncio.create_task(process.serve(cfg, app, stop=stop, started=fut)))
    try:
        async with asyncio.timeout(30):
            await asyncio.gather(*starts)

        # Inputs: committed messages, and a duplicate of each (an at-least-once retry).
        n = 200
        async with client.AppendService(jc) as svc:
            pub = message.Publisher(svc)
            for i in range(n):
                msg = Num({"UUID": "", "n": i})
                aa = pub.publish_committed(lambda _m, i=i: (SOURCES[i % 2], NDJSON), msg)
                with svc.start_append(SOURCES[i % 2]) as dup:
                    dup.write(message.framing_for(NDJSON).marshal(msg))
            for op in svc.pending_except(""):
                await op
            del aa

        async with asyncio.timeout(30):
            while True:
                got = await read_committed(jc, OUT)
                if len(got) >= n:
                    break
                await asyncio.sleep(0.2)
        assert sorted(got) == list(range(n)), "each input published exactly once"
        counted: dict[str, int] = {}
        for row in db.rows.values():
            for k, v in row.state.items():
                counted[k] = counted.get(k, 0) + v
        assert counted == {str(i): 1 for i in range(n)}
        assert db.commits >= 2
        # Checkpoints hold read-through offsets of the sources.
        cps = [pc.Checkpoint.FromString(r.checkpoint) for r in db.rows.values()]
        assert sorted(j for cp in cps for j in cp.sources if j in SOURCES) == SOURCES
    finally:
        for stop in stops:
            stop.set()
        async with asyncio.timeout(30):
            await asyncio.gather(*tasks, return_exceptions=True)
    for t in tasks:
        assert t.exception() is None


async def test_a_message_that_does_not_parse_fails_the_shard_naming_journal_and_offset(
    cluster: tuple[server_testing.InProcessCluster, client.JournalClient],
    etcd_server: ks_testing.EtcdServer,
    etcd: Any,
) -> None:
    brokers, jc = cluster
    prefix = "/gazette/consumers/rt-bad"
    spec = shard_spec("shard-bad", SOURCES[0])
    spec.hot_standbys = 0
    await keyspace.apply_changes(etcd, prefix, [("shard-bad", spec.SerializeToString(), 0)])
    good = b'{"UUID":"00000000-0000-0000-0000-000000000000","n":1}\n'
    first = await client.append(jc, SOURCES[0], good)
    await client.append(jc, SOURCES[0], b"{not json\n")
    bad_at = first.commit.end

    stop = asyncio.Event()
    cfg = consumer_config(etcd_server.endpoint, brokers[0].endpoint, prefix, "consumer-bad")
    task = asyncio.create_task(process.serve(cfg, Echo(MemoryDB()), stop=stop))
    try:
        async with asyncio.timeout(30):
            while True:
                kvs = await etcd.get_prefix(f"{prefix}/assign/shard-bad#".encode())
                statuses = [pc.ReplicaStatus.FromString(kv.value) for kv in kvs]
                failed = [s for s in statuses if s.code == pc.ReplicaStatus.FAILED]
                if failed:
                    break
                await asyncio.sleep(0.1)
        (text,) = failed[0].errors
        assert f"{SOURCES[0]}@{bad_at}" in text, text
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await asyncio.gather(task, return_exceptions=True)
    assert task.exception() is None


async def test_a_stopped_process_drains_its_shards_to_the_others(
    cluster: tuple[server_testing.InProcessCluster, client.JournalClient],
    etcd_server: ks_testing.EtcdServer,
    etcd: Any,
) -> None:
    brokers, jc = cluster
    prefix = "/gazette/consumers/rt-drain"
    # No hot standby: with one, an exiting member of two can't drain (the other can't
    # hold both replicas; Gazette's allocator then waits, ours until the drain timeout).
    specs = [shard_spec(f"shard-{i:03d}", src) for i, src in enumerate(SOURCES)]
    for spec in specs:
        spec.hot_standbys = 0
    changes = [(s.id, s.SerializeToString(), 0) for s in specs]
    await keyspace.apply_changes(etcd, prefix, changes)
    db = MemoryDB()
    app = Echo(db)
    stops = [asyncio.Event(), asyncio.Event()]
    tasks = []
    for i, stop in enumerate(stops):
        cfg = consumer_config(etcd_server.endpoint, brokers[0].endpoint, prefix, f"consumer-{i}")
        tasks.append(asyncio.create_task(process.serve(cfg, app, stop=stop)))

    async def primaries() -> dict[str, str]:
        out = {}
        for kv in await etcd.get_prefix(f"{prefix}/assign/".encode()):
            shard, _zone, member, slot = kv.key.decode().rsplit("/", 1)[1].split("#")
            status = pc.ReplicaStatus.FromString(kv.value)
            if slot == "0" and status.code == pc.ReplicaStatus.PRIMARY:
                out[shard] = member
        return out

    async def publish(numbers: range) -> None:
        async with client.AppendService(jc) as svc:
            pub = message.Publisher(svc)
            for i in numbers:
                pub.publish_committed(
                    lambda _m, i=i: (SOURCES[i % 2], NDJSON), Num({"UUID": "", "n": i})
                )
            for op in svc.pending_except(""):
                await op

    try:
        async with asyncio.timeout(30):
            while True:
                if len(await primaries()) == 2:
                    break
                await asyncio.sleep(0.1)
        await publish(range(50))
        # SIGTERM (what the process's signal handler does) to the process serving a shard.
        victim = sorted((await primaries()).values())[0]
        index = int(victim.rsplit("-", 1)[1])
        began = time.monotonic()
        stops[index].set()
        async with asyncio.timeout(30):
            await tasks[index]
        assert tasks[index].exception() is None
        assert time.monotonic() - began < 10, "drained before the drain timeout"
        async with asyncio.timeout(10):
            while True:
                if set((await primaries()).values()) == {f"consumer-{1 - index}"}:
                    break
                await asyncio.sleep(0.1)
        await publish(range(50, 100))
        async with asyncio.timeout(30):
            while True:
                if len(got := await read_committed(jc, OUT)) >= 100:
                    break
                await asyncio.sleep(0.2)
        assert sorted(got) == list(range(100))
    finally:
        for stop in stops:
            stop.set()
        async with asyncio.timeout(30):
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_shard_api_list_stat_apply_unassign(
    cluster: tuple[server_testing.InProcessCluster, client.JournalClient],
    etcd_server: ks_testing.EtcdServer,
    etcd: Any,
) -> None:
    from gazette.broker.protocol import dial
    from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc

    brokers, jc = cluster
    prefix = "/gazette/consumers/rt-api"
    db = MemoryDB()
    stops = [asyncio.Event(), asyncio.Event()]
    starts: list[asyncio.Future[process.Serving]] = []
    tasks = []
    for i, stop in enumerate(stops):
        cfg = consumer_config(etcd_server.endpoint, brokers[0].endpoint, prefix, f"consumer-{i}")
        fut: asyncio.Future[process.Serving] = asyncio.get_running_loop().create_future()
        starts.append(fut)
        tasks.append(asyncio.create_task(process.serve(cfg, Echo(db), stop=stop, started=fut)))
    try:
        async with asyncio.timeout(30):
            serving = await asyncio.gather(*starts)
        async with dial.channel(serving[0].endpoint) as ch:
            stub = pc_grpc.ShardStub(ch)
            # Apply: create two shards, then a create of an existing one fails its check.
            req = pc.ApplyRequest()
            for i, src in enumerate(SOURCES):
                req.changes.add(upsert=shard_spec(f"shard-{i:03d}", src), expect_mod_revision=0)
            resp = await stub.Apply(req)
            assert resp.status == pc.Status.OK
            again = await stub.Apply(req)
            assert again.status == pc.Status.ETCD_TRANSACTION_FAILED

            # List, by the id meta-label too, once both have a PRIMARY.
            async with asyncio.timeout(30):
                while True:
                    listed = await stub.List(pc.ListRequest())
                    codes = [sorted(s.code for s in shard.status) for shard in listed.shards]
                    if codes == [[pc.ReplicaStatus.STANDBY, pc.ReplicaStatus.PRIMARY]] * 2:
                        break
                    await asyncio.sleep(0.1)
            assert [s.spec.id for s in listed.shards] == ["shard-000", "shard-001"]
            assert all(len(s.route.endpoints) == 2 and s.route.primary != -1 for s in listed.shards)
            one = await stub.List(pc.ListRequest(selector=pb.parse_selector("id=shard-001")))
            assert [s.spec.id for s in one.shards] == ["shard-001"]
            # gazctl shards list, as a user runs it.
            out = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "gazette.gazctl", "shards", "list", "--rf",
                 "--consumer.address", serving[1].endpoint],
                capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            lines = out.stdout.splitlines()
            assert lines[0].split() == ["ID", "Status", "RF", "Primary", "Replicas"]
            assert [line.split()[:3] for line in lines[1:]] == [
                ["shard-000", "PRIMARY", "2"],
                ["shard-001", "PRIMARY", "2"],
            ], out.stdout

            # Stat with a read barrier: it answers once the shard committed through it
            # (from whichever process: a non-primary proxies).
            head = (
                await client.append(
                    jc, SOURCES[1], b'{"UUID":"00000000-0000-0000-0000-000000000000","n":7}\n'
                )
            ).commit.end
            for s in serving:
                async with dial.channel(s.endpoint) as ch2:
                    stat = await pc_grpc.ShardStub(ch2).Stat(
                        pc.StatRequest(shard="shard-001", read_through={SOURCES[1]: head}),
                        timeout=20,
                    )
                    assert stat.status == pc.Status.OK
                    assert stat.read_through[SOURCES[1]] >= head
            missing = await stub.Stat(pc.StatRequest(shard="shard-nope"))
            assert missing.status == pc.Status.SHARD_NOT_FOUND

            # Unassign the primary of shard-000: its assignment goes, and a new primary comes.
            un = await stub.Unassign(pc.UnassignRequest(shards=["shard-000"]))
            assert un.status == pc.Status.OK and list(un.shards) == ["shard-000"]
            dry = await stub.Unassign(pc.UnassignRequest(shards=["shard-000"], only_failed=True))
            assert list(dry.shards) == []

            # Delete both.
            req = pc.ApplyRequest()
            for s in listed.shards:
                req.changes.add(delete=s.spec.id, expect_mod_revision=-1)
            assert (await stub.Apply(req)).status == pc.Status.OK
            async with asyncio.timeout(30):
                while True:
                    if not (await stub.List(pc.ListRequest())).shards:
                        break
                    await asyncio.sleep(0.1)
            bad = pc.ApplyRequest()
            bad.changes.add(delete="x", expect_mod_revision=-1)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Apply(bad)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        for stop in stops:
            stop.set()
        async with asyncio.timeout(30):
            await asyncio.gather(*tasks, return_exceptions=True)
    for t in tasks:
        assert t.exception() is None


class Tally:
    """Counts messages into a JSONFileStore recorded into the shard's recovery log."""

    def __init__(self) -> None:
        self.stores: dict[str, Any] = {}

    async def new_store(self, shard: Any) -> Any:
        from gazette.consumer.runtime import store_json_file

        recorder = shard.recorder
        assert recorder is not None, "the spec names a recovery log"
        store = store_json_file.JSONFileStore(recorder.directory, {"n": 0}, recorder)
        self.stores[shard.id] = store
        return store

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        return Num()

    async def consume_message(
        self, shard: Any, store: Any, env: message.Envelope, pub: message.Publisher
    ) -> None:
        if message.get_flags(env.message.get_uuid()) != message.Flags.ACK_TXN:
            store.state["n"] += 1

    async def finalize_txn(self, shard: Any, store: Any, pub: message.Publisher) -> None:
        pass


async def recorded_shard(
    jc: client.JournalClient,
    etcd: Any,
    prefix: str,
    shard_id: str,
    source: str,
    hot_standbys: int,
) -> str:
    """Create a shard with a recovery log (and the log journal); returns the log's name."""
    log_journal = f"{prefix.rsplit('/', 1)[1]}/{shard_id}"
    spec = testing.journal_spec(
        log_journal, labels=[(pb.LABEL_CONTENT_TYPE, "application/x-gazette-recoverylog")]
    )
    await client.apply_journals(jc, pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec)]))
    shard = shard_spec(shard_id, source)
    shard.hot_standbys = hot_standbys
    shard.recovery_log_prefix = prefix.rsplit("/", 1)[1]
    shard.hint_prefix = f"/gazette/hints/{prefix.rsplit('/', 1)[1]}"
    shard.hint_backups = 2
    await keyspace.apply_changes(etcd, prefix, [(shard.id, shard.SerializeToString(), 0)])
    return log_journal


async def publish_numbers(jc: client.JournalClient, journal: str, count: int) -> int:
    """Publish ``count`` committed Nums to ``journal``; returns its write head after."""
    async with client.AppendService(jc) as svc:
        pub = message.Publisher(svc)
        for i in range(count):
            pub.publish_committed(lambda _m: (journal, NDJSON), Num({"UUID": "", "n": i}))
        for op in svc.pending_except(""):
            await op
    return int((await client.append(jc, journal, b"")).commit.end)


async def wait_counted(app: Tally, shard_id: str, journal: str, n: int, head: int) -> None:
    """Until ``app``'s store of ``shard_id`` counted ``n`` and committed through ``head``."""
    async with asyncio.timeout(30):
        while True:
            store = app.stores.get(shard_id)
            if store is not None and store.state["n"] >= n:
                cp = await store.restore_checkpoint(None)
                if cp.sources[journal].read_through >= head:
                    return
            await asyncio.sleep(0.1)


async def test_a_new_primary_recovers_its_store_from_the_recovery_log(
    cluster: tuple[server_testing.InProcessCluster, client.JournalClient],
    etcd_server: ks_testing.EtcdServer,
    etcd: Any,
) -> None:
    brokers, jc = cluster
    prefix = "/gazette/consumers/rt-recovery"
    await recorded_shard(jc, etcd, prefix, "shard-rec", SOURCES[0], hot_standbys=0)

    async def run_until(app: Tally, name: str, n: int, head: int) -> None:
        stop = asyncio.Event()
        cfg = consumer_config(etcd_server.endpoint, brokers[0].endpoint, prefix, name)
        task = asyncio.create_task(process.serve(cfg, app, stop=stop))
        try:
            await wait_counted(app, "shard-rec", SOURCES[0], n, head)
        finally:
            stop.set()
            async with asyncio.timeout(30):
                await task

    first = Tally()
    await run_until(first, "consumer-a", 25, await publish_numbers(jc, SOURCES[0], 25))
    first_dir = first.stores["shard-rec"].directory
    assert not first_dir.exists(), "the local copy goes with the assignment"

    # Another process (an empty disk) takes the shard: it replays the log, then goes on.
    second = Tally()
    await run_until(second, "consumer-b", 40, await publish_numbers(jc, SOURCES[0], 15))
    assert second.stores["shard-rec"].state == {"n": 40}, "recovered 25, then 15 more, once each"
    backup = await etcd.get(b"/gazette/hints/rt-recovery/shard-rec.backup.0")
    assert backup is not None and b'"log":"rt-recovery/shard-rec"' in backup.value


async def test_a_hot_standby_takes_over_from_a_crashed_primary(
    cluster: tuple[server_testing.InProcessCluster, client.JournalClient],
    etcd_server: ks_testing.EtcdServer,
    etcd: Any,
) -> None:
    brokers, jc = cluster
    prefix = "/gazette/consumers/rt-standby"
    log_journal = await recorded_shard(jc, etcd, prefix, "shard-hot", SOURCES[1], hot_standbys=1)

    async def statuses() -> dict[str, int]:
        out = {}
        for kv in await etcd.get_prefix(f"{prefix}/assign/shard-hot#".encode()):
            member = kv.key.decode().split("#")[2]
            out[member] = pc.ReplicaStatus.FromString(kv.value).code
        return out

    apps = {name: Tally() for name in ("consumer-x", "consumer-y")}
    stops = {name: asyncio.Event() for name in apps}
    tasks = {
        name: asyncio.create_task(
            process.serve(
                consumer_config(etcd_server.endpoint, brokers[0].endpoint, prefix, name),
                apps[name],
                stop=stops[name],
            )
        )
        for name in apps
    }
    try:
        async with asyncio.timeout(30):
            while True:
                st = await statuses()
                if sorted(st.values()) == [pc.ReplicaStatus.STANDBY, pc.ReplicaStatus.PRIMARY]:
                    break
                await asyncio.sleep(0.1)
        primary = next(m for m, c in st.items() if c == pc.ReplicaStatus.PRIMARY)
        standby = next(m for m in st if m != primary)
        head = await publish_numbers(jc, SOURCES[1], 30)

        await wait_counted(apps[primary], "shard-hot", SOURCES[1], 30, head)
        # The primary crashes (no drain, its lease runs out): the standby, which followed
        # the log all along, is promoted, hands the log off and goes on.
        tasks[primary].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[primary]
        head = await publish_numbers(jc, SOURCES[1], 12)
        await wait_counted(apps[standby], "shard-hot", SOURCES[1], 42, head)
        assert apps[standby].stores["shard-hot"].state == {"n": 42}
        assert (await statuses()).get(standby) == pc.ReplicaStatus.PRIMARY

        # GetHints: the hints each primary recovered with are stored as backups (the
        # newest first: the first primary's moved to .backup.1).
        from gazette.broker.protocol import dial
        from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc

        member = await etcd.get(f"{prefix}/members/zone-a#{standby}".encode())
        endpoint = pc.ConsumerSpec.FromString(member.value).process_spec.endpoint
        async with dial.channel(endpoint) as ch:
            got = await pc_grpc.ShardStub(ch).GetHints(pc.GetHintsRequest(shard="shard-hot"))
        assert got.status == pc.Status.OK
        assert [h.hints.log for h in got.backup_hints] == [log_journal, log_journal]
    finally:
        for stop in stops.values():
            stop.set()
        async with asyncio.timeout(30):
            await asyncio.gather(*tasks.values(), return_exceptions=True)
