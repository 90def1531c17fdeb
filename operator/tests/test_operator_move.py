"""Objects that come to name another etcd key move their spec there: one key remains.

A Shard relabelled to another consumer, the operator's prefixes changed, an object
handed to another cluster: the new key is written, then the key ``status.etcdKey``
recorded is removed, unless it changed since or another object declares it.
"""

from __future__ import annotations

import datetime
from typing import Any

import kopf
from operator_objects import SHARD_SPEC, journal, shard

from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.operator import (
    assignments,
    controller,
    crd,
    events,
    handlers,
    mapping,
    reconcile,
    status,
    testing,
)

ROOTS = reconcile.ReconcileConfig(broker_root="/g/cluster", consumers_root="/g/consumers")
CONFIG = handlers.HandlerConfig(reconcile=ROOTS, retry_delay=0.5)
NOW = datetime.datetime(2030, 1, 2, tzinfo=datetime.UTC)
WC_KEY = "/g/consumers/word-count/items/word-count/part-000"
TOTALS_KEY = "/g/consumers/totals/items/word-count/part-000"
JOURNAL_KEY = "/g/cluster/items/examples/logs/one"


def put_sources(store: testing.MemorySpecStore) -> None:
    for source in SHARD_SPEC["sources"]:
        spec = pb.JournalSpec(name=source["journal"])
        spec.labels.labels.add(name="content-type", value="application/x-ndjson")
        store.put(f"/g/cluster/items/{source['journal']}", spec.SerializeToString())


class Index(dict[str, list[reconcile.Claim]]):
    """kopf's claims index, as the handlers read it."""

    def __init__(self, kind: reconcile.SpecKind, *bodies: dict[str, Any]) -> None:
        super().__init__()
        for b in bodies:
            key = reconcile.claim_key(b, kind, ROOTS)
            if key is not None:
                self.setdefault(key, []).append(reconcile.claim_of(b))


async def apply(
    body: dict[str, Any],
    store: testing.MemorySpecStore,
    kind: reconcile.SpecKind = reconcile.SHARDS,
    index: Index | None = None,
    config: handlers.HandlerConfig = CONFIG,
) -> tuple[reconcile.Outcome, dict[str, Any], list[events.Event]]:
    """The apply handler, then the object as the API server holds it after its patch."""
    patch: dict[str, Any] = {}
    posted: list[events.Event] = []
    try:
        outcome = await handlers.on_apply(
            body,
            patch,
            kind,
            config,
            store,
            index if index is not None else Index(kind, body),
            clock=lambda: NOW,
            post=lambda _, event: posted.append(event),
        )
    except kopf.TemporaryError as e:  # kopf retries it; the status is patched still.
        cond = patch["status"]["conditions"][0]
        outcome = reconcile.Outcome(reconcile.Reason(cond["reason"]), str(e), retry=True)
    new = {**body, "status": {**body.get("status", {}), **patch.get("status", {})}}
    new["status"] = {k: v for k, v in new["status"].items() if v is not None}
    return outcome, new, posted


def relabel(body: dict[str, Any], **labels: str) -> dict[str, Any]:
    out = {**body, "metadata": {**body["metadata"]}}
    out["metadata"]["labels"] = {**body["metadata"]["labels"], **labels}
    return out


async def test_relabelling_a_shard_moves_its_spec_and_leaves_one_key() -> None:
    store = testing.MemorySpecStore()
    put_sources(store)
    outcome, body, _ = await apply(shard(), store)
    assert outcome.ready and WC_KEY in store.values
    assert (body["status"]["etcdKey"], body["status"]["cluster"]) == (WC_KEY, "default")
    spec = store.values[WC_KEY]

    moved = relabel(body, **{crd.CONSUMER_LABEL: "totals"})
    outcome, after, posted = await apply(moved, store)
    assert outcome.ready
    assert outcome.moved is not None and outcome.moved.deleted
    shard_keys = sorted(k for k in store.values if "/g/consumers/" in k)
    assert shard_keys == [TOTALS_KEY]
    assert store.values[TOTALS_KEY] == spec
    assert after["status"]["etcdKey"] == TOTALS_KEY
    assert after["status"]["modRevision"] == store.mod_revisions[TOTALS_KEY]
    assert [(e.type, e.reason) for e in posted] == [("Normal", "Applied"), ("Normal", "Moved")]
    assert WC_KEY in posted[1].message and TOTALS_KEY in posted[1].message

    # Applied again, nothing moves nor is written.
    writes = store.writes
    outcome, _, posted = await apply(after, store)
    assert (outcome.moved, store.writes, posted) == (None, writes, [])


