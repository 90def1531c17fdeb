"""A Shard's status from its replicas in etcd: pure computation (the controller applies it)."""

from __future__ import annotations

import datetime
from typing import Any

from operator_objects import SHARD_SPEC, shard

from gazette import allocator, keyspace
from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.operator import assignments, config, handlers, reconcile, status, testing

T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=1)
Code = pc.ReplicaStatus.Code
PREFIX = "/g/consumers/word-count"
SHARD_ID = SHARD_SPEC["name"]
CONFIG = handlers.HandlerConfig(
    reconcile=reconcile.ReconcileConfig(broker_root="/g/cluster", consumers_root="/g/consumers")
)


def applied(reason: str = "Applied", ok: bool = True, **kwargs: Any) -> dict[str, Any]:
    """A Shard body whose reconcile reported ``reason`` in its Applied condition."""
    cond = {
        "type": "Applied",
        "status": "True" if ok else "False",
        "reason": reason,
        "message": "m",
        "lastTransitionTime": "2029-12-31T00:00:00Z",
    }
    return shard(status={"conditions": [cond], "observedGeneration": 1}, **kwargs)


def primary(zone: str = "a", suffix: str = "c1") -> status.Replica:
    return status.Replica(zone, suffix, 0, Code.PRIMARY)


def standby(zone: str = "b", suffix: str = "c2", slot: int = 1) -> status.Replica:
    return status.Replica(zone, suffix, slot, Code.STANDBY)


def ready(new: dict[str, Any]) -> tuple[str, str]:
    cond = status.ready_condition(new)
    assert cond is not None
    return cond["status"], cond["reason"]


