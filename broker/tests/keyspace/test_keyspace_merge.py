"""Unit tests of the KeySpace's apply rules, driven with in-process events (no etcd)."""

from __future__ import annotations

import asyncio
import itertools
import logging

import aetcd.rpc
import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette import keyspace
from gazette.broker.protocol import protocol_pb2
from gazette.keyspace import errors, etcd, key_space
from gazette.keyspace import key_values as kvs

CLUSTER = 77


def decode(key: str, value: bytes) -> object:
    if value == b"bad":
        raise ValueError("not a valid value")
    return value.decode().upper()


def kv(key: str, value: bytes, create: int, mod: int, version: int = 1) -> kvs.KeyValue:
    return kvs.KeyValue(key, value, create_revision=create, mod_revision=mod, version=version)


def put(key: str, value: bytes, create: int, mod: int, version: int = 1) -> kvs.Event:
    return kvs.Event(kvs.EventType.PUT, kv(key, value, create, mod, version))


def delete(key: str, mod: int) -> kvs.Event:
    return kvs.Event(kvs.EventType.DELETE, kv(key, b"", 0, mod, 0))


def header(
    revision: int, cluster: int = CLUSTER, member: int = 1, term: int = 2
) -> protocol_pb2.Header.Etcd:
    return protocol_pb2.Header.Etcd(
        cluster_id=cluster, member_id=member, revision=revision, raft_term=term
    )


def resp(*events: kvs.Event, revision: int | None = None, **kw: int) -> keyspace.WatchResponse:
    rev = revision if revision is not None else events[-1].kv.mod_revision
    return keyspace.WatchResponse(header(rev, **kw), list(events))


def loaded(*items: kvs.KeyValue, revision: int = 10) -> keyspace.KeySpace:
    ks = keyspace.KeySpace("/root", decode)
    ks.load_snapshot(header(revision), list(items))
    return ks


def state(ks: keyspace.KeySpace) -> list[tuple[str, object, int]]:
    return [(e.key, e.decoded, e.mod_revision) for e in ks.key_values]


# --- Root ----------------------------------------------------------------------


@pytest.mark.parametrize("root", ["/gazette/cluster", "/", "/a", "relative/ok"])
def test_clean_roots_are_accepted(root: str) -> None:
    assert keyspace.KeySpace(root, decode).root == root


@pytest.mark.parametrize(
    ("root", "clean"),
    [
        ("/gazette/cluster/", "/gazette/cluster"),
        ("/a//b", "/a/b"),
        ("/a/./b", "/a/b"),
        ("/a/../b", "/b"),
        ("", "."),
    ],
)
def test_unclean_roots_are_refused(root: str, clean: str) -> None:
    with pytest.raises(errors.InvalidRootError, match="expected a clean path") as info:
        keyspace.KeySpace(root, decode)
    assert info.value.clean == clean
    assert isinstance(info.value, ValueError)


# --- Snapshot ------------------------------------------------------------------


def test_snapshot_decodes_and_skips_bad_values(caplog: pytest.LogCaptureFixture) -> None:
    ks = loaded(
        kv("/root/a", b"x", 2, 2), kv("/root/b", b"bad", 3, 3), kv("/root/c", b"z", 4, 5, 2)
    )
    assert state(ks) == [("/root/a", "X", 2), ("/root/c", "Z", 5)]
    assert ks.revision == 10
    assert ks.header.cluster_id == CLUSTER
    assert "skipping key '/root/b'" in caplog.text


def test_snapshot_keys_must_be_sorted() -> None:
    ks = keyspace.KeySpace("/root", decode)
    with pytest.raises(ValueError, match="out of order"):
        ks.load_snapshot(header(5), [kv("/root/b", b"x", 2, 2), kv("/root/a", b"y", 3, 3)])


# --- Apply rules ---------------------------------------------------------------


def test_put_of_unknown_key_inserts_in_order() -> None:
    ks = loaded(kv("/root/a", b"a", 2, 2), kv("/root/c", b"c", 3, 3))
    ks.apply(resp(put("/root/b", b"b", 11, 11), member=9, term=3))
    assert state(ks) == [("/root/a", "A", 2), ("/root/b", "B", 11), ("/root/c", "C", 3)]
    assert ks.header == header(11, member=9, term=3)


