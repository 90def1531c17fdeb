"""Resolver status rules (Gazette ``broker/resolver.go``) over a KeySpace loaded from a snapshot."""

from __future__ import annotations

import asyncio
import types

import pytest

from gazette import allocator, keyspace
from gazette.broker import journals
from gazette.broker import protocol as pb
from gazette.broker.server import errors, resolver

ROOT = "/gazette/cluster"


def journal_spec(name: str, replication: int) -> pb.JournalSpec:
    spec = pb.JournalSpec(name=name, replication=replication)
    spec.fragment.length = 1 << 20
    spec.fragment.compression_codec = pb.NONE
    spec.fragment.refresh_interval.CopyFrom(pb.duration_from_seconds(60))
    pb.validate(spec)
    return spec


def broker_spec(zone: str, suffix: str, limit: int) -> pb.BrokerSpec:
    spec = pb.BrokerSpec(journal_limit=limit)
    spec.process_spec.id.zone, spec.process_spec.id.suffix = zone, suffix
    spec.process_spec.endpoint = f"http://{suffix}:8080"
    pb.validate(spec)
    return spec


class FakeReplicas:
    """Every journal has a local replica here (the resolver doesn't check assignments)."""

    def __init__(self) -> None:
        self.replicas: dict[str, types.SimpleNamespace] = {}

    def get(self, journal: str) -> types.SimpleNamespace:
        return self.replicas.setdefault(
            journal, types.SimpleNamespace(journal=journal, signal=asyncio.Event())
        )


def make(local: tuple[str, str], suspend: bool = False) -> resolver.Resolver:
    journal = journal_spec("a/journal", 2)
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
            (f"{ROOT}/members/z1#bk-1", broker_spec("z1", "bk-1", 10).SerializeToString()),
            (f"{ROOT}/members/z2#bk-2", broker_spec("z2", "bk-2", 10).SerializeToString()),
            (f"{ROOT}/members/z3#bk-3", broker_spec("z3", "bk-3", 10).SerializeToString()),
        ]
    )
    kvs = [keyspace.KeyValue(k, v, i + 1, i + 1, 1) for i, (k, v) in enumerate(raw)]
    ks = keyspace.KeySpace(ROOT, allocator.key_value_decoder(ROOT, journals.JournalDecoder()))
    ks.load_snapshot(pb.Header.Etcd(cluster_id=7, revision=len(kvs)), kvs)
    observed = allocator.ObservedState(
        ks, allocator.member_key(ROOT, *local), journals.journal_is_consistent
    )
    return resolver.Resolver(observed, FakeReplicas())  # type: ignore[arg-type]


async def test_route_and_statuses() -> None:
    r = make(("z1", "bk-1"))
    res = await r.resolve("a/journal;meta", may_proxy=False, require_primary=False)
    assert res.status == pb.Status.OK and res.is_local
    rt = res.header.route
    assert [(m.zone, m.suffix) for m in rt.members] == [("z1", "bk-1"), ("z2", "bk-2")]
    assert rt.primary == 1 and list(rt.endpoints) == ["http://bk-1:8080", "http://bk-2:8080"]
    assert (res.header.process_id.zone, res.header.process_id.suffix) == ("z1", "bk-1")
    assert res.header.etcd.cluster_id == 7
    assert res.replica is not None and res.replica.journal == "a/journal"
    assert res.invalidated is res.replica.signal
    assert res.journal_spec is not None and res.journal_spec.name == "a/journal"
    assert res.item is not None and len(res.assignments) == 2

    res = await r.resolve("a/journal", may_proxy=False, require_primary=True)
    assert res.status == pb.Status.NOT_JOURNAL_PRIMARY_BROKER
    assert res.header.process_id.suffix == "bk-1"  # we authored the error
    res = await r.resolve("a/journal", may_proxy=True, require_primary=True)
    assert res.status == pb.Status.OK and res.header.process_id.suffix == "bk-2"
    assert not res.is_local

    missing = await r.resolve("missing", may_proxy=False, require_primary=False)
    assert missing.status == pb.Status.JOURNAL_NOT_FOUND and missing.journal_spec is None
    hidden = await r.resolve(
        "a/journal", may_proxy=False, require_primary=False, authorized=lambda spec: False
    )
    assert hidden.status == pb.Status.JOURNAL_NOT_FOUND and not hidden.header.route.members


async def test_non_member_and_suspended() -> None:
    r = make(("z3", "bk-3"))
    res = await r.resolve("a/journal", may_proxy=False, require_primary=False)
    assert res.status == pb.Status.NOT_JOURNAL_BROKER
    ok = await r.resolve("a/journal", may_proxy=True, require_primary=False)
    assert ok.status == pb.Status.OK and not ok.header.process_id.suffix  # any member may serve
    suspended = make(("z1", "bk-1"), suspend=True)
    res = await suspended.resolve("a/journal", may_proxy=False, require_primary=False)
    assert res.status == pb.Status.SUSPENDED


async def test_proxy_header_checks_and_missing_member() -> None:
    r = make(("z1", "bk-1"))
    hdr = pb.Header()
    hdr.etcd.cluster_id = 8
    with pytest.raises(errors.ResolutionError, match="ClusterId doesn't match"):
        await r.resolve("a/journal", may_proxy=False, require_primary=False, proxy_header=hdr)
    hdr.etcd.cluster_id = 7
    hdr.process_id.zone, hdr.process_id.suffix = "z2", "bk-2"
    with pytest.raises(errors.ResolutionError, match="ProcessId doesn't match"):
        await r.resolve("a/journal", may_proxy=False, require_primary=False, proxy_header=hdr)

    gone = make(("z9", "nobody"))
    res = await gone.resolve("a/journal", may_proxy=False, require_primary=False)
    assert (res.local_id.zone, res.local_id.suffix) == ("local-BrokerSpec", "missing-from-Etcd")


async def test_stopped_resolver_refuses_to_serve_locally() -> None:
    r = make(("z1", "bk-1"))
    r.stop_serving_local_replicas()
    with pytest.raises(errors.ResolutionError, match="stopped serving local replicas"):
        await r.resolve("a/journal", may_proxy=False, require_primary=False)
    # Proxying to the primary elsewhere still resolves, without a local replica.
    res = await r.resolve("a/journal", may_proxy=True, require_primary=True)
    assert res.status == pb.Status.OK and res.replica is None
    assert not res.invalidated.is_set()


async def test_assignments_consistency() -> None:
    r = make(("z1", "bk-1"))
    res = await r.resolve("a/journal", may_proxy=False, require_primary=False)
    # bk-2's assignment value is still empty (Route{primary -1}): not consistent yet.
    assert not res.assignments_consistent