async def test_a_move_with_an_edit_of_the_spec_too() -> None:
    store = testing.MemorySpecStore()
    put_sources(store)
    _, body, _ = await apply(shard(), store)
    moved = relabel(body, **{crd.CONSUMER_LABEL: "totals"})
    moved["spec"] = {**moved["spec"], "hotStandbys": 2}
    outcome, _, _ = await apply(moved, store)
    assert outcome.moved is not None and outcome.moved.deleted
    assert sorted(k for k in store.values if "/g/consumers/" in k) == [TOTALS_KEY]


async def test_the_old_key_is_left_to_an_object_declaring_it() -> None:
    store = testing.MemorySpecStore()
    put_sources(store)
    _, owner, _ = await apply(shard(name="owner"), store)
    rival = shard(name="rival", uid="uid-2", created="2030-01-01T00:00:09Z")
    moved = relabel(owner, **{crd.CONSUMER_LABEL: "totals"})
    outcome, after, posted = await apply(moved, store, index=Index(reconcile.SHARDS, moved, rival))
    assert outcome.moved is not None and not outcome.moved.deleted
    assert "ns/rival" in outcome.moved.message
    assert WC_KEY in store.values and TOTALS_KEY in store.values
    assert after["status"]["etcdKey"] == TOTALS_KEY
    assert [e.reason for e in posted] == ["Applied"]  # Nothing orphaned: no warning.


async def test_an_old_key_changed_since_is_left_with_a_warning() -> None:
    store = testing.MemorySpecStore()
    put_sources(store)
    _, body, _ = await apply(shard(), store)
    edited = pc.ShardSpec.FromString(store.values[WC_KEY])
    edited.hot_standbys = 3
    store.put(WC_KEY, edited.SerializeToString())  # Someone edited it with etcdctl.
    outcome, after, posted = await apply(relabel(body, **{crd.CONSUMER_LABEL: "totals"}), store)
    assert outcome.ready and outcome.moved is not None and outcome.moved.warning
    assert WC_KEY in store.values and TOTALS_KEY in store.values
    assert after["status"]["etcdKey"] == TOTALS_KEY  # Told once, then forgotten.
    assert [(e.type, e.reason) for e in posted][-1] == ("Warning", "KeyLeftBehind")
    assert "changed in etcd" in posted[-1].message


async def test_a_move_waits_for_the_new_spec_to_be_writable() -> None:
    store = testing.MemorySpecStore()
    put_sources(store)
    _, body, _ = await apply(shard(), store)
    moved = relabel(body, **{crd.CONSUMER_LABEL: "totals"})
    moved["spec"] = {**moved["spec"], "sources": [{"journal": "no/such/journal"}]}
    outcome, after, _ = await apply(moved, store)
    assert outcome.reason is reconcile.Reason.INVALID_SPEC and outcome.retry
    assert WC_KEY in store.values and TOTALS_KEY not in store.values
    assert after["status"]["etcdKey"] == WC_KEY

    # And an etcd failure while removing the old key keeps it recorded, for the retry.
    moved["spec"] = body["spec"]
    store.fail = True
    outcome, after, _ = await apply(moved, store)
    assert outcome.reason is reconcile.Reason.ETCD_ERROR
    assert after["status"]["etcdKey"] == WC_KEY
    store.fail = False
    outcome, after, _ = await apply(after, store)
    assert outcome.ready and outcome.moved is not None and outcome.moved.deleted
    assert sorted(k for k in store.values if "/g/consumers/" in k) == [TOTALS_KEY]


async def test_moving_onto_another_objects_key_releases_the_old_one() -> None:
    store = testing.MemorySpecStore()
    put_sources(store)
    _, totals, _ = await apply(
        shard(name="totals", uid="uid-0", labels={crd.CONSUMER_LABEL: "totals"}), store
    )
    _, body, _ = await apply(shard(created="2030-01-01T00:00:09Z"), store)
    moved = relabel(body, **{crd.CONSUMER_LABEL: "totals"})
    outcome, after, _ = await apply(moved, store, index=Index(reconcile.SHARDS, totals, moved))
    assert outcome.reason is reconcile.Reason.RESOURCE_CONFLICT
    assert outcome.moved is not None and outcome.moved.deleted
    assert WC_KEY not in store.values
    # It holds no key now.
    assert "etcdKey" not in after["status"] and "modRevision" not in after["status"]


