"""Resolver status rules (broker.md 2.3) over a KeySpace loaded from a snapshot."""

from __future__ import annotations

import pytest

from gazette import allocator, keyspace
from gazette.allocator import errors, keys
from gazette.broker.protocol import protocol_pb2 as pb2

ROOT = "/gazette/cluster"


def broker(zone: str, suffix: str) -> bytes:
    spec = pb2.BrokerSpec(journal_limit=10)
    spec.process_spec.id.zone, spec.process_spec.id.suffix = zone, suffix
    spec.process_spec.endpoint = f"http://{suffix}:8080"
    return spec.SerializeToString()


def make(local: tuple[str, str], suspend: bool = False) -> allocator.Resolver:
    journal = pb2.JournalSpec(name="a/j", replication=2)
    if suspend:
        journal.suspend.level = pb2.JournalSpec.Suspend.FULL
    route = pb2.Route(primary=1)
    route.members.add(zone="z1", suffix="b1")
    route.members.add(zone="z2", suffix="b2")
    raw = sorted(
        [
            (f"{ROOT}/assign/a/j#z1#b1#1", route.SerializeToString()),
            (f"{ROOT}/assign/a/j#z2#b2#0", b""),
            (f"{ROOT}/assign/other#z1#b1#0", b""),
            (f"{ROOT}/items/a/j", journal.SerializeToString()),
            (f"{ROOT}/members/z1#b1", broker("z1", "b1")),
            (f"{ROOT}/members/z2#b2", broker("z2", "b2")),
            (f"{ROOT}/members/z3#b3", broker("z3", "b3")),
        ]
    )
    kvs = [keyspace.KeyValue(k, v, i + 1, i + 1, 1) for i, (k, v) in enumerate(raw)]
    ks = keyspace.KeySpace(ROOT, keys.key_value_decoder(ROOT, allocator.JournalDecoder()))
    ks.load_snapshot(pb2.Header.Etcd(cluster_id=7, revision=len(kvs)), kvs)
    observed = allocator.ObservedState(
        ks, keys.member_key(ROOT, *local), allocator.journal_is_consistent
    )
    return allocator.Resolver(observed, local_replica=lambda j: f"replica of {j}")


async def test_route_and_statuses() -> None:
    r = make(("z1", "b1"))
    res = await r.resolve("a/j;meta", allocator.ResolveOptions())
    assert res.status == pb2.Status.OK
    rt = res.header.route
    assert [(m.zone, m.suffix) for m in rt.members] == [("z1", "b1"), ("z2", "b2")]
    assert rt.primary == 1 and list(rt.endpoints) == ["http://b1:8080", "http://b2:8080"]
    assert (res.header.process_id.zone, res.header.process_id.suffix) == ("z1", "b1")
    assert res.header.etcd.cluster_id == 7
    assert res.local_replica == "replica of a/j"

    res = await r.resolve("a/j", allocator.ResolveOptions(require_primary=True))
    assert res.status == pb2.Status.NOT_JOURNAL_PRIMARY_BROKER
    assert res.header.process_id.suffix == "b1"  # we authored the error
    res = await r.resolve("a/j", allocator.ResolveOptions(require_primary=True, may_proxy=True))
    assert res.status == pb2.Status.OK and res.header.process_id.suffix == "b2"

    assert (await r.resolve("missing")).status == pb2.Status.JOURNAL_NOT_FOUND
    hidden = await r.resolve("a/j", allocator.ResolveOptions(), authorized=lambda spec: False)
    assert hidden.status == pb2.Status.JOURNAL_NOT_FOUND and not hidden.header.route.members


async def test_non_member_and_suspended() -> None:
    r = make(("z3", "b3"))
    assert (await r.resolve("a/j")).status == pb2.Status.NOT_JOURNAL_BROKER
    ok = await r.resolve("a/j", allocator.ResolveOptions(may_proxy=True))
    assert ok.status == pb2.Status.OK and not ok.header.process_id.suffix  # any member may serve
    assert (await make(("z1", "b1"), suspend=True).resolve("a/j")).status == pb2.Status.SUSPENDED


async def test_proxy_header_checks_and_missing_member() -> None:
    r = make(("z1", "b1"))
    hdr = pb2.Header()
    hdr.etcd.cluster_id = 8
    with pytest.raises(errors.ResolveError, match="ClusterId doesn't match"):
        await r.resolve("a/j", allocator.ResolveOptions(proxy_header=hdr))
    hdr.etcd.cluster_id = 7
    hdr.process_id.zone, hdr.process_id.suffix = "z2", "b2"
    with pytest.raises(errors.ResolveError, match="ProcessId doesn't match"):
        await r.resolve("a/j", allocator.ResolveOptions(proxy_header=hdr))

    gone = make(("z9", "nobody"))
    res = await gone.resolve("a/j")
    assert (res.local_id.zone, res.local_id.suffix) == ("local-BrokerSpec", "missing-from-Etcd")


def test_journal_consistency_gate() -> None:
    r = make(("z1", "b1"))
    s = r.observed.state
    i = s.find_item("a/j")
    asn = s.assignments_of(i)
    # b2's assignment value is still empty (Route{primary -1}): not consistent yet.
    assert not allocator.journal_is_consistent(s.item(i), asn[0], asn)
