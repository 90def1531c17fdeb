"""The operator's handlers as plain functions, over an in-memory etcd (MemorySpecStore)."""

from __future__ import annotations

import datetime
from typing import Any

import kopf
import pytest
from operator_objects import JOURNAL_SPEC, SHARD_SPEC, journal, shard

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.operator import crd, handlers, mapping, reconcile, testing

CONFIG = handlers.HandlerConfig(
    reconcile=reconcile.ReconcileConfig(broker_root="/g/cluster", consumers_root="/g/consumers"),
    retry_delay=0.5,
)
JOURNAL_KEY = "/g/cluster/items/examples/logs/one"
SHARD_KEY = "/g/consumers/word-count/items/word-count/part-000"
NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def clock() -> datetime.datetime:
    return NOW


class Index(dict[str, list[reconcile.Claim]]):
    """kopf's index as the handlers read it: key -> claims of the objects naming it."""

    @classmethod
    def of(cls, kind: reconcile.SpecKind, *bodies: dict[str, Any]) -> Index:
        out = cls()
        for b in bodies:
            key = reconcile.claim_key(b, kind, CONFIG.reconcile)
            assert key is not None
            out.setdefault(key, []).append(reconcile.claim_of(b))
        return out


async def apply(
    body: dict[str, Any],
    store: testing.MemorySpecStore,
    kind: reconcile.SpecKind = reconcile.JOURNALS,
    index: Index | None = None,
) -> tuple[reconcile.Outcome, dict[str, Any]]:
    patch: dict[str, Any] = {}
    outcome = await handlers.on_apply(body, patch, kind, CONFIG, store, index, clock=clock)
    return outcome, patch


def ready(patch: dict[str, Any]) -> dict[str, Any]:
    (cond,) = patch["status"]["conditions"]
    return dict(cond)


async def test_create_writes_the_encoded_spec() -> None:
    store = testing.MemorySpecStore()
    outcome, patch = await apply(journal(), store)

    expected = mapping.journal_spec(JOURNAL_SPEC).SerializeToString()
    assert store.values == {JOURNAL_KEY: expected}
    assert outcome.reason is reconcile.Reason.APPLIED
    assert patch["status"]["modRevision"] == store.mod_revisions[JOURNAL_KEY]
    assert patch["status"]["observedGeneration"] == 1
    assert patch["status"]["etcdKey"] == JOURNAL_KEY
    assert ready(patch) == {
        "type": "Ready",
        "status": "True",
        "reason": "Applied",
        "message": "etcd holds the spec",
        "observedGeneration": 1,
        "lastTransitionTime": "2030-01-02T03:04:05Z",
    }


async def test_unchanged_object_patches_and_writes_nothing() -> None:
    store = testing.MemorySpecStore()
    _, patch = await apply(journal(), store)
    writes = store.writes
    outcome, again = await apply(journal(status=patch["status"]), store)
    assert outcome.reason is reconcile.Reason.APPLIED
    assert again == {}
    assert store.writes == writes


async def test_update_rewrites_with_the_read_revision_and_keeps_transition_time() -> None:
    store = testing.MemorySpecStore()
    _, patch = await apply(journal(), store)
    first_revision = patch["status"]["modRevision"]

    edited = {**JOURNAL_SPEC, "replication": 2}
    _, patch2 = await apply(journal(generation=2, status=patch["status"]) | {"spec": edited}, store)
    held = pb.JournalSpec.FromString(store.values[JOURNAL_KEY])
    assert held.replication == 2
    assert patch2["status"]["modRevision"] > first_revision
    assert patch2["status"]["observedGeneration"] == 2
    assert ready(patch2)["lastTransitionTime"] == "2030-01-02T03:04:05Z"


async def test_out_of_band_edit_is_restored_but_suspension_is_kept() -> None:
    store = testing.MemorySpecStore()
    _, patch = await apply(journal(), store)
    tampered = mapping.journal_spec(JOURNAL_SPEC)
    tampered.replication = 1
    tampered.suspend.level = pb.JournalSpec.Suspend.FULL
    tampered.suspend.offset = 4096
    store.put(JOURNAL_KEY, tampered.SerializeToString())

    outcome, _ = await apply(journal(status=patch["status"]), store)
    held = pb.JournalSpec.FromString(store.values[JOURNAL_KEY])
    assert outcome.reason is reconcile.Reason.APPLIED
    assert held.replication == 3
    # Brokers own `suspend`: the operator carries it through.
    assert held.suspend == pb.JournalSpec.Suspend(level=pb.JournalSpec.Suspend.FULL, offset=4096)


async def test_deleted_out_of_band_is_written_again() -> None:
    store = testing.MemorySpecStore()
    _, patch = await apply(journal(), store)
    del store.values[JOURNAL_KEY], store.mod_revisions[JOURNAL_KEY]
    await apply(journal(status=patch["status"]), store)
    assert JOURNAL_KEY in store.values


