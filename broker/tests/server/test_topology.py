"""The data plane's registry, as the keyspace publisher keeps it, resolves as Python does.

A real KeySpace (loaded from a snapshot, then updated with watch events) is
published into a real ``gazette.dataplane.Topology``; every journal is resolved by
both the Python :class:`~gazette.broker.server.resolver.Resolver` and the native
registry, under every combination of the resolver's keywords, and the two must
answer the same status, header and consistency.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gazette import allocator, keyspace
from gazette.broker import journals
from gazette.broker import protocol as pb
from gazette.broker.server import errors, resolver, topology
from gazette.dataplane import Topology
from gazette.keyspace import key_values as kvs

ROOT = "/gazette/cluster"
CLUSTER = 7
NAMES = ["a/journal", "a/journal;meta", "b/suspended", "c/unassigned", "missing"]


def journal_spec(name: str, suspend: bool = False) -> bytes:
    spec = pb.JournalSpec(name=name, replication=2)
    spec.fragment.length = 1 << 20
    spec.fragment.compression_codec = pb.NONE
    spec.fragment.refresh_interval.CopyFrom(pb.duration_from_seconds(60))
    if suspend:
        spec.suspend.level = pb.JournalSpec.Suspend.FULL
    pb.validate(spec)
    return spec.SerializeToString()


def broker_spec(zone: str, suffix: str, host: str | None = None) -> bytes:
    spec = pb.BrokerSpec(journal_limit=10)
    spec.process_spec.id.zone, spec.process_spec.id.suffix = zone, suffix
    spec.process_spec.endpoint = f"http://{host or suffix}:8080"
    return spec.SerializeToString()


def route(primary: int, *members: tuple[str, str]) -> bytes:
    rt = pb.Route(primary=primary)
    for zone, suffix in members:
        rt.members.add(zone=zone, suffix=suffix)
    return rt.SerializeToString()


A_ROUTE = route(1, ("z1", "bk-1"), ("z2", "bk-2"))


def initial() -> list[tuple[str, bytes]]:
    return sorted(
        [
            (f"{ROOT}/assign/a/journal#z1#bk-1#1", A_ROUTE),
            (f"{ROOT}/assign/a/journal#z2#bk-2#0", b""),
            (f"{ROOT}/assign/b/suspended#z2#bk-2#0", b""),
            (f"{ROOT}/items/a/journal", journal_spec("a/journal")),
            (f"{ROOT}/items/b/suspended", journal_spec("b/suspended", suspend=True)),
            (f"{ROOT}/items/c/unassigned", journal_spec("c/unassigned")),
            (f"{ROOT}/members/z1#bk-1", broker_spec("z1", "bk-1")),
            (f"{ROOT}/members/z2#bk-2", broker_spec("z2", "bk-2")),
            (f"{ROOT}/members/z3#bk-3", broker_spec("z3", "bk-3")),
        ]
    )


class Recording:
    """Forwards publications to a real Topology and keeps them."""

    def __init__(self) -> None:
        self.native = Topology()
        self.calls: list[dict[str, Any]] = []

    def publish(
        self,
        etcd: bytes,
        local_id: tuple[str, str] | None,
        members: list[tuple[str, str, str]] | None,
        journals: list[topology.JournalUpdate],
        removed: list[str],
    ) -> None:
        self.calls.append(
            {
                "local_id": local_id,
                "members": members,
                "journals": sorted(j[0] for j in journals),
                "removed": removed,
            }
        )
        self.native.publish(etcd, local_id, members, journals, removed)


class NoReplicas:
    def get(self, journal: str) -> None:
        return None


class Cluster:
    def __init__(self, local: tuple[str, str]) -> None:
        self.ks = keyspace.KeySpace(
            ROOT, allocator.key_value_decoder(ROOT, journals.JournalDecoder())
        )
        raw = [keyspace.KeyValue(k, v, i + 1, i + 1, 1) for i, (k, v) in enumerate(initial())]
        self.ks.load_snapshot(pb.Header.Etcd(cluster_id=CLUSTER, revision=len(raw)), raw)
        self.revision = len(raw)
        observed = allocator.ObservedState(
            self.ks, allocator.member_key(ROOT, *local), journals.journal_is_consistent
        )
        self.resolver = resolver.Resolver(observed, NoReplicas())
        self.registry = Recording()
        topology.Publisher(observed, self.registry).start()

    def apply(self, *changes: tuple[str, bytes | None]) -> None:
        """Put (value) or delete (None) keys in one watch response."""
        events = []
        for key, value in changes:
            self.revision += 1
            if value is None:
                kv = kvs.KeyValue(key, b"", 0, self.revision, 0)
                events.append(kvs.Event(kvs.EventType.DELETE, kv))
            else:
                kv = kvs.KeyValue(key, value, self.revision, self.revision, 1)
                events.append(kvs.Event(kvs.EventType.PUT, kv))
        hdr = pb.Header.Etcd(cluster_id=CLUSTER, member_id=1, revision=self.revision, raft_term=2)
        self.ks.apply(keyspace.WatchResponse(hdr, events))

    async def assert_agree(self) -> None:
        for name, may_proxy, require_primary in itertools.product(
            NAMES, (False, True), (False, True)
        ):
            what = f"{name} may_proxy={may_proxy} require_primary={require_primary}"
            py = await self.resolver.resolve(
                name, may_proxy=may_proxy, require_primary=require_primary
            )
            status, header, consistent = self.registry.native.resolve(
                name, may_proxy, require_primary
            )
            assert status == py.status, what
            assert pb.Header.FromString(header) == py.header, what
            assert consistent == py.assignments_consistent, what


@pytest.mark.parametrize(
    "local", [("z1", "bk-1"), ("z2", "bk-2"), ("z3", "bk-3"), ("z9", "not-a-member")]
)
async def test_resolutions_agree_on_every_journal_and_keyword(local: tuple[str, str]) -> None:
    c = Cluster(local)
    assert c.registry.native.revision == c.revision
    first = c.registry.calls[0]
    assert first["journals"] == ["a/journal", "b/suspended", "c/unassigned"]
    assert first["members"] is not None and len(first["members"]) == 3
    await c.assert_agree()


async def test_an_update_publishes_only_what_it_changed() -> None:
    c = Cluster(("z1", "bk-1"))
    # The primary writes the route into the other assignment: consistent now.
    c.apply((f"{ROOT}/assign/a/journal#z2#bk-2#0", A_ROUTE))
    last = c.registry.calls[-1]
    assert last["journals"] == ["a/journal"] and last["members"] is None
    assert c.registry.native.resolve("a/journal", False, False)[2] is True
    await c.assert_agree()

    # A member's new endpoint: the members are published, no journal.
    c.apply((f"{ROOT}/members/z2#bk-2", broker_spec("z2", "bk-2", host="elsewhere")))
    last = c.registry.calls[-1]
    assert last["journals"] == [] and last["members"] is not None
    hdr = pb.Header.FromString(c.registry.native.resolve("a/journal", False, False)[1])
    assert list(hdr.route.endpoints) == ["http://bk-1:8080", "http://elsewhere:8080"]
    await c.assert_agree()

    # c/unassigned gets a primary here; b/suspended goes away.
    c.apply(
        (f"{ROOT}/assign/c/unassigned#z1#bk-1#0", b""),
        (f"{ROOT}/items/b/suspended", None),
        (f"{ROOT}/assign/b/suspended#z2#bk-2#0", None),
    )
    last = c.registry.calls[-1]
    assert last["journals"] == ["c/unassigned"] and last["removed"] == ["b/suspended"]
    assert c.registry.native.revision == c.revision
    await c.assert_agree()

    # Our own member key goes: we resolve as the placeholder member, as Python does.
    c.apply((f"{ROOT}/members/z1#bk-1", None))
    assert c.registry.calls[-1]["local_id"] is None
    await c.assert_agree()


async def test_proxy_headers_and_stopping_fail_as_in_python() -> None:
    c = Cluster(("z1", "bk-1"))
    hdr = pb.Header()
    hdr.etcd.cluster_id = CLUSTER + 1
    with pytest.raises(errors.ResolutionError, match="ClusterId doesn't match"):
        await c.resolver.resolve(
            "a/journal", may_proxy=False, require_primary=False, proxy_header=hdr
        )
    with pytest.raises(ValueError, match="ClusterId doesn't match"):
        c.registry.native.resolve("a/journal", False, False, hdr.SerializeToString())
    hdr.etcd.cluster_id = CLUSTER
    hdr.process_id.zone, hdr.process_id.suffix = "z2", "bk-2"
    with pytest.raises(ValueError, match="ProcessId doesn't match"):
        c.registry.native.resolve("a/journal", False, False, hdr.SerializeToString())

    c.registry.native.stop_serving_local_replicas()
    with pytest.raises(ValueError, match="stopped serving local replicas"):
        c.registry.native.resolve("a/journal", False, False)
    # Proxying to a primary elsewhere still resolves.
    assert c.registry.native.resolve("a/journal", True, True)[0] == pb.Status.OK


def test_undecodable_publications_are_refused_with_the_message_named() -> None:
    t = Topology()
    with pytest.raises(ValueError, match="JournalSpec"):
        t.publish(b"", None, None, [("x", b"\xff\xff", b"", False)], [])
    assert t.revision == 0
