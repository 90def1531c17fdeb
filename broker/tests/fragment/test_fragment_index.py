"""Index: queries (broker.md §7.2), spool commits, remote replacement, wake-ups."""

from __future__ import annotations

import asyncio

import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set, errors, files, index

JOURNAL = "a/journal"
NOW = 1_700_000_000.0
STORE = "file:///store/"


def local(begin: int, end: int) -> cover_set.Fragment:
    spec = pb.Fragment(journal=JOURNAL, begin=begin, end=end, compression_codec=pb.NONE)
    return cover_set.Fragment(spec, files.SpoolFile.create())


def remote(begin: int, end: int, mod_time: int) -> cover_set.Fragment:
    spec = pb.Fragment(
        journal=JOURNAL,
        begin=begin,
        end=end,
        compression_codec=pb.GZIP,
        backing_store=STORE,
        mod_time=mod_time,
    )
    return cover_set.Fragment(spec)


def signer(f: pb.Fragment, ttl: float) -> str:
    return f"signed:{f.begin}-{f.end}:{ttl:g}"


def new_index() -> index.Index:
    return index.Index(signer=signer, clock=lambda: NOW)


def read(offset: int, *, block: bool = False, begin_mod_time: int = 0) -> pb.ReadRequest:
    return pb.ReadRequest(
        journal=JOURNAL, offset=offset, block=block, begin_mod_time=begin_mod_time
    )


async def test_empty_index_non_blocking() -> None:
    ix = new_index()
    resp, f = await ix.query(read(-1))
    assert (resp.status, resp.offset, resp.write_head, f) == (
        pb.OFFSET_NOT_YET_AVAILABLE,
        0,
        0,
        None,
    )
    assert ix.summary() == (0, 0, 0)


async def test_local_fragments_are_served_with_their_file() -> None:
    ix = new_index()
    a, b = local(0, 100), local(100, 200)
    ix.spool_commit(a)
    ix.spool_commit(b)
    resp, f = await ix.query(read(150))
    assert (resp.status, resp.offset, resp.write_head) == (pb.OK, 150, 200)
    assert (resp.fragment.begin, resp.fragment.end) == (100, 200)
    assert f is b.file and resp.fragment_url == ""
    # -1 reads at the write head, which isn't available yet.
    resp, f = await ix.query(read(-1))
    assert (resp.status, resp.offset, f) == (pb.OFFSET_NOT_YET_AVAILABLE, 200, None)
    assert ix.summary() == (0, 200, 0)


async def test_remote_fragments_carry_a_signed_url() -> None:
    ix = new_index()
    ix.replace_remote(cover_set.CoverSet([remote(0, 100, int(NOW) - 10)]))
    resp, f = await ix.query(read(10))
    assert resp.status == pb.OK and f is None
    assert resp.fragment.backing_store == STORE
    assert resp.fragment_url == f"signed:0-100:{index.READ_URL_TTL:g}"
    assert ix.summary() == (0, 100, int(NOW) - 10)


async def test_read_before_first_persisted_fragment_jumps_forward() -> None:
    ix = new_index()
    ix.replace_remote(cover_set.CoverSet([remote(100, 200, int(NOW))]))
    resp, _ = await ix.query(read(0))
    assert (resp.status, resp.offset) == (pb.OK, 100)