def test_put_of_unknown_key_that_isnt_a_creation_is_applied_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ks = loaded()
    ks.apply(resp(put("/root/a", b"a", 5, 11, 3)))
    assert state(ks) == [("/root/a", "A", 11)]
    assert "applied as a creation" in caplog.text


def test_put_of_known_key_replaces_it() -> None:
    ks = loaded(kv("/root/a", b"a", 2, 2), kv("/root/b", b"b", 3, 3))
    ks.apply(resp(put("/root/a", b"new", 2, 11, 2)))
    assert state(ks) == [("/root/a", "NEW", 11), ("/root/b", "B", 3)]
    assert ks.search("/root/a") == kvs.KeyValue("/root/a", b"new", 2, 11, 2, 0, "NEW")


def test_put_of_known_key_with_skipped_version_is_applied_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ks = loaded(kv("/root/a", b"a", 2, 2))
    with caplog.at_level(logging.WARNING):
        ks.apply(resp(put("/root/a", b"n", 2, 11, 5)))
    assert state(ks) == [("/root/a", "N", 11)]
    assert "skipped versions" in caplog.text


def test_stale_mod_revision_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    # The mirror holds a key at mod revision 12 although its header says 10:
    # an event at 11 for that key is an old replay and must not win.
    ks = loaded(kv("/root/a", b"a", 2, 12, 3), revision=10)
    ks.apply(resp(put("/root/a", b"old", 2, 11, 2), put("/root/b", b"b", 11, 11)))
    assert state(ks) == [("/root/a", "A", 12), ("/root/b", "B", 11)]
    ks.apply(resp(delete("/root/a", 12)))
    assert state(ks) == [("/root/a", "A", 12), ("/root/b", "B", 11)]
    assert caplog.text.count("ignoring stale event") == 2


def test_delete_of_known_key_removes_it() -> None:
    ks = loaded(kv("/root/a", b"a", 2, 2), kv("/root/b", b"b", 3, 3))
    ks.apply(resp(delete("/root/a", 11)))
    assert state(ks) == [("/root/b", "B", 3)]
    assert ks.revision == 11


def test_delete_of_unknown_key_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    ks = loaded(kv("/root/b", b"b", 3, 3))
    ks.apply(resp(delete("/root/a", 11)))
    assert state(ks) == [("/root/b", "B", 3)]
    assert ks.revision == 11  # The revision still moves: etcd did change.
    assert "deletion of unknown key '/root/a'" in caplog.text


def test_decoder_failure_skips_the_key(caplog: pytest.LogCaptureFixture) -> None:
    ks = loaded(kv("/root/a", b"a", 2, 2))
    # A bad new key is skipped; a bad update of a known key keeps the old value.
    ks.apply(resp(put("/root/a", b"bad", 2, 11, 2), put("/root/b", b"bad", 11, 11)))
    assert state(ks) == [("/root/a", "A", 2)]
    assert ks.revision == 11
    # A later fix of either is applied (as a creation for the skipped one).
    ks.apply(resp(put("/root/a", b"ok", 2, 12, 3), put("/root/b", b"ok", 11, 12, 2)))
    assert state(ks) == [("/root/a", "OK", 12), ("/root/b", "OK", 12)]
    assert caplog.text.count("decode failed") == 2


def test_revisions_never_go_backwards() -> None:
    ks = loaded(kv("/root/a", b"a", 2, 2), revision=10)
    before = state(ks)
    with pytest.raises(errors.RevisionRegressionError, match="first mod revision"):
        ks.apply(resp(put("/root/b", b"b", 10, 10)))
    with pytest.raises(errors.RevisionRegressionError, match="response header revision"):
        ks.apply(resp(put("/root/b", b"b", 11, 11), revision=9))
    with pytest.raises(errors.RevisionRegressionError, match="last mod revision"):
        ks.apply(resp(put("/root/b", b"b", 12, 12), put("/root/c", b"c", 11, 11)))
    # Across responses of one batch too: the second is behind the first.
    with pytest.raises(errors.RevisionRegressionError):
        ks.apply(resp(put("/root/b", b"b", 12, 12)), resp(put("/root/c", b"c", 12, 12)))
    assert state(ks) == before
    assert ks.revision == 10


