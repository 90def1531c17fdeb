"""RocksDBStore against a real broker: commits recorded, replayed at any point, restored."""

from __future__ import annotations

import asyncio
import bisect
import os
import pathlib
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal

import pytest
import rocksdict

from gazette.broker import client
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer import testing as consumer_testing
from gazette.consumer.recoverylog.recorded_op_pb2 import FSMHints, RecordedOp
from gazette.consumer.runtime import checkpoints, errors, store_rocksdb
from gazette.consumer.testing import TaskShard
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.timeout(120)]

LOG = "recovery/rocks-000"
Model = dict[bytes, bytes]
# Replays of the log cut inside commits (ROCKSDB_CUTS=<n> multiplies them, for a soak).
_SOAK = int(os.environ.get("ROCKSDB_CUTS", "1"))
CUT_COMMITS, CUTS_PER_COMMIT, RANDOM_CUTS = 5 * _SOAK, 5 * _SOAK, 12 * _SOAK


@pytest.fixture
async def jc(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[client.JournalClient]:
    async with consumer_testing.recovery_logs(etcd_server.endpoint, tmp_path / "b", LOG) as jc:
        yield jc


def cp_at(n: int) -> pc.Checkpoint:
    return checkpoints.build_checkpoint({"src/j": n}, [], [])


def busy_options() -> rocksdict.Options:
    """Tiny memtables and levels: flushes, compactions and MANIFEST roll-overs all the time."""
    o = rocksdict.Options(raw_mode=True)
    o.set_write_buffer_size(16 << 10)
    o.set_level_zero_file_num_compaction_trigger(2)
    o.set_target_file_size_base(32 << 10)
    o.set_max_bytes_for_level_base(128 << 10)
    o.set_max_background_jobs(4)
    return o


def read_db(path: pathlib.Path) -> tuple[Model, pc.Checkpoint]:
    """The application keys and the checkpoint of a replayed directory."""
    opts = rocksdict.Options(raw_mode=True)
    cfs = set(rocksdict.Rdict.list_cf(str(path), opts)) - {"default"}
    db = rocksdict.Rdict(str(path), opts, column_families=dict.fromkeys(cfs, opts) or None)
    try:
        items: Model = {k: v for k, v in db.items() if isinstance(k, bytes)}
    finally:
        db.close()
    cp = pc.Checkpoint()
    cp.ParseFromString(items.pop(store_rocksdb.CHECKPOINT_KEY, b""))
    return items, cp


async def play(
    jc: client.JournalClient,
    into: pathlib.Path,
    hints: FSMHints | None = None,
    end_offset: int | None = None,
    handoff: int | None = None,
) -> rl.FSM:
    player = rl.Player(jc, hints or FSMHints(log=LOG), into)
    return await player.play(handoff, end_offset=end_offset)


async def commit(
    store: store_rocksdb.RocksDBStore, tg: asyncio.TaskGroup, cp: pc.Checkpoint
) -> int:
    """Commit; the log's write head after it."""
    op = store.start_commit(TaskShard("/app/items/rocks", tg), cp, ())  # type: ignore[arg-type]
    await op.wait()
    assert op.error is None, op.error
    # An empty append reports the write head (the recorder's barriers are not sent).
    return int((await client.append(store.recorder.appends.client, LOG, b"")).commit.end)


async def new_recorder(
    jc: client.JournalClient,
    appends: client.AppendService,
    directory: pathlib.Path,
    author: int,
    fsm: rl.FSM | None = None,
) -> rl.Recorder:
    await asyncio.to_thread(directory.mkdir, exist_ok=True)
    rec = rl.Recorder(fsm or rl.FSM(FSMHints(log="none/yet")), author, directory, appends, LOG)
    await rec.start()
    return rec


@pytest.mark.integration
async def test_commit_replay_restore_and_go_on(
    jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    cfg = store_rocksdb.RocksDBStoreConfig(column_families=("side",))
    async with client.AppendService(jc) as appends, asyncio.TaskGroup() as tg:
        rec = await new_recorder(jc, appends, tmp_path / "primary", 1111)
        store = store_rocksdb.RocksDBStore(rec, config=cfg)
        assert await store.restore_checkpoint(None) == pc.Checkpoint()  # type: ignore[arg-type]
        store.put(b"a", b"1")
        store.put(b"b", b"2")
        store.put(b"s", b"side-1", column_family="side")
        assert store.get(b"a") == b"1" and store.db.get(b"a") is None  # Staged only.
        await commit(store, tg, cp_at(1))
        store.delete(b"a")
        store.put(b"c", b"3")
        assert store.get(b"a") is None and store.db.get(b"a") == b"1"
        with pytest.raises(ValueError, match="reserved"):
            store.put(b"\x00mine", b"x")
        await commit(store, tg, cp_at(2))
        store.put(b"never", b"committed")
        hints = await rec.build_hints()
        await store.destroy()

    # A new primary: plays the log from the hints, hands it off, restores.
    async with client.AppendService(jc) as appends, asyncio.TaskGroup() as tg:
        heir_dir = tmp_path / "heir"
        fsm = await play(jc, heir_dir, hints, handoff=2222)
        heir = await new_recorder(jc, appends, heir_dir, 2222, fsm)
        store = store_rocksdb.RocksDBStore(heir, config=cfg)
        assert await store.restore_checkpoint(None) == cp_at(2)  # type: ignore[arg-type]
        assert dict(store.db.items(from_key=b"\x01")) == {
            b"b": b"2",
            b"c": b"3",
        }
        assert store.column_family("side").get(b"s") == b"side-1"
        # Its first commit records what RocksDB rewrote when it opened the replay
        # (a new MANIFEST, CURRENT, the WAL flushed into an SST, old files unlinked).
        before = int((await client.append(jc, LOG, b"")).commit.end)
        store.put(b"d", b"4")
        store.put(b"s", b"side-2", column_family="side")
        after = await commit(store, tg, cp_at(3))
        await store.destroy()

    # Cut anywhere in that commit, the log replays as commit 2 or commit 3.
    bounds = OpBounds(jc, FSMHints(log=LOG), tmp_path / "all")
    await bounds.play()
    ops = [(end, kind, path) for end, kind, path in bounds.ops if before < end < after]
    assert ("property", "/CURRENT") in {(kind, path) for _, kind, path in ops}
    assert any(kind == "unlink" and path.endswith(".log") for _, kind, path in ops)
    states = {2: {b"b": b"2", b"c": b"3"}, 3: {b"b": b"2", b"c": b"3", b"d": b"4"}}
    seen = set()
    for end, _, _ in ops:
        out = tmp_path / f"cut-{end}"
        await play(jc, out, end_offset=end)
        got, cp = read_db(out)
        n = int(cp.sources["src/j"].read_through)
        assert got == states[n], (end, n)
        seen.add(n)
    assert seen == {2, 3}

    # The whole log, played without hints: the heir's state.
    third = tmp_path / "third"
    await play(jc, third)
    opts = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(str(third), opts, column_families={"side": opts})
    try:
        assert db.get_column_family("side").get(b"s") == b"side-2"
    finally:
        db.close()
    model, cp = read_db(third)
    assert model == {b"b": b"2", b"c": b"3", b"d": b"4"}
    assert cp == cp_at(3)


class OpBounds(rl.Player):
    """A player noting where each op it applies ends, and what it does."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ops: list[tuple[int, str, str]] = []

    def _apply(self, op: RecordedOp, payload: bytes, data: bytes) -> None:
        kinds: tuple[Literal["create", "link", "unlink", "write", "property"], ...] = (
            "create",
            "link",
            "unlink",
            "write",
            "property",
        )
        kind: str = next((k for k in kinds if op.HasField(k)), "noop")
        path = getattr(op, kind).path if kind not in ("write", "noop") else ""
        self.ops.append((int(op.last_offset), kind, path))
        super()._apply(op, payload, data)


class SlowScandir:
    """``os.scandir`` yielding each entry after a pause: listings race version edits.

    It found the MANIFEST size taken after the listing instead of before it.
    """

    def __init__(self, path: pathlib.Path) -> None:
        self._it = os.scandir(path)

    def __enter__(self) -> Iterator[os.DirEntry[str]]:
        return self._entries()

    def __exit__(self, *exc: object) -> None:
        self._it.close()

    def _entries(self) -> Iterator[os.DirEntry[str]]:
        for entry in self._it:
            time.sleep(random.random() * 0.0005)
            yield entry


@pytest.mark.integration
@pytest.mark.parametrize("slow_listing", [False, True], ids=["listing", "slow-listing"])
async def test_replay_at_any_point_under_flushes_and_compactions(
    jc: client.JournalClient, tmp_path: pathlib.Path, slow_listing: bool
) -> None:
    rng = random.Random(int(os.environ.get("ROCKSDB_SEED", "7")))
    models: list[Model] = [{}]
    offsets: list[int] = []
    hints: list[FSMHints] = []
    async with client.AppendService(jc) as appends, asyncio.TaskGroup() as tg:
        rec = await new_recorder(jc, appends, tmp_path / "primary", 3333)
        cfg = store_rocksdb.RocksDBStoreConfig(max_manifest_file_size=4 << 10)
        store = store_rocksdb.RocksDBStore(rec, busy_options(), cfg)
        if slow_listing:
            store._scandir = SlowScandir
        offsets.append(await commit(store, tg, cp_at(0)))
        # Full manual compactions in another thread, on top of RocksDB's own: version
        # edits and file deletions land while commits list the directory.
        stop = threading.Event()

        def compact() -> None:
            while not stop.is_set():
                store.db.compact_range(None, None)
                stop.wait(0.005)

        compactor = threading.Thread(target=compact)
        compactor.start()
        hints.append(rec.fsm.build_hints(LOG))
        model: Model = {}
        for n in range(1, 81):
            for _ in range(50):
                key = b"k%04d" % rng.randrange(1500)
                if rng.random() < 0.15:
                    store.delete(key)
                    model.pop(key, None)
                else:
                    value = rng.randbytes(rng.randrange(100, 600))
                    store.put(key, value)
                    model[key] = value
            offsets.append(await commit(store, tg, cp_at(n)))
            hints.append(rec.fsm.build_hints(LOG))
            models.append(dict(model))
        stop.set()
        await asyncio.to_thread(compactor.join)
        if slow_listing:
            assert store.relistings > 0
        await store.destroy()

    # The log saw flushes, compactions (SSTs removed) and MANIFEST roll-overs.
    bounds = OpBounds(jc, FSMHints(log=LOG), tmp_path / "all")
    await bounds.play()
    removed = {p for _, kind, p in bounds.ops if kind == "unlink"}
    assert sum(p.endswith(".sst") for p in removed) >= 10
    assert sum(p.startswith("/MANIFEST-") for p in removed) >= 2

    async def check(at: int, hinted: FSMHints | None, allowed: list[int], tag: str) -> int:
        out = tmp_path / f"r-{tag}"
        await play(jc, out, hinted, end_offset=at)
        got, cp = read_db(out)
        n = int(cp.sources["src/j"].read_through) if cp.sources else 0
        assert n in allowed, (tag, at, n)
        assert got == models[n], (tag, at, n)
        return n

    # Every commit point checked for a sample, with the hints of that commit.
    for n in [*rng.sample(range(1, 80), 6), 80]:
        await check(offsets[n], hints[n], [n], f"commit-{n}")
    # Cut inside a commit (a primary dying while recording it), with the hints of
    # the commit before: the state of one of the two, never anything else. Cut at
    # op boundaries of the commits with the most ops (those with files to switch).
    busiest = sorted(
        range(1, 81),
        key=lambda n: -sum(offsets[n - 1] < end <= offsets[n] for end, _, _ in bounds.ops),
    )[:CUT_COMMITS]
    seen: set[int] = set()
    for n in busiest:
        ends = [end for end, _, _ in bounds.ops if offsets[n - 1] < end < offsets[n]]
        cuts = {*rng.sample(ends, min(CUTS_PER_COMMIT, len(ends)))}
        cuts.add(rng.randrange(offsets[n - 1], offsets[n]))
        for cut in sorted(cuts):
            seen.add(await check(cut, hints[n - 1], [n - 1, n], f"cut-{n}-{cut}"))
    # And anywhere at all, mid-op included.
    for i in range(RANDOM_CUTS):
        cut = rng.randrange(offsets[0], offsets[-1])
        n = bisect.bisect_right(offsets, cut)
        await check(cut, hints[n - 1], [n - 1, n], f"any-{i}")
    assert len(seen) > 1  # Cuts landed both before and after a commit's WAL record.


@pytest.mark.integration
async def test_a_commit_failing_midway_replays_as_either_commit(
    jc: client.JournalClient, tmp_path: pathlib.Path
) -> None:
    async with client.AppendService(jc) as appends, asyncio.TaskGroup() as tg:
        rec = await new_recorder(jc, appends, tmp_path / "primary", 4444)
        store = store_rocksdb.RocksDBStore(rec, busy_options())
        model: Model = {}
        for n in range(1, 8):
            for i in range(200):
                model[b"k%d" % i] = b"%d-%d" % (n, i) * 20
                store.put(b"k%d" % i, model[b"k%d" % i])
            await commit(store, tg, cp_at(n))

        # A later commit records its new files and MANIFEST, then fails at its first
        # unlink (a process dying there): its final barrier is never appended.
        real: Callable[..., None] = rec.record_remove

        def failing_remove(path: Any) -> None:
            raise OSError("killed while recording")

        rec.record_remove = failing_remove  # type: ignore[method-assign]
        shard = TaskShard("/app/items/rocks", tg)
        for n in range(8, 30):
            before = dict(model)
            for i in range(200):
                model[b"k%d" % i] = b"%d-%d" % (n, i) * 20
                store.put(b"k%d" % i, model[b"k%d" % i])
            op = store.start_commit(shard, cp_at(n), ())  # type: ignore[arg-type]
            await op.wait()
            if op.error is not None:
                break
        rec.record_remove = real  # type: ignore[method-assign]
        assert op.error is not None and "killed" in str(op.error)
        failed_at = n
        # The store refuses to commit after a partly recorded commit.
        again = store.start_commit(shard, cp_at(99), ())  # type: ignore[arg-type]
        await again.wait()
        assert isinstance(again.error, errors.CommitError)
        await rec.barrier()
        await store.destroy()

    await play(jc, tmp_path / "replay")
    got, cp = read_db(tmp_path / "replay")
    n = int(cp.sources["src/j"].read_through)
    assert (n, got) in ((failed_at - 1, before), (failed_at, model))


def test_options_must_be_raw_and_reserved_keys_refused(tmp_path: pathlib.Path) -> None:
    # Nothing is recorded before a commit: the recorder needs no append service.
    rec = rl.Recorder(rl.FSM(FSMHints(log=LOG)), 1, tmp_path / "a", None, LOG)  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigError, match="raw_mode"):
        store_rocksdb.RocksDBStore(rec, rocksdict.Options())
    rec = rl.Recorder(rl.FSM(FSMHints(log=LOG)), 1, tmp_path / "b", None, LOG)  # type: ignore[arg-type]
    store = store_rocksdb.RocksDBStore(rec)
    try:
        with pytest.raises(ValueError, match="reserved"):
            store.put(store_rocksdb.CHECKPOINT_KEY, b"x")
        with pytest.raises(errors.ConsumerError, match="not configured"):
            store.put(b"k", b"v", column_family="nope")
        store.put(b"k", b"v")
        store.delete(b"gone")
        assert store.get(b"k") == b"v" and store.get(b"gone") is None
        assert store.db.get(b"k") is None  # Staged, not written.
    finally:
        asyncio.run(store.destroy())