async def test_holes_jump_only_when_the_next_fragment_is_old() -> None:
    old = int(NOW - index.OFFSET_JUMP_AGE_THRESHOLD) - 1
    young = int(NOW - index.OFFSET_JUMP_AGE_THRESHOLD) + 1
    ix = new_index()
    ix.replace_remote(cover_set.CoverSet([remote(0, 100, old), remote(200, 300, young)]))
    # A young fragment after the hole: the hole blocks (here: not yet available).
    resp, _ = await ix.query(read(150))
    assert (resp.status, resp.offset, resp.write_head) == (pb.OFFSET_NOT_YET_AVAILABLE, 150, 300)

    ix.replace_remote(cover_set.CoverSet([remote(0, 100, old), remote(200, 300, old)]))
    resp, _ = await ix.query(read(150))
    assert (resp.status, resp.offset) == (pb.OK, 200)

    # A hole before a local (unpersisted) fragment never jumps.
    ix2 = new_index()
    ix2.replace_remote(cover_set.CoverSet([remote(0, 100, old)]))
    ix2.spool_commit(local(200, 300))
    resp, _ = await ix2.query(read(150))
    assert resp.status == pb.OFFSET_NOT_YET_AVAILABLE


async def test_a_range_skipped_for_good_is_jumped_at_once() -> None:
    # The journal resumed at its acknowledgement fence, 200, past its stored
    # fragments (ending at 100): nothing will ever be stored in between.
    young = int(NOW)
    ix = new_index()
    ix.replace_remote(cover_set.CoverSet([remote(0, 100, young)]))
    ix.spool_commit(local(200, 300))
    blocked = asyncio.create_task(ix.query(read(150, block=True)))
    await asyncio.sleep(0)
    assert not blocked.done()
    ix.mark_skipped([(100, 200)])
    # Not before a listing made since: a broker may have stored content there late.
    resp, _ = await ix.query(read(150))
    assert resp.status == pb.OFFSET_NOT_YET_AVAILABLE
    ix.replace_remote(cover_set.CoverSet([remote(0, 100, young)]))
    resp, _ = await asyncio.wait_for(blocked, 5)  # Woken, and jumped.
    assert (resp.status, resp.offset) == (pb.OK, 200)
    resp, _ = await ix.query(read(100))
    assert (resp.status, resp.offset) == (pb.OK, 200)
    # A recovered fragment inside the range is still served, and jumped to.
    ix.replace_remote(cover_set.CoverSet([remote(0, 100, young), remote(120, 150, young)]))
    resp, _ = await ix.query(read(100))
    assert (resp.status, resp.offset, resp.fragment.begin) == (pb.OK, 120, 120)
    # Any other hole still waits.
    ix.replace_remote(cover_set.CoverSet([remote(0, 50, young), remote(60, 100, young)]))
    resp, _ = await ix.query(read(55))
    assert resp.status == pb.OFFSET_NOT_YET_AVAILABLE


async def test_begin_mod_time_skips_older_fragments() -> None:
    ix = new_index()
    ix.replace_remote(
        cover_set.CoverSet([remote(0, 100, 10), remote(100, 200, 20), remote(200, 300, 30)])
    )
    resp, _ = await ix.query(read(0, begin_mod_time=25))
    assert (resp.status, resp.offset, resp.fragment.begin) == (pb.OK, 200, 200)
    resp, _ = await ix.query(read(0, begin_mod_time=31))
    assert (resp.status, resp.offset) == (pb.OFFSET_NOT_YET_AVAILABLE, 300)


async def test_blocking_query_wakes_on_commit() -> None:
    ix = new_index()
    ix.spool_commit(local(0, 10))
    task = asyncio.create_task(ix.query(read(-1, block=True)))
    await asyncio.sleep(0)
    assert not task.done()
    # An unrelated change wakes it, but it goes back to waiting.
    ix.spool_commit(local(0, 10))
    await asyncio.sleep(0)
    assert not task.done()
    nxt = local(10, 20)
    ix.spool_commit(nxt)
    resp, f = await asyncio.wait_for(task, 5)
    assert (resp.status, resp.offset, f) == (pb.OK, 10, nxt.file)