def test_cluster_id_mismatch_is_refused() -> None:
    ks = loaded(kv("/root/a", b"a", 2, 2))
    with pytest.raises(errors.ClusterMismatchError, match="expected 77, got 78") as info:
        ks.apply(resp(put("/root/b", b"b", 11, 11), cluster=78))
    assert (info.value.expected, info.value.got) == (77, 78)
    assert state(ks) == [("/root/a", "A", 2)]
    assert isinstance(info.value, errors.InconsistentUpdateError)


def test_responses_of_a_batch_merge_in_key_then_revision_order() -> None:
    ks = loaded(kv("/root/b", b"b", 2, 2), kv("/root/d", b"d", 3, 3))
    ks.apply(
        resp(put("/root/c", b"c1", 11, 11), put("/root/a", b"a1", 12, 12)),
        resp(put("/root/c", b"c2", 11, 13, 2), delete("/root/b", 13)),
        resp(delete("/root/a", 14)),
        resp(put("/root/e", b"e", 15, 15), put("/root/a", b"a2", 15, 15)),
    )
    assert state(ks) == [
        ("/root/a", "A2", 15),
        ("/root/c", "C2", 13),
        ("/root/d", "D", 3),
        ("/root/e", "E", 15),
    ]
    assert ks.revision == 15


def test_empty_responses_change_nothing_but_notify() -> None:
    ks = loaded(kv("/root/a", b"a", 2, 2))
    calls: list[int] = []
    ks.add_observer(lambda: calls.append(ks.revision))
    ks.apply(keyspace.WatchResponse(header(12), []))
    assert state(ks) == [("/root/a", "A", 2)]
    assert ks.revision == 10
    assert calls == [10]


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[list[kvs.Event]], list[int]]:
    """Random etcd-like histories: revisions of puts/deletes, cut into batches."""
    keys = [f"/root/{c}" for c in "abcde"]
    live: dict[str, tuple[int, int]] = {}  # key -> (create revision, version)
    revisions: list[list[kvs.Event]] = []
    rev = 10
    for _ in range(draw(st.integers(0, 25))):
        rev += 1
        txn: list[kvs.Event] = []
        for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True)):
            if key in live and draw(st.booleans()):
                txn.append(delete(key, rev))
                del live[key]
            else:
                create, version = live.get(key, (rev, 0))
                value = draw(st.sampled_from([b"x", b"y", b"bad"]))
                txn.append(put(key, value, create, rev, version + 1))
                live[key] = (create, version + 1)
        revisions.append(txn)
    cuts = draw(st.lists(st.integers(0, len(revisions)), max_size=6))
    return revisions, sorted(set(cuts))


@settings(max_examples=200, deadline=None)
@given(histories())
def test_any_batching_of_a_history_mirrors_the_final_state(
    history: tuple[list[list[kvs.Event]], list[int]],
) -> None:
    revisions, cuts = history
    # The model: last value per key, counting a bad value as absent (it's
    # skipped on creation and keeps the old value on update).
    model: dict[str, tuple[object, int]] = {}
    for txn in revisions:
        for ev in txn:
            if ev.type is kvs.EventType.DELETE:
                model.pop(ev.kv.key, None)
            elif ev.kv.value != b"bad":
                model[ev.kv.key] = (ev.kv.value.decode().upper(), ev.kv.mod_revision)

    ks = loaded()
    logging.disable(logging.WARNING)
    try:
        bounds = [0, *cuts, len(revisions)]
        for lo, hi in itertools.pairwise(bounds):
            batch = [resp(*txn) for txn in revisions[lo:hi]]
            if batch:
                ks.apply(*batch)
    finally:
        logging.disable(logging.NOTSET)
    assert [(k, d, r) for k, d, r in state(ks)] == sorted((k, d, r) for k, (d, r) in model.items())
    assert ks.revision == (revisions[-1][0].kv.mod_revision if revisions else 10)


