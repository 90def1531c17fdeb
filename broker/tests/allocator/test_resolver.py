"""Resolver status rules (broker.md 2.3) over a KeySpace loaded from a snapshot."""

from __future__ import annotations

import pytest

from gazette import allocator, keyspace
from gazette.allocator import errors, keys, testing
from gazette.broker import protocol as pb

ROOT = "/gazette/cluster"


def make(local: tuple[str, str], suspend: bool = False) -> allocator.Resolver:
    journal = testing.journal_spec("a/journal", 2)
    if suspend:
        journal.suspend.level = pb.JournalSpec.Suspend.FULL
    route = pb.Route(primary=1)
    route.members.add(zone="z1", suffix="bk-1")
    route.members.add(zone="z2", suffix="bk-2")
    raw = sorted(
        [
            (f"{ROOT}/assign/a/journal#z1#bk-1#1", route.SerializeToString()),
            (f"{ROOT}/assign/a/journal#z2#bk-2#0", b""),
            (f"{ROOT}/assign/other#z1#bk-1#0", b""),
            (f"{ROOT}/items/a/journal", journal.SerializeToString()),
            (f"{ROOT}/members/z1#bk-1", testing.broker_spec("z1", "bk-1", 10).SerializeToString()),
            (f"{ROOT}/members/z2#bk-2", testing.broker_spec("z2", "bk-2", 10).SerializeToString()),
            (f"{ROOT}/members/z3#bk-3", testing.broker_spec("z3", "bk-3", 10).SerializeToString()),
        ]
    )
    kvs = [keyspace.KeyValue(k, v, i + 1, i + 1, 1) for i, (k, v) in enumerate(raw)]
    ks = keyspace.KeySpace(ROOT, keys.key_value_decoder(ROOT, allocator.JournalDecoder()))
    ks.load_snapshot(pb.Header.Etcd(cluster_id=7, revision=len(kvs)), kvs)
    observed = allocator.ObservedState(
        ks, keys.member_key(ROOT, *local), allocator.journal_is_consistent
    )
    return allocator.Resolver(observed, local_replica=lambda j: f"replica of {j}")


async def test_route_and_statuses() -> None:
    r = make(("z1", "bk-1"))
    res = await r.resolve("a/journal;meta", allocator.ResolveOptions())
    assert res.status == pb.Status.OK
    rt = res.header.route
    assert [(m.zone, m.suffix) for m in rt.members] == [("z1", "bk-1"), ("z2", "bk-2")]
    assert rt.primary == 1 and list(rt.endpoints) == ["http://bk-1:8080", "http://bk-2:8080"]
    assert (res.header.process_id.zone, res.header.process_id.suffix) == ("z1", "bk-1")
    assert res.header.etcd.cluster_id == 7
    assert res.local_replica == "replica of a/journal"

    res = await r.resolve("a/journal", allocator.ResolveOptions(require_primary=True))
    assert res.status == pb.Status.NOT_JOURNAL_PRIMARY_BROKER
    assert res.header.process_id.suffix == "bk-1"  # we authored the error
    res = await r.resolve(
        "a/journal", allocator.ResolveOptions(require_primary=True, may_proxy=True)
    )
    assert res.status == pb.Status.OK and res.header.process_id.suffix == "bk-2"

    assert (await r.resolve("missing")).status == pb.Status.JOURNAL_NOT_FOUND
    hidden = await r.resolve("a/journal", allocator.ResolveOptions(), authorized=lambda spec: False)
    assert hidden.status == pb.Status.JOURNAL_NOT_FOUND and not hidden.header.route.members


async def test_non_member_and_suspended() -> None:
    r = make(("z3", "bk-3"))
    assert (await r.resolve("a/journal")).status == pb.Status.NOT_JOURNAL_BROKER
    ok = await r.resolve("a/journal", allocator.ResolveOptions(may_proxy=True))
    assert ok.status == pb.Status.OK and not ok.header.process_id.suffix  # any member may serve
    assert (
        await make(("z1", "bk-1"), suspend=True).resolve("a/journal")
    ).status == pb.Status.SUSPENDED


async def test_proxy_header_checks_and_missing_member() -> None:
    r = make(("z1", "bk-1"))
    hdr = pb.Header()
    hdr.etcd.cluster_id = 8
    with pytest.raises(errors.ResolveError, match="ClusterId doesn't match"):
        await r.resolve("a/journal", allocator.ResolveOptions(proxy_header=hdr))
    hdr.etcd.cluster_id = 7
    hdr.process_id.zone, hdr.process_id.suffix = "z2", "bk-2"
    with pytest.raises(errors.ResolveError, match="ProcessId doesn't match"):
        await r.resolve("a/journal", allocator.ResolveOptions(proxy_header=hdr))

    gone = make(("z9", "nobody"))
    res = await gone.resolve("a/journal")
    assert (res.local_id.zone, res.local_id.suffix) == ("local-BrokerSpec", "missing-from-Etcd")


def test_journal_consistency_gate() -> None:
    r = make(("z1", "bk-1"))
    s = r.observed.state
    i = s.find_item("a/journal")
    asn = s.assignments_of(i)
    # bk-2's assignment value is still empty (Route{primary -1}): not consistent yet.
    assert not allocator.journal_is_consistent(s.item(i), asn[0], asn)