async def test_invalid_spec_is_reported_and_nothing_written() -> None:
    store = testing.MemorySpecStore()
    bad = {
        **JOURNAL_SPEC,
        "labels": [
            {"name": "content-type", "value": "text/csv"},
            {"name": "content-type", "value": "application/x-ndjson"},
        ],
    }
    outcome, patch = await apply(journal() | {"spec": bad}, store)
    assert store.values == {}
    assert outcome.reason is reconcile.Reason.INVALID_SPEC
    cond = ready(patch)
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert "content-type" in cond["message"]


async def test_schema_bypassing_spec_is_invalid() -> None:
    store = testing.MemorySpecStore()
    outcome, _ = await apply(journal() | {"spec": {**JOURNAL_SPEC, "replication": 9}}, store)
    assert outcome.reason is reconcile.Reason.INVALID_SPEC
    assert outcome.message == "invalid Replication (9; expected 1 <= Replication <= 5)"
    assert store.values == {}


async def test_paused_object_writes_nothing() -> None:
    store = testing.MemorySpecStore()
    outcome, patch = await apply(journal(annotations={crd.PAUSED_ANNOTATION: "true"}), store)
    assert store.values == {}
    assert ready(patch)["reason"] == "Paused"
    # Unpausing applies it.
    outcome, _ = await apply(journal(status=patch["status"]), store)
    assert outcome.reason is reconcile.Reason.APPLIED
    assert JOURNAL_KEY in store.values


async def test_older_object_wins_a_name() -> None:
    store = testing.MemorySpecStore()
    older = journal(name="first", namespace="b", uid="u1", created="2030-01-01T00:00:00Z")
    younger = journal(name="second", namespace="a", uid="u2", created="2030-01-01T00:00:01Z")
    younger["spec"]["replication"] = 1
    index = Index.of(reconcile.JOURNALS, older, younger)

    outcome, patch = await apply(younger, store, index=index)
    assert outcome.reason is reconcile.Reason.RESOURCE_CONFLICT
    assert "b/first" in ready(patch)["message"]
    assert store.values == {}

    outcome, _ = await apply(older, store, index=index)
    assert outcome.reason is reconcile.Reason.APPLIED
    assert pb.JournalSpec.FromString(store.values[JOURNAL_KEY]).replication == 3

    # The owner goes: the younger object takes over on its next pass.
    outcome, _ = await apply(younger, store, index=Index.of(reconcile.JOURNALS, younger))
    assert outcome.reason is reconcile.Reason.APPLIED
    assert pb.JournalSpec.FromString(store.values[JOURNAL_KEY]).replication == 1


async def test_same_second_ties_break_by_namespace_and_name() -> None:
    a = journal(name="x", namespace="a", uid="u2")
    b = journal(name="x", namespace="b", uid="u1")
    index = Index.of(reconcile.JOURNALS, a, b)
    store = testing.MemorySpecStore()
    assert (await apply(b, store, index=index))[0].reason is reconcile.Reason.RESOURCE_CONFLICT
    assert (await apply(a, store, index=index))[0].reason is reconcile.Reason.APPLIED


async def test_etcd_failure_reports_and_asks_kopf_to_retry() -> None:
    store = testing.MemorySpecStore()
    store.fail = True
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.TemporaryError) as info:
        await handlers.on_apply(journal(), patch, reconcile.JOURNALS, CONFIG, store, clock=clock)
    assert info.value.delay == 0.5
    assert ready(patch)["reason"] == "EtcdError"


class RacingStore(testing.MemorySpecStore):
    """Another writer slips a value in between each read and the following write."""

    def __init__(self, races: int) -> None:
        super().__init__()
        self.races = races

    async def get(self, root: str, name: str) -> reconcile.Stored | None:
        got = await super().get(root, name)
        if self.races > 0:
            self.races -= 1
            self.put(keyspace.item_key(root, name), b"")
        return got


async def test_checked_write_retries_a_raced_key() -> None:
    store = RacingStore(races=2)
    outcome, _ = await apply(journal(), store)
    assert outcome.reason is reconcile.Reason.APPLIED
    assert store.values[JOURNAL_KEY] == mapping.journal_spec(JOURNAL_SPEC).SerializeToString()


async def test_checked_write_gives_up_after_repeated_races() -> None:
    store = RacingStore(races=10)
    with pytest.raises(kopf.TemporaryError):
        await apply(journal(), store)


def put_sources(store: testing.MemorySpecStore, content_type: str = "application/x-ndjson") -> None:
    """The journals SHARD_SPEC reads, as the brokers' keyspace holds them."""
    for source in SHARD_SPEC["sources"]:
        spec = pb.JournalSpec(name=source["journal"], replication=1)
        spec.labels.CopyFrom(pb.label_set([("content-type", content_type)]))
        store.put(keyspace.item_key("/g/cluster", source["journal"]), spec.SerializeToString())