async def test_changing_the_operators_prefix_moves_every_spec() -> None:
    store = testing.MemorySpecStore()
    _, body, _ = await apply(journal(), store, reconcile.JOURNALS)
    moved_config = handlers.HandlerConfig(
        reconcile=reconcile.ReconcileConfig(broker_root="/h/cluster", consumers_root="/h/c")
    )
    outcome, after, _ = await apply(
        body, store, reconcile.JOURNALS, index=Index(reconcile.JOURNALS), config=moved_config
    )
    assert outcome.ready and outcome.moved is not None and outcome.moved.deleted
    assert list(store.values) == ["/h/cluster/items/examples/logs/one"]
    assert after["status"]["etcdKey"] == "/h/cluster/items/examples/logs/one"


async def test_a_journal_suspended_by_its_brokers_still_moves() -> None:
    store = testing.MemorySpecStore()
    _, body, _ = await apply(journal(), store, reconcile.JOURNALS)
    suspended = pb.JournalSpec.FromString(store.values[JOURNAL_KEY])
    suspended.suspend.level = pb.JournalSpec.Suspend.FULL
    store.put(JOURNAL_KEY, suspended.SerializeToString())  # A broker's write.
    moved_config = handlers.HandlerConfig(
        reconcile=reconcile.ReconcileConfig(broker_root="/h/cluster", consumers_root="/h/c")
    )
    outcome, _, _ = await apply(
        body, store, reconcile.JOURNALS, index=Index(reconcile.JOURNALS), config=moved_config
    )
    assert outcome.moved is not None and outcome.moved.deleted, outcome.moved
    assert list(store.values) == ["/h/cluster/items/examples/logs/one"]


async def test_no_move_of_keys_another_clusters_operator_wrote() -> None:
    store = testing.MemorySpecStore()
    _, body, _ = await apply(journal(), store, reconcile.JOURNALS)
    assert body["status"]["cluster"] == "default"
    # Handed to cluster "blue", whose operator has another prefix: the key it finds in
    # the status is the "default" operator's to remove, from that one's etcd.
    blue = relabel(body, **{crd.CLUSTER_LABEL: "blue"})
    blue_config = handlers.HandlerConfig(
        reconcile=reconcile.ReconcileConfig(broker_root="/blue/cluster"), cluster="blue"
    )
    outcome, after, _ = await apply(
        blue, store, reconcile.JOURNALS, index=Index(reconcile.JOURNALS), config=blue_config
    )
    assert outcome.ready and outcome.moved is None
    assert JOURNAL_KEY in store.values
    assert (after["status"]["etcdKey"], after["status"]["cluster"]) == (
        "/blue/cluster/items/examples/logs/one",
        "blue",
    )


async def test_paused_or_invalid_objects_move_nothing() -> None:
    store = testing.MemorySpecStore()
    put_sources(store)
    _, body, _ = await apply(shard(), store)
    paused = relabel(body, **{crd.CONSUMER_LABEL: "totals"})
    paused["metadata"]["annotations"] = {crd.PAUSED_ANNOTATION: "true"}
    outcome, after, _ = await apply(paused, store)
    assert outcome.reason is reconcile.Reason.PAUSED and WC_KEY in store.values
    assert after["status"]["etcdKey"] == WC_KEY
    invalid = relabel(body, **{crd.CONSUMER_LABEL: "totals"})
    invalid["spec"] = {**invalid["spec"], "maxTxnDuration": "0s"}
    outcome, after, _ = await apply(invalid, store)
    assert outcome.reason is reconcile.Reason.INVALID_SPEC and WC_KEY in store.values
    assert after["status"]["etcdKey"] == WC_KEY


async def test_deleting_a_moved_object_removes_its_old_key_too() -> None:
    store = testing.MemorySpecStore()
    put_sources(store)
    body = shard()
    body["spec"]["deletionPolicy"] = "Delete"
    _, body, _ = await apply(body, store)
    moved = relabel(body, **{crd.CONSUMER_LABEL: "totals"})
    # Deleted before the move was handled: both keys go.
    store.put(TOTALS_KEY, mapping.shard_spec(SHARD_SPEC).SerializeToString())
    message = await handlers.on_delete(moved, reconcile.SHARDS, CONFIG, store)
    assert "deleted" in message
    assert not any("/g/consumers/" in k for k in store.values)


