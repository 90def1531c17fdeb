"""Go's recoverylog and ours, over our broker: logs either records, the other plays.

``gazette-rlog`` (``go/rlog/main.go``, on go.gazette.dev/core v0.103) records
a fixed store life with Go's ``Recorder`` (through ``RecordedAferoFS``, after
a Go ``Player`` hand-off, as a Go shard does) and prints its FSMHints as Go
shards store them in etcd; it also plays any log with Go's ``Player``. Our
:class:`~gazette.consumer.recoverylog.Player` must rebuild, byte for byte, the
files Go left in its directory, and Go's Player the files our
:class:`~gazette.consumer.recoverylog.Recorder` recorded. Hand-offs cross too:
each side takes over a log the other recorded, and the old author is fenced.

Hints may name segments of two logs (a shard recovered from one log and
recording into another): each side's player must follow the other's. And a
rename onto ``/IDENTITY`` after recovering a Go log must record what Go's
recorder records there: a property.

Go's Player also plays the hand-made fixture of
``consumer/tests/recoverylog/test_rl_go_fixture.py`` (and its corruptions),
which must leave what our Player leaves: proof that the fixture is Go's
layout, and that both players refuse the same ops.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import json
import os
import pathlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from interop_go import GazetteMsgError, GazetteRlog, recoverylog_journal

from gazette.broker import client, testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.consumer import recoverylog as rl
from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.recorded_op_pb2 import FSMHints, Property

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

GO_AUTHOR = 0x1234ABCD
PY_AUTHOR = 0x0BADF00D
HEIR = 0x00C0FFEE

#: What ``gazette-rlog record``'s script leaves on disk (from its doc comment).
GO_FILES = {
    "a.txt",
    "sub/a-link.txt",
    "sub/b.bin",
    "big.bin",
    "state.json",
    "trunc.txt",
    "IDENTITY",
}


def files_of(root: pathlib.Path) -> dict[str, bytes]:
    """Every regular file under ``root``, by slash-separated relative path."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def digests(files: dict[str, bytes]) -> dict[str, dict[str, object]]:
    """``files`` as gazette-rlog lists them."""
    return {k: {"size": len(v), "sha256": hashlib.sha256(v).hexdigest()} for k, v in files.items()}


def segments_of(hints: FSMHints) -> list[tuple[int, list[tuple[int, int, int, int, str]]]]:
    """Each live fnode's segments, offsets left out."""
    return [
        (
            n.fnode,
            [
                (s.author, s.first_seq_no, s.first_checksum, s.last_seq_no, s.log)
                for s in n.segments
            ],
        )
        for n in hints.live_nodes
    ]


@pytest.fixture
async def jc(interop_cluster: testing.BrokerCluster) -> AsyncIterator[client.JournalClient]:
    cfg = client.ClientConfig(address=interop_cluster[0].endpoint)
    async with client.JournalClient(cfg) as c:
        yield c