async def test_blocking_query_wakes_on_refresh_and_close() -> None:
    ix = new_index()
    task = asyncio.create_task(ix.query(read(50, block=True)))
    await asyncio.sleep(0)
    ix.replace_remote(cover_set.CoverSet([remote(0, 100, int(NOW))]))
    resp, _ = await asyncio.wait_for(task, 5)
    assert (resp.status, resp.offset) == (pb.OK, 50)

    task = asyncio.create_task(ix.query(read(100, block=True)))
    await asyncio.sleep(0)
    ix.close()
    with pytest.raises(errors.IndexClosedError):
        await asyncio.wait_for(task, 5)


async def test_blocking_query_is_cancellable() -> None:
    ix = new_index()
    task = asyncio.create_task(ix.query(read(0, block=True)))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_replace_remote_drops_durable_locals() -> None:
    ix = new_index()
    assert not ix.first_refresh_done
    a, b, c = local(0, 100), local(100, 200), local(200, 300)
    for f in (a, b, c):
        ix.spool_commit(f)
    # The listing holds [0, 200) (as one fragment) and a fragment after our spool.
    listing = cover_set.CoverSet([remote(0, 200, int(NOW)), remote(300, 400, int(NOW))])
    ix.replace_remote(listing)
    assert ix.first_refresh_done
    snapshot = await ix.inspect()
    assert [(f.begin, f.end, f.file is not None) for f in snapshot] == [
        (0, 200, False),
        (200, 300, True),
        (300, 400, False),
    ]
    # A later listing that covers the rest drops the last local too.
    ix.replace_remote(cover_set.CoverSet([remote(0, 200, 1), remote(200, 400, 2)]))
    assert [(f.begin, f.end, f.file is not None) for f in ix.fragments] == [
        (0, 200, False),
        (200, 400, False),
    ]
    # ... and a listing that lost fragments (removed from the store) forgets them.
    ix.replace_remote(cover_set.CoverSet([remote(200, 400, 2)]))
    assert [(f.begin, f.end) for f in ix.fragments] == [(200, 400)]
    await ix.wait_first_refresh()


async def test_a_hole_below_the_head_asks_for_a_listing_and_a_read_waits_for_it() -> None:
    # A broker new to the journal's replicas: its spool starts at the head, and what
    # came before is in the store, which it has not listed since.
    asked: list[int] = []
    ix = index.Index(signer=signer, clock=lambda: NOW, on_hole=lambda o: asked.append(o) or True)
    ix.replace_remote(cover_set.CoverSet())
    ix.spool_commit(local(100, 150))

    task = asyncio.create_task(ix.query(read(0)))  # Not blocking: it waits for the listing.
    await asyncio.sleep(0.05)
    assert asked == [100] and not task.done()  # The hole ends where the spool begins.
    ix.replace_remote(cover_set.CoverSet([remote(0, 100, int(NOW))]))
    resp, _ = await asyncio.wait_for(task, 5)
    assert (resp.status, resp.offset, resp.fragment.end) == (pb.OK, 0, 100)

    # A read at the head (no fragment past it) asks for nothing.
    resp, _ = await ix.query(read(150))
    assert resp.status == pb.OFFSET_NOT_YET_AVAILABLE and asked == [100]


async def test_a_hole_read_answers_when_no_listing_comes() -> None:
    waits: list[int] = []
    ix = index.Index(
        signer=signer,
        clock=lambda: NOW,
        on_hole=lambda o: waits.append(o) or True,
        hole_listing_wait=0.2,
    )
    ix.spool_commit(local(100, 150))
    started = asyncio.get_running_loop().time()
    resp, _ = await ix.query(read(10))
    assert resp.status == pb.OFFSET_NOT_YET_AVAILABLE and waits == [100, 100]
    assert asyncio.get_running_loop().time() - started >= 0.2

    # An owner that asked for no listing (backing off) gets its answer at once.
    ix = index.Index(signer=signer, clock=lambda: NOW, on_hole=lambda o: False)
    ix.spool_commit(local(100, 150))
    resp, _ = await asyncio.wait_for(ix.query(read(10)), 0.5)
    assert resp.status == pb.OFFSET_NOT_YET_AVAILABLE