def with_status(body: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return body | {"status": {**body.get("status", {}), **new}}


def test_primary_and_standbys() -> None:
    body = applied()
    new = status.shard_status_for(
        body, [standby("c", "c3", 2), standby(), primary(), status.Replica("b", "c4", 3)], T0
    )
    assert new is not None
    assert new["primary"] == "a/c1"
    assert new["standbys"] == ["b/c2", "c/c3"]
    assert new["standbyCount"] == 2
    assert new["route"] == ["a/c1", "b/c2", "c/c3", "b/c4"]  # slot order
    assert new["replicaStatus"] == "PRIMARY"
    assert [(r["member"], r["slot"], r["status"]) for r in new["replicas"]] == [
        ("a/c1", 0, "PRIMARY"),
        ("b/c2", 1, "STANDBY"),
        ("c/c3", 2, "STANDBY"),
        ("b/c4", 3, "IDLE"),
    ]
    assert ready(new) == ("True", "Primary")
    cond = status.ready_condition(new)
    assert cond is not None
    assert cond["observedGeneration"] == 1
    assert cond["message"] == "primary a/c1, 2 ready standby(s)"
    # Ready comes first; the Applied condition (the reconcile handler's) stays as it was.
    assert [c["type"] for c in new["conditions"]] == ["Ready", "Applied"]
    assert new["conditions"][1] == body["status"]["conditions"][0]


def test_unchanged_status_is_not_written_again() -> None:
    body = applied()
    replicas = [primary(), standby()]
    first = status.shard_status_for(body, replicas, T0)
    assert first is not None
    assert status.shard_status_for(with_status(body, first), list(reversed(replicas)), T1) is None


def test_ready_flips_when_the_primary_goes_and_transition_time_moves_only_then() -> None:
    body = applied()
    first = status.shard_status_for(body, [primary(), standby()], T0)
    assert first is not None
    body = with_status(body, first)
    # The primary's assignment is deleted: the standby is not primary yet.
    second = status.shard_status_for(body, [standby()], T1)
    assert second is not None
    assert ready(second) == ("False", "NoPrimary")
    assert (second["primary"], second["standbys"], second["route"]) == ("", ["b/c2"], ["b/c2"])
    cond = status.ready_condition(second)
    assert cond is not None
    assert cond["lastTransitionTime"] == "2030-01-01T00:01:00Z"
    body = with_status(body, second)
    # The allocator promotes it to slot 0; it recovers (BACKFILL): still no primary, same time.
    third = status.shard_status_for(
        body, [status.Replica("b", "c2", 0, Code.BACKFILL)], T1 + datetime.timedelta(minutes=1)
    )
    assert third is not None
    assert ready(third) == ("False", "NoPrimary")
    assert "slot-0 replica b/c2 is BACKFILL" in third["conditions"][0]["message"]
    cond = status.ready_condition(third)
    assert cond is not None
    assert cond["lastTransitionTime"] == "2030-01-01T00:01:00Z"
    assert third["replicaStatus"] == "BACKFILL"


def test_failed_replica() -> None:
    failed = status.Replica("a", "c1", 0, Code.FAILED, ("store: disk full",))
    new = status.shard_status_for(applied(), [failed, standby()], T0)
    assert new is not None
    assert ready(new) == ("False", "Failed")
    assert new["replicaStatus"] == "FAILED"
    assert new["replicas"][0]["errors"] == ["store: disk full"]
    assert "errors" not in new["replicas"][1]
    cond = status.ready_condition(new)
    assert cond is not None
    assert cond["message"] == "replica a/c1 (slot 0) FAILED: store: disk full"
    # A failed standby does not make a serving shard unready.
    new = status.shard_status_for(
        applied(), [primary(), status.Replica("b", "c2", 1, Code.FAILED, ("x",))], T0
    )
    assert new is not None
    assert ready(new) == ("True", "Primary")
    assert new["replicaStatus"] == "FAILED"


def test_unassigned_and_disabled() -> None:
    new = status.shard_status_for(applied(), [], T0)
    assert new is not None
    assert ready(new) == ("False", "NoPrimary")
    assert (new["primary"], new["standbys"], new["standbyCount"], new["replicaStatus"]) == (
        "",
        [],
        0,
        "",
    )
    disabled = applied()
    disabled["spec"]["disable"] = True
    new = status.shard_status_for(disabled, [], T0)
    assert new is not None
    assert ready(new) == ("False", "Disabled")


def test_nothing_before_the_spec_was_reconciled() -> None:
    assert status.shard_status_for(shard(), [primary()], T0) is None


def test_an_object_whose_spec_is_not_in_etcd_shows_no_replicas() -> None:
    # Another object owns the name: the replicas under the key are that object's.
    body = applied("ResourceConflict", ok=False)
    new = status.shard_status_for(body, [primary()], T0)
    assert new is not None
    assert ready(new) == ("False", "ResourceConflict")
    assert (new["primary"], new["route"], new["replicas"]) == ("", [], [])
    # Paused: etcd keeps the spec, and the replicas are still this object's.
    new = status.shard_status_for(applied("Paused", ok=False), [primary()], T0)
    assert new is not None
    assert ready(new) == ("True", "Primary")


def test_reconcile_sets_applied_and_keeps_ready_in_place() -> None:
    body = applied()
    served = status.shard_status_for(body, [primary()], T0)
    assert served is not None
    body = with_status(body, served)
    outcome = reconcile.Outcome(reconcile.Reason.PAUSED, "paused")
    new = status.status_for(body, outcome, T1, kind=status.APPLIED)
    assert new is not None
    # In place: neither writer reorders the other's condition (each would undo the other).
    assert [(c["type"], c["status"]) for c in new["conditions"]] == [
        ("Ready", "True"),
        ("Applied", "False"),
    ]
    assert new["conditions"][0] == served["conditions"][0]


async def test_reconcile_of_a_shard_writes_the_applied_condition() -> None:
    store = testing.MemorySpecStore()
    for source in SHARD_SPEC["sources"]:
        journal = pb.JournalSpec(name=source["journal"], replication=1)
        journal.labels.CopyFrom(pb.label_set([("content-type", "application/x-ndjson")]))
        store.put(keyspace.item_key("/g/cluster", source["journal"]), journal.SerializeToString())
    patch: dict[str, Any] = {}
    await handlers.on_apply(shard(), patch, reconcile.SHARDS, CONFIG, store, clock=lambda: T0)
    assert [(c["type"], c["status"], c["reason"]) for c in patch["status"]["conditions"]] == [
        ("Applied", "True", "Applied")
    ]


def test_replicas_of_decoded_assignments() -> None:
    decode = allocator.key_value_decoder(PREFIX, assignments.AssignmentDecoder())
    failed = pc.ReplicaStatus(code=Code.FAILED, errors=["boom"])
    raw = [
        (allocator.Assignment(SHARD_ID, "a", "c1", 0), failed.SerializeToString()),
        (allocator.Assignment(SHARD_ID, "b", "c2", 1), b""),  # IDLE: as the allocator writes it
    ]
    kvs = [
        keyspace.KeyValue(
            key=allocator.assignment_key(PREFIX, a),
            value=value,
            create_revision=1,
            mod_revision=1,
            version=1,
            decoded=decode(allocator.assignment_key(PREFIX, a), value),
        )
        for a, value in raw
    ]
    assert assignments.replicas_of(kvs) == [
        status.Replica("a", "c1", 0, Code.FAILED, ("boom",)),
        status.Replica("b", "c2", 1, Code.IDLE),
    ]


def test_status_interval_flag() -> None:
    cfg = config.parse_args(["--namespace=ns", "--shard-status-interval=0.5"], environ={})
    assert cfg.handlers.status_interval == 0.5
    cfg = config.parse_args(["--namespace=ns"], environ={"SHARD_STATUS_INTERVAL": "3"})
    assert cfg.handlers.status_interval == 3.0
    assert config.parse_args(["--namespace=ns"], environ={}).handlers.status_interval == 2.0