class RecordedDir:
    """A directory whose file operations are done on disk, then recorded (as a store's are)."""

    def __init__(self, recorder: rl.Recorder) -> None:
        self.rec = recorder
        self.root = recorder.directory

    def write_file(self, rel: str, *chunks: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            # Truncating in place would also truncate its other hard links on
            # disk; the recorder models a create over a path as unlink + create.
            path.unlink()
        fnode = self.rec.record_create(path)
        offset = 0
        with open(path, "xb") as f:
            for c in chunks:
                f.write(c)
                self.rec.record_write_at(fnode, c, offset)
                offset += len(c)

    def write_at(self, rel: str, data: bytes, offset: int) -> None:
        path = self.root / rel
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(data)
        self.rec.record_write_at(self.rec.fsm.links[self.rec.rel(path)], data, offset)

    def rename(self, src: str, dst: str) -> None:
        os.replace(self.root / src, self.root / dst)
        self.rec.record_rename(self.root / src, self.root / dst)

    def remove(self, rel: str) -> None:
        (self.root / rel).unlink()
        self.rec.record_remove(self.root / rel)

    def link(self, src: str, dst: str) -> None:
        (self.root / dst).parent.mkdir(parents=True, exist_ok=True)
        os.link(self.root / src, self.root / dst)
        self.rec.record_link(self.root / src, self.root / dst)


def python_store_life(d: RecordedDir) -> None:
    """Our counterpart of gazette-rlog's script (no property: ours records none)."""
    d.write_file("a.txt", b"hello ", b"python ", b"world\n")
    d.write_file("sub/b.bin", bytes(range(256)))
    d.write_at("sub/b.bin", b"XYZ", 10)
    d.write_at("sub/b.bin", b"tail", 300)  # Past the end: a hole of zeros.
    d.write_file(
        "big.bin", *(bytes((i * 7 + c * 13) % 251 for i in range(70_000)) for c in range(3))
    )
    d.write_file("next.json", b'{"v": 1}')
    d.rename("next.json", "state.json")
    d.write_file("next.json", b'{"v": 2}')
    d.rename("next.json", "state.json")  # Over the first: its fnode dies.
    d.write_file("trunc.txt", b"first version, longer")
    d.write_file("trunc.txt", b"second")
    d.write_file("gone", b"x" * 1000)
    d.remove("gone")
    d.link("a.txt", "sub/a-link.txt")
    d.write_file("py.txt", b"only python writes this one")  # Go's script leaves it be.


async def test_go_records_our_player_replays(
    gazette_rlog: GazetteRlog,
    interop_cluster: testing.BrokerCluster,
    jc: client.JournalClient,
    tmp_path: pathlib.Path,
) -> None:
    log = "interop/rlog/go-records"
    await recoverylog_journal(interop_cluster, log)
    broker = interop_cluster[0].endpoint
    go_dir = tmp_path / "go"
    hints_json, summary = await gazette_rlog.arecord(broker, log, go_dir, author=GO_AUTHOR)
    print("go hints:", hints_json.decode())
    expected = files_of(go_dir)
    assert set(expected) == GO_FILES, "gazette-rlog's script changed"
    assert summary["files"] == digests(expected)
    assert expected["IDENTITY"] == b"go-identity-0001\n"
    assert expected["sub/b.bin"][10:13] == b"XYZ" and expected["sub/b.bin"][256:300] == bytes(44)

    # Go's hints: our reading of them is valid, and writes them back byte for
    # byte (one property, and live nodes sorted, so Go's order is fixed).
    hints = rl.hints_from_value(hints_json)
    rl.validate_fsm_hints(hints)
    assert rl.hints_to_json(hints) == hints_json
    assert hints.log == log and [p.path for p in hints.properties] == ["/IDENTITY"]
    authors = {s.author for n in hints.live_nodes for s in n.segments}
    assert authors == {GO_AUTHOR}
    # Dead files are not hinted: 5 live fnodes (a.txt and its link are one;
    # /IDENTITY is a property).
    assert len(hints.live_nodes) == 5

    # Played from Go's hints, and from the log's start, ours rebuilds Go's files.
    from_hints = tmp_path / "py-hints"
    await rl.Player(jc, hints, from_hints).play()
    assert files_of(from_hints) == expected
    assert (from_hints / "a.txt").samefile(from_hints / "sub/a-link.txt")

    from_start = tmp_path / "py-start"
    fsm = await rl.Player(jc, FSMHints(log=log), from_start).play()
    assert files_of(from_start) == expected
    assert fsm.properties == {"/IDENTITY": "go-identity-0001\n"}

    # Our hand-off takes Go's log over; we record on, and Go's Player replays
    # the whole history (its author's segments, then ours) from our hints.
    mine = tmp_path / "py-heir"
    fsm = await rl.Player(jc, hints, mine).play(handoff_author=HEIR)
    async with client.AppendService(jc) as appends:
        rec = rl.Recorder(fsm, HEIR, mine, appends, log)
        await rec.start()
        d = RecordedDir(rec)
        d.write_file("py.txt", b"recorded by python")
        d.write_at("a.txt", b"HELLO", 0)
        d.remove("sub/a-link.txt")
        hints2 = await rec.build_hints()
    assert {s.author for n in hints2.live_nodes for s in n.segments} == {GO_AUTHOR, HEIR}
    expected2 = files_of(mine)
    assert expected2["a.txt"] == b"HELLO go world\n" and "sub/a-link.txt" not in expected2

    go_replay = tmp_path / "go-replay"
    played = await gazette_rlog.aplay(broker, rl.hints_to_json(hints2), go_replay)
    assert files_of(go_replay) == expected2
    assert played["files"] == digests(expected2)
    assert played["next_seq_no"] == rec.fsm.next_seq_no
    assert played["next_checksum"] == rec.fsm.next_checksum


async def test_our_recorder_go_player_replays(
    gazette_rlog: GazetteRlog,
    interop_cluster: testing.BrokerCluster,
    jc: client.JournalClient,
    tmp_path: pathlib.Path,
) -> None:
    log = "interop/rlog/py-records"
    await recoverylog_journal(interop_cluster, log)
    broker = interop_cluster[0].endpoint
    src = tmp_path / "py"
    src.mkdir()
    # Recovered (from another log) with a property, which our hints carry on.
    recovered = FSMHints(log="interop/rlog/elsewhere")
    recovered.properties.append(Property(path="/IDENTITY", content="py-identity\n"))
    (src / "IDENTITY").write_text("py-identity\n")
    async with client.AppendService(jc) as appends:
        rec = rl.Recorder(rl.FSM(recovered), PY_AUTHOR, src, appends, log)
        await rec.start()  # The no-op that fences the log to PY_AUTHOR.
        python_store_life(RecordedDir(rec))
        hints = await rec.build_hints()
    hints_json = rl.hints_to_json(hints)
    print("our hints:", hints_json.decode())
    expected = files_of(src)
    assert set(expected) == GO_FILES | {"py.txt"}
    assert expected["big.bin"][70_000:70_003] == bytes([13, 20, 27])

    # Go's Player, from our hints (Go validates them first) and from the start.
    go_hints = tmp_path / "go-hints"
    played = await gazette_rlog.aplay(broker, hints_json, go_hints)
    assert files_of(go_hints) == expected
    assert played["files"] == digests(expected)
    # Go's FSM ends where ours does: the same sequence and CRC-32C chain.
    assert (played["next_seq_no"], played["next_checksum"]) == (
        rec.fsm.next_seq_no,
        rec.fsm.next_checksum,
    )
    # And Go's hints of what it recovered name our segments: same fnodes,
    # authors, sequence ranges and checksums. Offsets differ by design: a
    # recorder's first_offset is a lower bound (ours stays 0 while no append
    # completed; Go's player knows exact ones) and its last_offset is unknown.
    replayed = rl.hints_from_value(json.dumps(played["hints"]).encode())
    assert segments_of(replayed) == segments_of(hints)
    for recorded, replayed_seg in zip(
        (s for n in hints.live_nodes for s in n.segments),
        (s for n in replayed.live_nodes for s in n.segments),
        strict=True,
    ):
        assert recorded.first_offset <= replayed_seg.first_offset < replayed_seg.last_offset
    assert list(replayed.properties) == list(hints.properties)

    go_start = tmp_path / "go-start"
    played = await gazette_rlog.aplay(broker, json.dumps({"log": log}).encode(), go_start)
    # From the log's start Go can't know the property: it was in hints only.
    assert files_of(go_start) == {k: v for k, v in expected.items() if k != "IDENTITY"}

    # Go takes the log over (Player hand-off, then its Recorder) and records
    # its script over our files; our Player replays the result from Go's hints.
    go_dir = tmp_path / "go-heir"
    go_hints_json, summary = await gazette_rlog.arecord(
        broker, log, go_dir, author=GO_AUTHOR, hints=hints_json
    )
    go_files = files_of(go_dir)
    assert summary["files"] == digests(go_files)
    assert set(go_files) == GO_FILES | {"py.txt"}
    assert go_files["py.txt"] == expected["py.txt"]
    assert go_files["IDENTITY"] == b"go-identity-0001\n"
    hints2 = rl.hints_from_value(go_hints_json)
    # py.txt's fnode is ours; every other file Go re-created.
    assert [{s.author for s in n.segments} for n in hints2.live_nodes] == [{PY_AUTHOR}] + [
        {GO_AUTHOR}
    ] * 5
    ours = tmp_path / "py-replay"
    await rl.Player(jc, hints2, ours).play()
    assert files_of(ours) == go_files

    # Go's hand-off fenced our author: a late append of the old recorder
    # never lands (its append service retries until the shard is cancelled).
    async def zombie() -> None:
        async with client.AppendService(jc) as appends:
            late = rl.Recorder(rec.fsm, PY_AUTHOR, src, appends, log)
            late.record_create(src / "late")
            await late.barrier()

    zombie_task = asyncio.create_task(zombie())
    await asyncio.sleep(1.5)
    assert not zombie_task.done(), "the old author's append landed after Go's hand-off"
    zombie_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await zombie_task


def _load_fixture() -> Any:
    """The recoverylog tests' hand-made Go fixture (a test module: loaded by path)."""
    path = pathlib.Path(__file__).parents[1] / "recoverylog" / "test_rl_go_fixture.py"
    spec = importlib.util.spec_from_file_location("rl_go_fixture", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Its dataclasses look their module up.
    spec.loader.exec_module(module)
    return module


fx = _load_fixture()


async def raw_log(cluster: testing.BrokerCluster, name: str, content: bytes) -> None:
    """Recovery log ``name`` holding exactly ``content``."""
    await recoverylog_journal(cluster, name)
    async with cluster.channel(0) as ch:
        resp = await testing.append(pb2_grpc.JournalStub(ch), name, [content])
    assert (resp.commit.begin, resp.commit.end) == (0, len(content))


async def raw_tail(cluster: testing.BrokerCluster, name: str, offset: int) -> bytes:
    async with cluster.channel(0) as ch:
        content, _ = await testing.read(pb2_grpc.JournalStub(ch), name, offset)
    return content


async def test_go_player_plays_the_hand_made_fixture_as_ours_does(
    gazette_rlog: GazetteRlog,
    interop_cluster: testing.BrokerCluster,
    jc: client.JournalClient,
    tmp_path: pathlib.Path,
) -> None:
    broker = interop_cluster[0].endpoint

    def go_hints(log: str) -> bytes:
        hints: bytes = fx.GO_HINTS_JSON.replace(fx.LOG.encode(), log.encode())
        return hints

    def start(log: str) -> bytes:
        return json.dumps({"log": log}).encode()

    async def both(log: str, hints: bytes, name: str) -> dict[str, bytes]:
        """Go's and our Player from ``hints``: the files (the same, or the test fails)."""
        played = await gazette_rlog.aplay(broker, hints, tmp_path / f"go-{name}")
        fsm = await rl.Player(jc, rl.hints_from_value(hints), tmp_path / f"py-{name}").play()
        go_files, py_files = files_of(tmp_path / f"go-{name}"), files_of(tmp_path / f"py-{name}")
        assert go_files == py_files, name
        assert played["files"] == digests(go_files), name
        assert (played["next_seq_no"], played["next_checksum"]) == (
            fsm.next_seq_no,
            fsm.next_checksum,
        ), name
        # Both FSMs hint the same segments, offsets and all (both read them).
        assert played["hints"] == json.loads(rl.hints_to_json(fsm.build_hints(log))), name
        return go_files

    log = "interop/rlog/fixture"
    await raw_log(interop_cluster, log, fx.log_bytes(fx.FRAMES))
    assert await both(log, go_hints(log), "hints") == fx.EXPECTED_FILES
    assert await both(log, start(log), "start") == fx.EXPECTED_FILES

    # Go's hand-off appends the very no-op our Player appends (the fixture's test).
    await gazette_rlog.aplay(broker, go_hints(log), tmp_path / "go-heir", handoff=9012)
    assert await raw_tail(interop_cluster, log, fx.LOG_END) == bytes.fromhex(
        fx.MAGIC + "0c000000" + "080f" + "15" + "14f2dc90" + "1d" + "34230000"
    )

    # A broken chain: from hints, Go fails too, and removes its directory...
    bad = "interop/rlog/fixture-bad-checksum"
    await raw_log(
        interop_cluster, bad, fx.log_bytes(fx.with_frame(11, fx.BAD_CHECKSUM_12, replace=True))
    )
    with pytest.raises(GazetteMsgError, match="unused hints; possible data loss"):
        await gazette_rlog.aplay(broker, go_hints(bad), tmp_path / "go-bad")
    assert not (tmp_path / "go-bad").exists()
    player = rl.Player(jc, rl.hints_from_value(go_hints(bad)), tmp_path / "py-bad")
    with pytest.raises(errors.RecoveryLogError, match="hinted segments remain"):
        await player.play()
    for f in player._files.values():  # Ours leaks them (test_rl_go_fixture reports it).
        f.close()
    # ...and from the start both stop at the last op that chains.
    assert set(await both(bad, start(bad), "bad-start")) == {
        "data/a.txt",
        "data/a-link.txt",
        "b.bin",
        "IDENTITY",
    }

    # The old author after the hand-off: refused from hints; from the start,
    # the forgery's branch wins in both (neither FSM checks authors without hints).
    for name, frame in (("zombie", fx.ZOMBIE_10), ("forged", fx.FORGED_11)):
        journal = f"interop/rlog/fixture-{name}"
        await raw_log(interop_cluster, journal, fx.log_bytes(fx.with_frame(10, frame)))
        assert await both(journal, go_hints(journal), name) == fx.EXPECTED_FILES
        files = await both(journal, start(journal), f"{name}-start")
        assert ("forged" in files) == (name == "forged") and "zombie" not in files

    # A de-synchronization: both skip to the next frame.
    garbage = "interop/rlog/fixture-garbage"
    frames = fx.log_bytes(fx.FRAMES)
    await raw_log(interop_cluster, garbage, frames[:190] + b"\x00garbage\x66\x33" + frames[190:])
    assert await both(garbage, start(garbage), "garbage") == fx.EXPECTED_FILES


async def test_rename_onto_identity_records_a_property_as_go_does(
    gazette_rlog: GazetteRlog,
    interop_cluster: testing.BrokerCluster,
    jc: client.JournalClient,
    tmp_path: pathlib.Path,
) -> None:
    """A store recovered from a Go log renames a new file onto /IDENTITY (as RocksDB does)."""
    log = "interop/rlog/identity"
    await recoverylog_journal(interop_cluster, log)
    broker = interop_cluster[0].endpoint
    # Go's script ends renaming onto /IDENTITY, which Go records as a property.
    hints_json, _ = await gazette_rlog.arecord(broker, log, tmp_path / "go", author=GO_AUTHOR)
    mine = tmp_path / "py"
    fsm = await rl.Player(jc, rl.hints_from_value(hints_json), mine).play(handoff_author=HEIR)
    assert fsm.properties == {"/IDENTITY": "go-identity-0001\n"}

    async with client.AppendService(jc) as appends:
        rec = rl.Recorder(fsm, HEIR, mine, appends, log)
        await rec.start()
        d = RecordedDir(rec)
        d.write_file("IDENTITY.tmp", b"py-identity\n")
        os.replace(mine / "IDENTITY.tmp", mine / "IDENTITY")
        refusal: Exception | None = None
        try:
            rec.record_rename(mine / "IDENTITY.tmp", mine / "IDENTITY")
        except errors.RecoveryLogError as e:
            refusal = e
        await rec.barrier()
        hints = rec.fsm.build_hints(log)
    assert refusal is None, (
        "INCOMPATIBILITY: Recorder.record_rename onto /IDENTITY records a link, which the"
        f" FSM refuses over the recovered property ({refusal!r}); Go's RecordRename records"
        " a property op with the file's content (recorder.go, propertyFiles)"
    )
    played = await gazette_rlog.aplay(broker, rl.hints_to_json(hints), tmp_path / "go-replay")
    assert files_of(tmp_path / "go-replay")["IDENTITY"] == b"py-identity\n"
    assert [p["path"] for p in played["hints"]["properties"]] == ["/IDENTITY"]


async def test_go_hints_spanning_two_logs(
    gazette_rlog: GazetteRlog,
    interop_cluster: testing.BrokerCluster,
    jc: client.JournalClient,
    tmp_path: pathlib.Path,
) -> None:
    """Go recovers log one and records into log two: its hints name segments of both."""
    one, two = "interop/rlog/span-one", "interop/rlog/span-two"
    for name in (one, two):
        await recoverylog_journal(interop_cluster, name)
    broker = interop_cluster[0].endpoint
    src = tmp_path / "py"
    src.mkdir()
    async with client.AppendService(jc) as appends:
        rec = rl.Recorder(rl.FSM(FSMHints(log="interop/rlog/none")), PY_AUTHOR, src, appends, one)
        await rec.start()
        python_store_life(RecordedDir(rec))
        hints_one = await rec.build_hints()
    go_dir = tmp_path / "go"
    hints_json, _ = await gazette_rlog.arecord(
        broker, two, go_dir, author=GO_AUTHOR, hints=rl.hints_to_json(hints_one)
    )
    expected = files_of(go_dir)
    assert expected["py.txt"] == b"only python writes this one"
    hints = rl.hints_from_value(hints_json)
    rl.validate_fsm_hints(hints)
    # py.txt's only segment is in log one (explicitly named); the rest in two.
    logs = [[s.log for s in n.segments] for n in hints.live_nodes]
    assert logs == [[one]] + [[""]] * 5, logs

    played = await gazette_rlog.aplay(broker, hints_json, tmp_path / "go-replay")
    assert played["files"] == digests(expected)  # Go's own Player manages.
    ours = tmp_path / "py-replay"
    try:
        await rl.Player(jc, hints, ours).play()
        got: dict[str, bytes] | Exception = files_of(ours)
    except Exception as e:  # noqa: BLE001 - reported below.
        got = e
    assert got == expected, (
        "INCOMPATIBILITY: our Player reads hints.log only (player.py play(): it starts"
        " hints.log at the first hinted segment's first_offset, which is an offset of"
        " another log); Go's playLog seeks to each hinted segment's own log. Got:"
        f" {got!r}"[:2000]
    )


async def test_our_hints_spanning_two_logs_play_in_go(
    gazette_rlog: GazetteRlog,
    interop_cluster: testing.BrokerCluster,
    jc: client.JournalClient,
    tmp_path: pathlib.Path,
) -> None:
    """We recover log one and record into log two; Go's Player follows our hints across both."""
    one, two = "interop/rlog/py-span-one", "interop/rlog/py-span-two"
    for name in (one, two):
        await recoverylog_journal(interop_cluster, name)
    broker = interop_cluster[0].endpoint
    first = tmp_path / "first"
    first.mkdir()
    async with client.AppendService(jc) as appends:
        rec = rl.Recorder(rl.FSM(FSMHints(log="interop/rlog/none")), PY_AUTHOR, first, appends, one)
        await rec.start()
        python_store_life(RecordedDir(rec))
        hints_one = await rec.build_hints()
    second = tmp_path / "second"
    fsm = await rl.Player(jc, hints_one, second).play(handoff_author=HEIR)
    async with client.AppendService(jc) as appends:
        rec = rl.Recorder(fsm, HEIR, second, appends, two)
        await rec.start()  # Fences log two with a no-op sequenced after log one.
        d = RecordedDir(rec)
        d.write_file("a.txt", b"rewritten in log two")
        d.write_at("sub/b.bin", b"!", 0)
        hints = await rec.build_hints()
    expected = files_of(second)
    logs = {s.log for n in hints.live_nodes for s in n.segments}
    assert logs == {one, ""}, logs

    played = await gazette_rlog.aplay(broker, rl.hints_to_json(hints), tmp_path / "go")
    assert files_of(tmp_path / "go") == expected
    assert (played["next_seq_no"], played["next_checksum"], played["last_log"]) == (
        rec.fsm.next_seq_no,
        rec.fsm.next_checksum,
        two,
    )