# --- Reading -------------------------------------------------------------------


def test_search_range_and_prefixed() -> None:
    ks = loaded(
        kv("/root/items/a", b"1", 2, 2),
        kv("/root/items/a/b", b"2", 3, 3),
        kv("/root/items/b", b"3", 4, 4),
        kv("/root/members/z#x", b"4", 5, 5),
    )
    assert ks.search("/root/items/a/b") is not None
    assert ks.search("/root/items/c") is None
    assert [e.key for e in ks.prefixed("/root/items/a")] == ["/root/items/a", "/root/items/a/b"]
    assert [e.key for e in ks.prefixed("/root/items/")] == [
        "/root/items/a",
        "/root/items/a/b",
        "/root/items/b",
    ]
    assert [e.key for e in ks.range("/root/items/a/", "/root/members/")] == [
        "/root/items/a/b",
        "/root/items/b",
    ]
    assert len(ks) == 4
    assert [e.key for e in ks.prefixed("")] == [e.key for e in ks.key_values]


def test_prefix_range_end() -> None:
    assert keyspace.prefix_range_end("/a/b") == "/a/c"
    assert keyspace.prefix_range_end("/gazette/cluster") == "/gazette/clustes"
    assert keyspace.prefix_range_end("a\U0010ffff") == "b"
    assert keyspace.prefix_range_end("") == ""


def test_key_values_are_immutable_snapshots() -> None:
    ks = loaded(kv("/root/a", b"a", 2, 2))
    snapshot = ks.key_values
    ks.apply(resp(put("/root/b", b"b", 11, 11)))
    assert [e.key for e in snapshot] == ["/root/a"]
    assert [e.key for e in ks.key_values] == ["/root/a", "/root/b"]


# --- Signals -------------------------------------------------------------------


async def test_observers_and_waiters_see_each_update() -> None:
    ks = loaded()
    seen: list[int] = []
    ks.add_observer(lambda: seen.append(ks.revision))

    waiter = asyncio.create_task(ks.wait_for_update())
    for_12 = asyncio.create_task(ks.wait_for_revision(12))
    await asyncio.sleep(0)
    ks.apply(resp(put("/root/a", b"a", 11, 11)))
    await asyncio.wait_for(waiter, 1)
    await asyncio.sleep(0)
    assert not for_12.done()
    ks.apply(resp(put("/root/b", b"b", 12, 12)))
    await asyncio.wait_for(for_12, 1)
    assert seen == [11, 12]


async def test_wait_for_revision_times_out() -> None:
    ks = loaded()
    await ks.wait_for_revision(10, timeout=0)  # Already there: returns at once.
    with pytest.raises(TimeoutError):
        await ks.wait_for_revision(11, timeout=0.01)


# --- Watch stream handling (etcd's messages built in-process) -------------------


def watch_response(**fields: object) -> aetcd.rpc.WatchResponse:
    return aetcd.rpc.WatchResponse(**fields)


def test_progress_notification_moves_resume_point_only() -> None:
    st_ = key_space._WatchState(11)
    pending: list[keyspace.WatchResponse] = []
    assert st_.take(watch_response(created=True, header={"revision": 10}), pending) is None
    assert st_.resume == 11
    assert st_.take(watch_response(header={"revision": 40}), pending) is None
    assert (st_.resume, pending) == (41, [])


def test_events_are_converted_and_move_resume_point() -> None:
    st_ = key_space._WatchState(11)
    pending: list[keyspace.WatchResponse] = []
    msg = watch_response(
        header={"cluster_id": 5, "revision": 13},
        events=[
            {
                "type": 0,
                "kv": {
                    "key": b"/r/a",
                    "value": b"v",
                    "create_revision": 12,
                    "mod_revision": 12,
                    "version": 1,
                    "lease": 7,
                },
            },
            {"type": 1, "kv": {"key": b"/r/b", "mod_revision": 13}},
        ],
    )
    assert st_.take(msg, pending) is None
    assert st_.resume == 14
    (got,) = pending
    assert got.header.cluster_id == 5
    assert got.events[0] == kvs.Event(kvs.EventType.PUT, kvs.KeyValue("/r/a", b"v", 12, 12, 1, 7))
    assert got.events[1].type is kvs.EventType.DELETE


