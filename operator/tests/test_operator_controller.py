"""The controller: out-of-band etcd edits, names changing hands, Shard status, by watches.

No etcd and no API server: the etcd side is a MemorySpecStore whose keys are fed into
the controller's own mirrors as watch responses (what a watch would deliver), the
API side a MemoryKube; the controller is driven one step at a time with ``run_due``.
"""

from __future__ import annotations

import datetime
from typing import Any

from operator_objects import SHARD_SPEC, journal, shard

from gazette import allocator, keyspace
from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.operator import assignments, controller, crd, lag, mirrors, reconcile, testing

RECONCILE = reconcile.ReconcileConfig(broker_root="/g/cluster", consumers_root="/g/consumers")
CONFIG = controller.ControllerConfig(
    reconcile=RECONCILE, cluster="default", retry_delay=0, status_interval=0, settle_delay=0
)
ITEMS = "/g/cluster/items"
KEY = "/g/cluster/items/examples/logs/one"
APP = "/g/consumers/word-count"
NOW = datetime.datetime(2030, 1, 2, tzinfo=datetime.UTC)
Code = pc.ReplicaStatus.Code


class Rig:
    """A controller over an in-memory etcd and API server."""

    def __init__(self, config: controller.ControllerConfig = CONFIG) -> None:
        self.store = testing.MemorySpecStore()
        self.api = testing.MemoryKube()
        self.views = assignments.AssignmentViews(client=None)  # type: ignore[arg-type]
        self.ctl = controller.Controller(
            config, self.store, self.api, self.views, clock=lambda: NOW
        )

    def add(self, body: dict[str, Any], event: str | None = None) -> dict[str, Any]:
        """Store ``body`` in the API server and tell the controller, as kopf would."""
        stored = self.api.add(body)
        kind = reconcile.SHARDS if "sources" in stored["spec"] else reconcile.JOURNALS
        self.ctl.observe(kind, event, stored)
        return stored

    def mirror(self, root: str) -> mirrors.Mirror:
        got = self.views.mirrors.get(root)
        assert got is not None, root
        return got

    def sync(self, root: str = ITEMS) -> None:
        """Deliver to the mirror of ``root`` what changed in the store (load it the first time)."""
        mirror = self.mirror(root)
        header = pb.Header.Etcd(
            cluster_id=1, member_id=1, raft_term=1, revision=self.store.revision
        )
        held = {
            k: keyspace.KeyValue(k, v, self.store.mod_revisions[k], self.store.mod_revisions[k], 1)
            for k, v in sorted(self.store.values.items())
            if k.startswith(root + "/")
        }
        if not mirror.loaded:
            mirror.load_snapshot(header, list(held.values()))
            return
        events: list[keyspace.Event] = []
        seen = {kv.key: kv for kv in mirror.key_values}
        for key, kv in held.items():
            if key not in seen or seen[key].mod_revision != kv.mod_revision:
                events.append(keyspace.Event(keyspace.EventType.PUT, kv))
        for key in seen.keys() - held.keys():
            self.store.revision += 1
            events.append(
                keyspace.Event(
                    keyspace.EventType.DELETE,
                    keyspace.KeyValue(key, b"", 0, self.store.revision, 0),
                )
            )
        events.sort(key=lambda e: e.kv.mod_revision)
        header.revision = self.store.revision
        mirror.apply(keyspace.WatchResponse(header, events))

    def stored(self, body: dict[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        return self.api.objects[(meta["namespace"], meta["name"])]


def conditions(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in body["status"]["conditions"]]


async def applied_journal(rig: Rig, **kwargs: Any) -> dict[str, Any]:
    """A Journal whose spec the handler wrote, with the status it patched."""
    body = journal(**kwargs)
    outcome = await reconcile.reconcile(body, reconcile.JOURNALS, RECONCILE, rig.store)
    assert outcome.ready
    body["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Applied",
                "message": "etcd holds the spec",
                "lastTransitionTime": "2030-01-01T00:00:00Z",
            }
        ],
        "etcdKey": KEY,
        "modRevision": outcome.mod_revision,
    }
    return rig.add(body)


