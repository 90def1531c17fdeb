"""Spool transitions, one request at a time (broker.md §4.5, §4.6)."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import threading
import zlib

import pytest
from fragment_helpers import (
    JOURNAL,
    FixedClock,
    RecordingObserver,
    commit,
    compressed_bytes,
    content,
    decoded,
    labels,
    local_content,
    proposal,
)

from gazette.broker import protocol as pb
from gazette.broker.fragment import spool

T0 = datetime.datetime(2019, 11, 19, 22, 30, tzinfo=datetime.UTC)
REG_FOO = labels(reg="foo")
REG_BAR = labels(reg="bar")
REG_BAZ = labels(reg="baz")


def new_spool(**config: int) -> tuple[spool.Spool, RecordingObserver]:
    obv = RecordingObserver()
    return spool.Spool(JOURNAL, obv, config=spool.SpoolConfig(**config), now=FixedClock(T0)), obv


def frag(begin: int, end: int, codec: int = pb.NONE, data: bytes | None = None) -> pb.Fragment:
    f = pb.Fragment(journal=JOURNAL, begin=begin, end=end, compression_codec=codec)
    if data:
        f.sum.CopyFrom(pb.sha1sum_from_digest(hashlib.sha1(data).digest()))
    return f


def fields(f: pb.Fragment) -> tuple[object, ...]:
    return (f.journal, f.begin, f.end, pb.sha1sum_hex(f.sum), f.compression_codec,
            f.backing_store, f.mod_time, f.path_postfix)  # fmt: skip


async def test_next_of_fresh_empty_and_written_spools() -> None:
    sp, _ = new_spool()
    assert fields(sp.next()) == fields(frag(0, 0))
    assert sp.registers == pb.LabelSet() and sp.first_append_time is None

    await sp.must_apply(proposal(frag(100, 100, pb.SNAPPY), pb.LabelSet()))
    assert fields(sp.next()) == fields(frag(100, 100, pb.SNAPPY))

    await sp.apply(content(b"some", 0))
    await sp.apply(content(b" content", 4))
    assert sp.delta == 12
    assert fields(sp.next()) == fields(frag(100, 112, pb.SNAPPY, b"some content"))
    # Nothing is committed yet.
    assert fields(sp.spec) == fields(frag(100, 100, pb.SNAPPY))


async def test_content_delta_mismatch() -> None:
    sp, _ = new_spool()
    await sp.apply(content(b"foo", 0))
    with pytest.raises(pb.ValidationError, match=r"invalid ContentDelta \(2; expected 3\)"):
        await sp.apply(content(b"bar", 2))
    assert sp.delta == 3


async def test_commit_then_rollback_then_commit() -> None:
    sp, obv = new_spool()
    await sp.apply(content(b"committed ", 0))
    first = sp.next()
    assert (await sp.apply(proposal(first, REG_FOO))).status == pb.OK
    assert fields(sp.spec) == fields(frag(0, 10, pb.NONE, b"committed "))
    assert sp.registers == REG_FOO
    assert sp.first_append_time == T0
    assert [(c.begin, c.end) for c in obv.commits] == [(0, 10)]
    assert obv.commits[0].file is sp.file

    # Partial content, then a rollback: a proposal of exactly the current fragment.
    await sp.apply(content(b"discarded", 0))
    assert sp.delta == 9
    assert (await sp.apply(proposal(first, REG_FOO))).status == pb.OK
    assert sp.delta == 0

    # The SHA-1 state was restored: the sum covers only committed content.
    await sp.apply(content(b"kept", 0))
    second = sp.next()
    assert fields(second) == fields(frag(0, 14, pb.NONE, b"committed kept"))
    assert (await sp.apply(proposal(second, REG_BAR))).status == pb.OK
    assert sp.registers == REG_BAR
    assert local_content(sp) == b"committed kept"
    assert len(obv.commits) == 2 and not obv.completes


async def test_reject_next_mismatch() -> None:
    sp, _ = new_spool()
    await sp.apply(content(b"foobar", 0))
    good = frag(0, 6, pb.NONE, b"foobar")
    wrong_end = frag(0, 5, pb.NONE)
    wrong_end.sum.CopyFrom(good.sum)
    wrong_sum = frag(0, 6, pb.NONE)
    wrong_sum.sum.CopyFrom(good.sum)
    wrong_sum.sum.part1 = 0xFFFFFFFFFFFFFFFF
    for bad in (wrong_end, wrong_sum):
        resp = await sp.apply(proposal(bad, REG_FOO))
        assert resp.status == pb.PROPOSAL_MISMATCH
        assert fields(resp.fragment) == fields(frag(0, 0))
        assert resp.registers == pb.LabelSet()
    assert (await sp.apply(proposal(good, REG_FOO))).status == pb.OK


async def test_more_mismatch_cases() -> None:
    sp, obv = new_spool()
    await sp.must_apply(proposal(frag(0, 0, pb.GZIP), pb.LabelSet()))
    await sp.apply(content(b"abcd", 0))
    committed = sp.next()
    await sp.must_apply(proposal(committed, REG_FOO))

    # Re-committing exactly the current fragment and registers succeeds.
    await sp.must_apply(proposal(committed, REG_FOO))
    # Other registers are refused.
    resp = await sp.apply(proposal(committed, REG_BAR))
    assert resp.status == pb.PROPOSAL_MISMATCH and resp.registers == REG_FOO

    await sp.apply(content(b"efgh", 0))
    # A rollback with the wrong registers is refused.
    assert (await sp.apply(proposal(sp.spec, REG_BAR))).status == pb.PROPOSAL_MISMATCH

    # A mismatched proposal inside the spool's bounds doesn't roll it.
    bad = sp.next()
    bad.begin = 1
    assert (await sp.apply(proposal(bad, REG_BAR))).status == pb.PROPOSAL_MISMATCH
    assert (sp.begin, sp.registers, obv.completes) == (0, REG_FOO, [])

    # Beyond the bounds: still a mismatch, but the spool rolls and takes the registers.
    bad.end = 9
    assert (await sp.apply(proposal(bad, REG_BAR))).status == pb.PROPOSAL_MISMATCH
    assert (sp.begin, sp.end, sp.delta, sp.registers) == (9, 9, 0, REG_BAR)
    assert len(obv.completes) == 1
    done, primary = obv.completes[0]
    assert not primary and local_content(done) == b"abcd"
    done.finish_compression()
    assert decoded(done) == b"abcd"

    # Empty spool, proposal inside bounds: unchanged.
    bad.end = 8
    assert (await sp.apply(proposal(bad, REG_BAZ))).status == pb.PROPOSAL_MISMATCH
    assert (sp.end, sp.registers) == (9, REG_BAR)

    # Empty spool rolled beyond bounds: not a completion, registers taken.
    bad.end = 11
    assert (await sp.apply(proposal(bad, REG_BAZ))).status == pb.PROPOSAL_MISMATCH
    assert (sp.begin, sp.end, sp.registers) == (11, 11, REG_BAZ)
    assert len(obv.completes) == 1


async def test_roll_to_empty_proposal_at_end_keeps_registers() -> None:
    sp, obv = new_spool()
    await commit(sp, b"hello", REG_FOO)
    # An empty proposal at our end: roll; registers are kept (not taken from the request).
    resp = await sp.apply(proposal(frag(5, 5, pb.ZSTANDARD), REG_FOO))
    assert resp.status == pb.OK
    assert (sp.begin, sp.end, sp.spec.compression_codec) == (5, 5, pb.ZSTANDARD)
    assert sp.first_append_time is None and sp.file is None
    assert len(obv.completes) == 1
    done, _ = obv.completes[0]
    assert fields(done.spec) == fields(frag(0, 5, pb.NONE, b"hello"))
    assert done.first_append_time == T0 and done.registers == REG_FOO
    # The completed spool is detached: the live one moves on independently.
    await commit(sp, b"world")
    assert local_content(done) == b"hello" and local_content(sp) == b"world"
    assert done.registers == REG_FOO

    # With other registers, the same roll request is refused after rolling (nothing to roll).
    resp = await sp.apply(proposal(frag(10, 10), REG_BAR))
    assert resp.status == pb.PROPOSAL_MISMATCH
    assert (sp.begin, sp.end, sp.registers) == (10, 10, REG_FOO)


async def test_reject_roll_before_current_end() -> None:
    sp, _ = new_spool()
    await commit(sp, b"0123456789", REG_BAR)
    resp = await sp.apply(proposal(frag(9, 9), REG_BAR))
    assert resp.status == pb.PROPOSAL_MISMATCH
    assert fields(resp.fragment) == fields(sp.spec) and resp.registers == REG_BAR
    resp = await sp.apply(proposal(frag(11, 11), REG_BAZ))
    assert resp.status == pb.OK and sp.registers == REG_BAZ


async def test_roll_beyond_pending_content_discards_it() -> None:
    sp, obv = new_spool()
    await commit(sp, b"abc")
    await sp.apply(content(b"pending", 0))
    resp = await sp.apply(proposal(frag(100, 100), REG_FOO))
    assert resp.status == pb.OK
    assert (sp.begin, sp.end, sp.delta, sp.registers) == (100, 100, 0, REG_FOO)
    assert local_content(obv.completes[0][0]) == b"abc"


@pytest.mark.parametrize("codec", [pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION])
async def test_primary_compresses_incrementally(codec: int) -> None:
    sp, obv = new_spool(compression_batch_size=10)
    await sp.apply(proposal(frag(0, 0, codec), pb.LabelSet()), primary=True)
    writes = [b"first write ", b"second ", b"third ", b"fourth write ", b"final"]
    for w in writes:
        await commit(sp, w, primary=True)
    # Incremental: compressed through the last commit that reached the batch size.
    assert sp.compressed_file is not None
    await sp.apply(proposal(frag(sp.end, sp.end, codec), pb.LabelSet()), primary=True)
    done, primary = obv.completes[0]
    assert primary and done.compressed_length > 0
    assert decoded(done) == b"".join(writes)


async def test_gzip_batches_are_members() -> None:
    sp, obv = new_spool(compression_batch_size=10)
    await sp.apply(proposal(frag(0, 0, pb.GZIP), pb.LabelSet()), primary=True)
    for w in (b"first write ", b"second ", b"third ", b"fourth write ", b"final"):
        await commit(sp, w, primary=True)
    await sp.apply(proposal(frag(sp.end, sp.end, pb.GZIP), pb.LabelSet()), primary=True)
    blob = compressed_bytes(obv.completes[0][0])
    members = []
    while blob:
        d = zlib.decompressobj(wbits=31)
        members.append(d.decompress(blob))
        blob = d.unused_data
    assert members == [b"first write ", b"second third ", b"fourth write ", b"final"]

    # Compression offsets restart with the next spool.
    for w in (b"abc", b"xyz"):
        await commit(sp, w, primary=True)
    await sp.apply(proposal(frag(sp.end, sp.end, pb.GZIP), pb.LabelSet()), primary=True)
    assert decoded(obv.completes[1][0]) == b"abcxyz"
    # Below the batch size: compressed wholly when the spool completes.
    await commit(sp, b"small", primary=True)
    await sp.apply(proposal(frag(sp.end, sp.end, pb.GZIP), pb.LabelSet()), primary=True)
    assert decoded(obv.completes[2][0]) == b"small"
    # Rolling an empty spool completes nothing.
    await sp.apply(proposal(frag(sp.end, sp.end, pb.GZIP), pb.LabelSet()), primary=True)
    assert len(obv.completes) == 3


async def test_replica_compresses_only_on_demand() -> None:
    sp, obv = new_spool(compression_batch_size=1)
    await sp.must_apply(proposal(frag(0, 0, pb.GZIP), pb.LabelSet()))
    await commit(sp, b"an initial write ")
    await commit(sp, b"final write")
    await sp.must_apply(proposal(frag(sp.end, sp.end, pb.GZIP), pb.LabelSet()))
    done, primary = obv.completes[0]
    assert not primary and done.compressed_file is None
    assert local_content(done) == b"an initial write final write"
    done.finish_compression()
    assert done.compressed_length > 0
    assert decoded(done) == b"an initial write final write"
    done.finish_compression()  # Idempotent.
    assert decoded(done) == b"an initial write final write"


async def test_large_content_goes_through_a_thread() -> None:
    sp, _ = new_spool(threaded_write_size=1000)
    data = bytes(range(256)) * 40
    await commit(sp, data)
    assert local_content(sp) == data
    assert pb.sha1sum_hex(sp.spec.sum) == hashlib.sha1(data).hexdigest()


async def test_spool_directory(tmp_path: object) -> None:
    obv = RecordingObserver()
    sp = spool.Spool(JOURNAL, obv, config=spool.SpoolConfig(directory=str(tmp_path)))
    await commit(sp, b"data")
    # The file exists only through its descriptor.
    import os

    assert os.listdir(str(tmp_path)) == []
    assert local_content(sp) == b"data"


# -- maybe_roll ---------------------------------------------------------------------------


def spec_fragment(
    length: int = 100, codec: int = pb.GZIP, flush: int = 0
) -> pb.JournalSpec.Fragment:
    f = pb.JournalSpec.Fragment(length=length, compression_codec=codec)
    f.flush_interval.seconds = flush
    return f


async def test_maybe_roll() -> None:
    sp, _ = new_spool()
    now = T0.timestamp()
    # Empty: re-proposed under the spec's codec.
    out = spool.maybe_roll(sp, 0, spec_fragment(), now)
    assert fields(out) == fields(frag(0, 0, pb.GZIP))
    await sp.must_apply(proposal(out, pb.LabelSet()))
    await commit(sp, b"x" * 50)
    # Within length, no roll offset, no interval: the fragment itself.
    assert fields(spool.maybe_roll(sp, 0, spec_fragment(), now)) == fields(sp.spec)
    # Roll offset equal to begin: no roll.
    assert fields(spool.maybe_roll(sp, sp.begin, spec_fragment(), now)) == fields(sp.spec)
    # Length exceeded (strictly).
    assert fields(spool.maybe_roll(sp, 0, spec_fragment(length=50), now)) == fields(sp.spec)
    assert fields(spool.maybe_roll(sp, 0, spec_fragment(length=49, codec=pb.SNAPPY), now)) == (
        fields(frag(50, 50, pb.SNAPPY))
    )
    # A requested roll offset beyond the end.
    assert fields(spool.maybe_roll(sp, 80, spec_fragment(), now)) == fields(frag(80, 80, pb.GZIP))
    with pytest.raises(ValueError, match="roll_to_offset"):
        spool.maybe_roll(sp, 20, spec_fragment(), now)
    # Flush interval: same hour bucket keeps it; the next hour rolls it.
    hour = spec_fragment(flush=3600)
    assert fields(spool.maybe_roll(sp, 0, hour, now + 29 * 60 - 1)) == fields(sp.spec)
    assert fields(spool.maybe_roll(sp, 0, hour, now + 30 * 60)) == fields(frag(50, 50, pb.GZIP))


async def test_a_failed_content_write_fails_the_request_and_keeps_the_spool_usable(
    tmp_path: object,
) -> None:
    # A full disk: Go's spool retries forever, hanging every append of the journal;
    # ours fails the request (so its append fails and the client retries).
    import errno
    import os

    from gazette.broker.fragment import errors, files

    sp, _ = new_spool()
    await sp.apply(proposal(frag(0, 0)))
    await sp.apply(content(b"abc", 0))
    assert sp.file is not None
    real = sp.file

    class Full(files.SpoolFile):
        def pwrite(self, data: bytes | memoryview, offset: int) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    sp.file = Full(-1)
    with pytest.raises(errors.SpoolWriteError, match="No space left on device"):
        await sp.apply(content(b"defg", 3))
    assert sp.delta == 3  # Nothing of the failed write counts.
    sp.file = real  # Space is back.
    await sp.apply(content(b"de", 3))
    resp = await sp.apply(proposal(frag(0, 5, data=b"abcde")))
    assert resp.status == pb.OK and sp.end == 5


def _gated_compression(sp: spool.Spool) -> tuple[threading.Event, list[int]]:
    """Hold ``sp``'s batch compressions (in their worker thread) until the gate opens.

    Returns the gate and the batch ends started, in order.
    """
    gate = threading.Event()
    started: list[int] = []
    real = sp._compress_through

    def gated(end: int) -> None:
        started.append(end)
        assert gate.wait(10), "the test never opened the gate"
        real(end)

    sp._compress_through = gated  # type: ignore[method-assign]
    return gate, started


async def test_a_commit_does_not_wait_for_its_batch_compression() -> None:
    sp, obv = new_spool(compression_batch_size=10)
    await sp.apply(proposal(frag(0, 0, pb.GZIP), pb.LabelSet()), primary=True)
    gate, started = _gated_compression(sp)
    # The first batch's compression is held, yet its commit returns.
    await asyncio.wait_for(commit(sp, b"first batch ", primary=True), 5)
    assert sp.end == 12
    # Commits below the next batch neither start nor wait for compression.
    await asyncio.wait_for(commit(sp, b"x", primary=True), 5)
    # The next batch waits for the held one: at most one is in flight.
    second = asyncio.ensure_future(commit(sp, b"second batch", primary=True))
    await asyncio.sleep(0.1)
    assert not second.done() and started == [12]
    gate.set()
    await asyncio.wait_for(second, 5)
    await sp.apply(proposal(frag(sp.end, sp.end, pb.GZIP), pb.LabelSet()), primary=True)
    done, _ = obv.completes[0]
    assert decoded(done) == b"first batch xsecond batch"
    assert started == [12, 25]


async def test_a_roll_cancelled_while_compression_runs_leaves_one_job() -> None:
    sp, obv = new_spool(compression_batch_size=10)
    await sp.apply(proposal(frag(0, 0, pb.GZIP), pb.LabelSet()), primary=True)
    gate, started = _gated_compression(sp)
    await commit(sp, b"first batch ", primary=True)
    roll = asyncio.ensure_future(
        sp.apply(proposal(frag(sp.end, sp.end, pb.GZIP), pb.LabelSet()), primary=True)
    )
    await asyncio.sleep(0.1)
    roll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await roll
    # The held job is still the spool's: the retried roll waits for it, then finishes.
    retry = asyncio.ensure_future(
        sp.apply(proposal(frag(sp.end, sp.end, pb.GZIP), pb.LabelSet()), primary=True)
    )
    await asyncio.sleep(0.1)
    assert not retry.done() and started == [12]
    gate.set()
    assert (await asyncio.wait_for(retry, 5)).status == pb.OK
    (done, primary), *_ = obv.completes
    assert primary and decoded(done) == b"first batch "
    assert started == [12]