def test_watch_endings_are_classified() -> None:
    st_ = key_space._WatchState(11)
    assert st_.take(key_space._CLOSED, []) is key_space._Restart.CLOSED
    compacted = st_.take(watch_response(canceled=True, compact_revision=30), [])
    assert isinstance(compacted, errors.WatchCompactedError)
    assert compacted.compact_revision == 30
    no_leader = st_.take(watch_response(canceled=True, cancel_reason="etcdserver: no leader"), [])
    assert no_leader is key_space._Restart.NO_LEADER
    # etcd 3.5 cancels the create of a watch whose stream token expired as "permission
    # denied": the watch retries once with a fresh token (test_etcd_tls_auth.py).
    refused = st_.take(watch_response(canceled=True, cancel_reason="permission denied"), [])
    assert refused is key_space._Restart.REFUSED
    assert st_.refusal == "permission denied"
    other = st_.take(watch_response(canceled=True, cancel_reason="mvcc: required revision"), [])
    assert isinstance(other, errors.EtcdError)


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def test_stream_errors_restart_or_end_the_watch() -> None:
    st_ = key_space._WatchState(11)
    no_leader = rpc_error(grpc.StatusCode.UNAVAILABLE, "etcdserver: no leader")
    assert st_.take(no_leader, []) is key_space._Restart.NO_LEADER
    refused = rpc_error(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
    assert st_.take(refused, []) is key_space._Restart.UNAVAILABLE
    # Seen while etcd shuts down ("malformed header: missing HTTP content-type").
    unknown = rpc_error(grpc.StatusCode.UNKNOWN, "malformed header")
    assert st_.take(unknown, []) is key_space._Restart.UNAVAILABLE
    denied = st_.take(rpc_error(grpc.StatusCode.PERMISSION_DENIED, "no"), [])
    assert isinstance(denied, errors.EtcdError)
    assert denied.code == "PERMISSION_DENIED"
    assert isinstance(denied.__cause__, grpc.aio.AioRpcError)


async def test_connect_refuses_addresses_it_cannot_dial() -> None:
    with pytest.raises(errors.EtcdConfigError, match=r"^--etcd\.address: unsupported scheme"):
        await etcd.connect("ftp://etcd:2379")
    with pytest.raises(errors.EtcdConfigError, match="has no host"):
        await etcd.connect("http://:2379")
    with pytest.raises(errors.EtcdConfigError, match="mixes https:// and plaintext"):
        await etcd.connect("https://etcd-0:2379,http://etcd-1:2379")


def test_backoff_schedule() -> None:
    config = keyspace.KeySpaceConfig()
    assert [key_space.backoff(config, n) for n in range(9)] == [0, 0, 0.005, 2, 3, 4, 5, 5, 5]
    assert key_space.backoff(keyspace.KeySpaceConfig(backoff=()), 3) == 0


# --- apply_changes argument checks (refused before any etcd call) ---------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("a", None, 0), "expected > 0 or -1"),
        (("a", b"x", -2), "expected >= -1"),
        (("a", None, -5), "expected >= -1"),
    ],
)
async def test_apply_changes_refuses_bad_expectations(
    change: tuple[str, bytes | None, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await keyspace.apply_changes(None, "/root", [change])  # type: ignore[arg-type]


def test_apply_result_status() -> None:
    ok = keyspace.ApplyResult(True, 5, header(5))
    failed = keyspace.ApplyResult(False, 5, header(5))
    assert ok.status == protocol_pb2.OK
    assert failed.status == protocol_pb2.ETCD_TRANSACTION_FAILED
    assert keyspace.item_key("/gazette/cluster", "a/b") == "/gazette/cluster/items/a/b"