async def test_own_writes_are_left_alone_and_out_of_band_edits_are_put_back() -> None:
    rig = Rig()
    body = await applied_journal(rig)
    declared = rig.store.values[KEY]
    rig.sync()  # the first load
    await rig.ctl.run_due()
    # The handler rewrites the spec after an edit: the watch sees it, the object agrees.
    rig.store.put(KEY, declared)
    rig.sync()
    assert rig.ctl.pending() == (1, 0)
    await rig.ctl.run_due()
    assert (rig.store.writes, rig.api.patches, rig.api.events) == (1, [], [])

    # Someone puts another spec with etcdctl: it is put back, and the object says so.
    edited = pb.JournalSpec.FromString(declared)
    edited.replication = 5
    rig.store.put(KEY, edited.SerializeToString())
    rig.sync()
    await rig.ctl.run_due()
    assert rig.store.values[KEY] == declared
    assert [(e.type, e.reason) for e in rig.api.events] == [("Normal", "Restored")]
    ((kind, _, name, patched),) = rig.api.patches
    assert (kind, name) == ("Journal", body["metadata"]["name"])
    assert patched["modRevision"] == rig.store.mod_revisions[KEY]

    # And deleted: written again.
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", rig.stored(body))
    del rig.store.values[KEY]
    del rig.store.mod_revisions[KEY]
    rig.sync()
    await rig.ctl.run_due()
    assert rig.store.values[KEY] == declared
    assert len(rig.api.events) == 2


async def test_a_suspended_journal_is_no_drift() -> None:
    rig = Rig()
    await applied_journal(rig)
    rig.sync()
    suspended = pb.JournalSpec.FromString(rig.store.values[KEY])
    suspended.suspend.level = pb.JournalSpec.Suspend.FULL
    rig.store.put(KEY, suspended.SerializeToString())
    rig.sync()
    await rig.ctl.run_due()
    assert (rig.api.events, rig.store.writes) == ([], 1)


async def test_keys_of_no_object_paused_or_invalid_objects_are_left_alone() -> None:
    rig = Rig()
    rig.sync()
    rig.store.put("/g/cluster/items/by/gazctl", b"whatever")
    rig.sync()
    assert rig.ctl.pending() == (0, 0)
    body = await applied_journal(rig)
    rig.sync()
    paused = rig.stored(body)
    paused["metadata"]["annotations"][crd.PAUSED_ANNOTATION] = "true"
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", paused)
    rig.store.put(KEY, b"")
    rig.sync()
    await rig.ctl.run_due()
    assert rig.store.values[KEY] == b""
    # Nor an invalid one (whose spec is not in etcd: the key is not its to restore).
    invalid = rig.stored(body)
    invalid["metadata"]["annotations"] = {}
    invalid["spec"]["replication"] = 0
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", invalid)
    rig.store.put(KEY, b"")
    rig.sync()
    await rig.ctl.run_due()
    assert rig.store.values[KEY] == b""
    assert rig.api.events == []


async def test_the_next_oldest_takes_a_name_over_when_its_owner_goes() -> None:
    rig = Rig()
    owner = await applied_journal(rig, name="owner", created="2030-01-01T00:00:00Z")
    rival_body = journal(name="rival", uid="uid-2", created="2030-01-01T00:00:05Z")
    rival_body["spec"]["replication"] = 1
    rival_body["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "ResourceConflict",
                "message": "Journal ns/owner declared 'examples/logs/one' first",
                "lastTransitionTime": "2030-01-01T00:00:05Z",
            }
        ]
    }
    rival = rig.add(rival_body)
    rig.sync()
    await rig.ctl.run_due()
    assert rig.api.patches == []

    rig.ctl.observe(reconcile.JOURNALS, "DELETED", owner)
    await rig.ctl.run_due()
    assert pb.JournalSpec.FromString(rig.store.values[KEY]).replication == 1
    assert conditions(rig.stored(rival)) == [("Ready", "True", "Applied")]
    assert [(e.type, e.reason) for e in rig.api.events] == [("Normal", "Applied")]
    assert rig.api.event_objects == ["rival"]


async def test_a_name_changing_hands_by_relabelling() -> None:
    rig = Rig()
    owner = await applied_journal(rig, name="owner", created="2030-01-01T00:00:00Z")
    rival = rig.add(journal(name="rival", uid="uid-2", created="2030-01-01T00:00:05Z"))
    rig.sync()
    # The owner moves to another cluster: the controller forgets it; the rival takes over.
    moved = rig.stored(owner)
    moved["metadata"]["labels"][crd.CLUSTER_LABEL] = "other"
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", moved)
    await rig.ctl.run_due()
    assert conditions(rig.stored(rival)) == [("Ready", "True", "Applied")]


async def test_a_patch_from_a_stale_object_is_redone_from_the_newer_one() -> None:
    rig = Rig()
    owner = await applied_journal(rig, name="owner", created="2030-01-01T00:00:00Z")
    rival = rig.add(journal(name="rival", uid="uid-2", created="2030-01-01T00:00:05Z"))
    rig.api.add(rig.stored(rival))  # changed since the controller saw it
    rig.ctl.observe(reconcile.JOURNALS, "DELETED", owner)
    await rig.ctl.run_due()
    assert rig.api.patches == []  # refused: 409
    assert rig.ctl.pending() == (1, 0)
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", rig.stored(rival))
    await rig.ctl.run_due()
    assert conditions(rig.stored(rival)) == [("Ready", "True", "Applied")]