async def test_shard_goes_under_its_consumer_prefix() -> None:
    store = testing.MemorySpecStore()
    put_sources(store)
    outcome, _ = await apply(shard(), store, kind=reconcile.SHARDS)
    assert outcome.reason is reconcile.Reason.APPLIED
    held = pc.ShardSpec.FromString(store.values[SHARD_KEY])
    assert held == mapping.shard_spec(SHARD_SPEC)


async def test_shard_of_a_missing_journal_is_refused_until_it_exists() -> None:
    store = testing.MemorySpecStore()
    with pytest.raises(
        kopf.TemporaryError,
        match=r"spec.sources\[0\].journal: journal 'examples/words/part-000' does not exist",
    ):
        await apply(shard(), store, kind=reconcile.SHARDS)
    assert SHARD_KEY not in store.values
    put_sources(store)
    outcome, _ = await apply(shard(), store, kind=reconcile.SHARDS)
    assert outcome.reason is reconcile.Reason.APPLIED


async def test_shard_of_a_journal_without_a_message_framing_is_refused() -> None:
    store = testing.MemorySpecStore()
    put_sources(store, "application/octet-stream")
    with pytest.raises(kopf.TemporaryError, match="content-type 'application/octet-stream'"):
        await apply(shard(), store, kind=reconcile.SHARDS)
    assert SHARD_KEY not in store.values


async def test_shard_without_consumer_label_is_invalid() -> None:
    store = testing.MemorySpecStore()
    outcome, _ = await apply(shard(labels={}), store, kind=reconcile.SHARDS)
    assert outcome.reason is reconcile.Reason.INVALID_SPEC
    assert crd.CONSUMER_LABEL in outcome.message
    assert store.values == {}


async def test_invalid_shard_uses_consumer_validation() -> None:
    store = testing.MemorySpecStore()
    spec = {**SHARD_SPEC, "hintPrefix": "relative/hints"}
    outcome, _ = await apply(shard() | {"spec": spec}, store, kind=reconcile.SHARDS)
    assert outcome.reason is reconcile.Reason.INVALID_SPEC
    assert "HintPrefix" in outcome.message


async def test_delete_removes_the_owned_spec() -> None:
    store = testing.MemorySpecStore()
    body = journal()
    await apply(body, store)
    message = await handlers.on_delete(body, reconcile.JOURNALS, CONFIG, store)
    assert message.startswith(f"deleted {JOURNAL_KEY}")
    assert store.values == {}
    # Twice is fine.
    assert "not in etcd" in await handlers.on_delete(body, reconcile.JOURNALS, CONFIG, store)


async def test_delete_leaves_what_another_object_owns_or_a_paused_one_holds() -> None:
    store = testing.MemorySpecStore()
    older = journal(name="first", uid="u1", created="2030-01-01T00:00:00Z")
    younger = journal(name="second", uid="u2", created="2030-01-01T00:00:09Z")
    index = Index.of(reconcile.JOURNALS, older, younger)
    await apply(older, store, index=index)
    await handlers.on_delete(younger, reconcile.JOURNALS, CONFIG, store, index)
    paused = journal(name="first", uid="u1", annotations={crd.PAUSED_ANNOTATION: "true"})
    await handlers.on_delete(paused, reconcile.JOURNALS, CONFIG, store, index)
    assert JOURNAL_KEY in store.values


async def test_delete_retries_when_etcd_fails() -> None:
    store = testing.MemorySpecStore()
    await apply(journal(), store)
    store.fail = True
    with pytest.raises(kopf.TemporaryError):
        await handlers.on_delete(journal(), reconcile.JOURNALS, CONFIG, store)


async def test_spec_without_gos_empty_sub_messages_is_not_rewritten() -> None:
    # A spec written by an encoder that leaves empty sub-messages out (as Python's
    # does by default) equals the declared one: no write.
    store = testing.MemorySpecStore()
    spec = {**JOURNAL_SPEC, "labels": []}
    spec["fragment"] = {k: v for k, v in JOURNAL_SPEC["fragment"].items() if k != "retention"}
    sparse = mapping.journal_spec(spec)
    sparse.ClearField("labels")
    sparse.fragment.ClearField("retention")
    store.put(JOURNAL_KEY, sparse.SerializeToString())
    writes = store.writes
    outcome, _ = await apply(journal() | {"spec": spec}, store)
    assert outcome.reason is reconcile.Reason.APPLIED
    assert store.writes == writes


def test_go_presence_of_empty_sub_messages() -> None:
    shard_spec = mapping.shard_spec({"name": "a-shard", "maxTxnDuration": "1s"})
    # labels (10) and min_txn_duration (7) are encoded, empty, as Go encodes them.
    assert shard_spec.SerializeToString() == (
        b"\n\x07a-shard" + b"2\x02\x08\x01" + b":\x00" + b"R\x00"
    )


def test_registry_and_settings_build() -> None:
    registry = handlers.build_registry(CONFIG, testing.MemorySpecStore())
    assert isinstance(registry, kopf.OperatorRegistry)
    settings = handlers.operator_settings()
    assert settings.persistence.finalizer == crd.FINALIZER == "gazette.dev/delete-spec"