def test_status_records_and_forgets_keys() -> None:
    applied = reconcile.Outcome(reconcile.Reason.APPLIED, "ok", "/k", 7)
    new = status.status_for(journal(), applied, NOW)
    assert new is not None
    assert (new["etcdKey"], new["modRevision"], new["cluster"]) == ("/k", 7, "default")
    body = journal(status=new)
    assert reconcile.recorded(body) == reconcile.Recorded("/k", 7, "default")
    conflict = reconcile.Outcome(
        reconcile.Reason.RESOURCE_CONFLICT,
        "taken",
        "/other",
        moved=reconcile.Move("/k", True, "removed"),
    )
    forgot = status.status_for(body, conflict, NOW)
    assert forgot is not None
    assert (forgot["etcdKey"], forgot["modRevision"], forgot["cluster"]) == (None, None, None)
    # A conflict without a move keeps what was recorded.
    kept = status.status_for(body, reconcile.Outcome(reconcile.Reason.RESOURCE_CONFLICT, "x"), NOW)
    assert kept is not None and kept["etcdKey"] == "/k"


# --- Handed to another cluster: the controller of the cluster it left ------------------


class Rig:
    def __init__(self) -> None:
        self.store = testing.MemorySpecStore()
        self.api = testing.MemoryKube()
        views = assignments.AssignmentViews(client=None)  # type: ignore[arg-type]
        config = controller.ControllerConfig(
            reconcile=ROOTS, cluster="default", retry_delay=0, status_interval=0, settle_delay=0
        )
        self.ctl = controller.Controller(config, self.store, self.api, views, clock=lambda: NOW)

    async def served(self, body: dict[str, Any]) -> dict[str, Any]:
        _, after, _ = await apply(body, self.store, reconcile.JOURNALS)
        stored = self.api.add(after)
        self.ctl.observe(reconcile.JOURNALS, None, stored)
        return stored


async def test_an_object_handed_to_another_cluster_leaves_this_clusters_etcd() -> None:
    rig = Rig()
    body = await rig.served(journal())
    assert JOURNAL_KEY in rig.store.values
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", relabel(body, **{crd.CLUSTER_LABEL: "blue"}))
    await rig.ctl.run_due()
    assert JOURNAL_KEY not in rig.store.values
    assert [(e.type, e.reason) for e in rig.api.events] == [("Normal", "Moved")]
    assert "cluster blue" in rig.api.events[0].message


async def test_unlabelled_unmanaged_or_claimed_objects_leave_etcd_alone() -> None:
    rig = Rig()
    body = await rig.served(journal())
    unlabelled = {**body, "metadata": {**body["metadata"], "labels": {}}}
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", unlabelled)
    await rig.ctl.run_due()
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", body)
    unmanaged = relabel(body, **{crd.CLUSTER_LABEL: "blue"})
    unmanaged["metadata"]["annotations"] = {crd.UNMANAGED_ANNOTATION: "true"}
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", unmanaged)
    await rig.ctl.run_due()
    assert JOURNAL_KEY in rig.store.values and rig.api.events == []

    # Another object here declares the key: it takes it over instead.
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", body)
    await rig.served(journal(name="rival", uid="uid-2", created="2030-01-01T00:00:09Z"))
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", relabel(body, **{crd.CLUSTER_LABEL: "blue"}))
    await rig.ctl.run_due()
    assert JOURNAL_KEY in rig.store.values
    assert all(e.reason != "Moved" for e in rig.api.events)


async def test_coming_back_before_the_release_keeps_the_key() -> None:
    rig = Rig()
    body = await rig.served(journal())
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", relabel(body, **{crd.CLUSTER_LABEL: "blue"}))
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", body)
    await rig.ctl.run_due()
    assert JOURNAL_KEY in rig.store.values and rig.api.events == []


async def test_a_failed_release_is_retried() -> None:
    rig = Rig()
    body = await rig.served(journal())
    rig.ctl.observe(reconcile.JOURNALS, "MODIFIED", relabel(body, **{crd.CLUSTER_LABEL: "blue"}))
    rig.store.fail = True
    await rig.ctl.run_due()
    assert rig.ctl.queues()["release"] == 1
    rig.store.fail = False
    await rig.ctl.run_due()
    assert JOURNAL_KEY not in rig.store.values