async def test_etcd_and_api_failures_are_retried() -> None:
    rig = Rig()
    body = await applied_journal(rig)
    rig.sync()
    rig.store.put(KEY, b"garbage")
    rig.sync()
    rig.store.fail = True
    await rig.ctl.run_due()
    assert rig.ctl.pending() == (1, 0)  # again after retry_delay
    assert [(e.type, e.reason) for e in rig.api.events] == [("Warning", "EtcdError")]
    assert conditions(rig.stored(body)) == [("Ready", "False", "EtcdError")]
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", rig.stored(body))  # kopf sees the patch
    rig.store.fail = False
    rig.api.fail = True
    await rig.ctl.run_due()
    assert rig.ctl.pending() == (1, 0)
    assert pb.JournalSpec.FromString(rig.store.values[KEY]).replication == 3
    rig.api.fail = False
    await rig.ctl.run_due()
    assert rig.ctl.pending() == (0, 0)
    assert conditions(rig.stored(body)) == [("Ready", "True", "Applied")]


def applied_shard(**kwargs: Any) -> dict[str, Any]:
    cond = {
        "type": "Applied",
        "status": "True",
        "reason": "Applied",
        "message": "etcd holds the spec",
        "lastTransitionTime": "2030-01-01T00:00:00Z",
    }
    return shard(status={"conditions": [cond], "observedGeneration": 1}, **kwargs)


def assignment(slot: int, code: int, revision: int) -> keyspace.KeyValue:
    key = allocator.assignment_key(
        APP, allocator.Assignment(SHARD_SPEC["name"], f"zone-{slot}", "c", slot)
    )
    failed = ["store: disk full"] if code == Code.FAILED else []
    value = pc.ReplicaStatus(code=code, errors=failed).SerializeToString()  # type: ignore[arg-type]
    return keyspace.KeyValue(key, value, revision, revision, 1)


async def test_shard_status_follows_its_replicas_with_one_watch() -> None:
    rig = Rig()
    body = rig.add(applied_shard())
    # Following the application's specs and assignments started with the first Shard.
    assign = rig.mirror(APP + "/assign")
    assert rig.views.mirrors.get(APP + "/items") is not None
    await rig.ctl.run_due()
    assert rig.api.patches == []  # not loaded yet

    header = pb.Header.Etcd(cluster_id=1, member_id=1, raft_term=1, revision=10)
    assign.load_snapshot(header, [assignment(0, Code.PRIMARY, 9), assignment(1, Code.STANDBY, 10)])
    await rig.ctl.run_due()
    ((_, _, _, patched),) = rig.api.patches
    assert (patched["primary"], patched["standbys"]) == ("zone-0/c", ["zone-1/c"])
    new = rig.stored(body)
    assert sorted(conditions(new)) == [("Applied", "True", "Applied"), ("Ready", "True", "Primary")]

    # The object changes (kopf tells): nothing to write.
    rig.ctl.observe(reconcile.SHARDS, "MODIFIED", new)
    await rig.ctl.run_due()
    assert len(rig.api.patches) == 1

    # The primary fails: one watch event, one patch.
    header.revision = 11
    assign.apply(
        keyspace.WatchResponse(
            header, [keyspace.Event(keyspace.EventType.PUT, assignment(0, Code.FAILED, 11))]
        )
    )
    assert rig.ctl.pending() == (0, 1)
    await rig.ctl.run_due()
    assert ("Ready", "False", "Failed") in conditions(rig.stored(body))


async def test_shard_status_writes_are_debounced() -> None:
    rig = Rig(controller.ControllerConfig(reconcile=RECONCILE, status_interval=60, settle_delay=0))
    body = rig.add(applied_shard())
    assign = rig.mirror(APP + "/assign")
    header = pb.Header.Etcd(cluster_id=1, member_id=1, raft_term=1, revision=10)
    assign.load_snapshot(header, [assignment(0, Code.PRIMARY, 9)])
    await rig.ctl.run_due()
    assert len(rig.api.patches) == 1
    rig.ctl.observe(reconcile.SHARDS, "MODIFIED", rig.stored(body))
    header.revision = 11
    assign.apply(
        keyspace.WatchResponse(
            header, [keyspace.Event(keyspace.EventType.PUT, assignment(0, Code.FAILED, 11))]
        )
    )
    await rig.ctl.run_due()
    assert len(rig.api.patches) == 1  # not before status_interval
    assert rig.ctl.pending() == (0, 1)


async def test_objects_of_other_clusters_and_unmanaged_ones_are_not_served() -> None:
    rig = Rig()
    rig.add(journal(labels={crd.CLUSTER_LABEL: "other"}))
    rig.add(journal(name="u", uid="u", annotations={crd.UNMANAGED_ANNOTATION: "true"}))
    rig.sync()
    rig.store.put(KEY, b"x")
    rig.sync()
    assert rig.ctl.pending() == (0, 0)


def member(zone: str, suffix: str, endpoint: str, revision: int) -> keyspace.KeyValue:
    spec = pc.ConsumerSpec(shard_limit=10)
    spec.process_spec.id.zone, spec.process_spec.id.suffix = zone, suffix
    spec.process_spec.endpoint = endpoint
    key = allocator.member_key(APP, zone, suffix)
    return keyspace.KeyValue(key, spec.SerializeToString(), revision, revision, 1)


def broker(endpoint: str, revision: int) -> keyspace.KeyValue:
    spec = pb.BrokerSpec(journal_limit=100)
    spec.process_spec.id.zone, spec.process_spec.id.suffix = "zone-0", "b"
    spec.process_spec.endpoint = endpoint
    key = allocator.member_key("/g/cluster", "zone-0", "b")
    return keyspace.KeyValue(key, spec.SerializeToString(), revision, revision, 1)


def lag_of(rig: Rig, body: dict[str, Any]) -> tuple[Any, Any]:
    st = rig.stored(body)["status"]
    return st.get("lag"), st.get("lagUnknown")


async def test_lag_rounds_say_why_a_shard_has_no_lag_and_settle() -> None:
    # Where a shard can't be asked, the round says why without an RPC; the e2e test
    # (e2e/test_operator_shard_lag.py) asks real primaries and brokers.
    rig = Rig()
    body = rig.add(applied_shard())
    header = pb.Header.Etcd(cluster_id=1, member_id=1, raft_term=1, revision=10)
    # Members of the application and brokers are followed along with the assignments.
    members, brokers = rig.mirror(APP + "/members"), rig.mirror("/g/cluster/members")
    assign = rig.mirror(APP + "/assign")
    assert await rig.ctl.check_lag() == 0  # Assignments not loaded yet: nothing said.

    assign.load_snapshot(header, [assignment(0, Code.PRIMARY, 9)])
    members.load_snapshot(header, [])
    brokers.load_snapshot(header, [])
    assert await rig.ctl.check_lag() == 1
    assert lag_of(rig, body) == (
        None,
        "no broker is registered in etcd (nowhere to read write heads)",
    )
    rig.ctl.observe(reconcile.SHARDS, "MODIFIED", rig.stored(body))
    assert await rig.ctl.check_lag() == 0  # Unchanged: not written again.

    # A broker, but the primary's member is not in etcd (only a value no consumer wrote).
    brokers.load_snapshot(header, [broker("http://127.0.0.1:1", 10)])
    garbage = member("zone-0", "c", "", 10)
    members.load_snapshot(header, [keyspace.KeyValue(garbage.key, b"\xff\xff", 10, 10, 1)])
    assert await rig.ctl.check_lag() == 1
    assert lag_of(rig, body) == (None, "primary zone-0/c has no endpoint in etcd")
    assert rig.stored(body)["status"]["lagCheckedAt"] == "2030-01-02T00:00:00Z"

    # No primary: NO_SHARD_PRIMARY, as a consumer would answer.
    rig.ctl.observe(reconcile.SHARDS, "MODIFIED", rig.stored(body))
    assign.load_snapshot(header, [assignment(0, Code.BACKFILL, 11)])
    members.load_snapshot(header, [member("zone-0", "c", "http://127.0.0.1:1", 11)])
    assert await rig.ctl.check_lag() == 1
    assert lag_of(rig, body) == (None, "NO_SHARD_PRIMARY")


async def test_lag_of_a_shard_whose_spec_is_not_its_own_is_unknown() -> None:
    rig = Rig()
    cond = {
        "type": "Applied",
        "status": "False",
        "reason": "InvalidSpec",
        "message": "bad",
        "lastTransitionTime": "2030-01-01T00:00:00Z",
    }
    body = rig.add(shard(status={"conditions": [cond]}))
    assert await rig.ctl.check_lag() == 1
    assert lag_of(rig, body) == (None, "the spec is not in etcd")


async def test_lag_checks_off_follow_no_members() -> None:
    rig = Rig(
        controller.ControllerConfig(
            reconcile=RECONCILE, settle_delay=0, lag=lag.LagConfig(interval=0)
        )
    )
    rig.add(applied_shard())
    assert rig.views.mirrors.get(APP + "/members") is None
    assert rig.views.mirrors.get("/g/cluster/members") is None
