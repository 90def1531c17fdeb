"""Events on transitions, the NoCluster condition, and a registry that puts no finalizer on Retain."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import kopf
import pytest
from operator_objects import journal, shard

from gazette.operator import crd, events, handlers, reconcile, status, testing

NOW = datetime.datetime(2030, 1, 2, tzinfo=datetime.UTC)
R = reconcile.Reason
CONFIG = handlers.HandlerConfig(
    reconcile=reconcile.ReconcileConfig(broker_root="/g/cluster", consumers_root="/g/consumers")
)


def with_condition(reason: str, message: str = "m", kind: str = "Ready") -> dict[str, Any]:
    cond = {
        "type": kind,
        "status": "True" if reason == "Applied" else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2030-01-01T00:00:00Z",
    }
    return journal(status={"conditions": [cond]})


@pytest.mark.parametrize(
    ("before", "outcome", "want"),
    [
        # Warnings on the way into a failure, once.
        (None, reconcile.Outcome(R.INVALID_SPEC, "bad"), ("Warning", "InvalidSpec", "bad")),
        ("Applied", reconcile.Outcome(R.INVALID_SPEC, "bad"), ("Warning", "InvalidSpec", "bad")),
        ("InvalidSpec", reconcile.Outcome(R.INVALID_SPEC, "m"), None),
        # ...again for another mistake.
        ("InvalidSpec", reconcile.Outcome(R.INVALID_SPEC, "other"), ("Warning", "InvalidSpec", "other")),
        ("Applied", reconcile.Outcome(R.RESOURCE_CONFLICT, "x first"), ("Warning", "ResourceConflict", "x first")),
        ("Applied", reconcile.Outcome(R.ETCD_ERROR, "down"), ("Warning", "EtcdError", "down")),
        # An outage is one Warning, whatever each retry's error says.
        ("EtcdError", reconcile.Outcome(R.ETCD_ERROR, "still down"), None),
        # Normal when applied: the first time, and on every new write.
        (None, reconcile.Outcome(R.APPLIED, "ok", key="/k", mod_revision=7), ("Normal", "Applied", "etcd holds the spec at /k (revision 7)")),
        ("EtcdError", reconcile.Outcome(R.APPLIED, "ok", key="/k", mod_revision=7, wrote=True), ("Normal", "Applied", "wrote /k at etcd revision 7")),
        ("Applied", reconcile.Outcome(R.APPLIED, "ok", key="/k", mod_revision=7), None),
        ("Applied", reconcile.Outcome(R.APPLIED, "ok", key="/k", mod_revision=8, wrote=True), ("Normal", "Applied", "wrote /k at etcd revision 8")),
        ("Applied", reconcile.Outcome(R.PAUSED, "paused"), ("Normal", "Paused", "paused")),
        ("Paused", reconcile.Outcome(R.PAUSED, "paused"), None),
    ],
)  # fmt: skip
def test_events_on_transitions(
    before: str | None, outcome: reconcile.Outcome, want: tuple[str, str, str] | None
) -> None:
    body = journal() if before is None else with_condition(before)
    got = events.for_outcome(body, outcome, status.READY)
    assert (None if got is None else (got.type, got.reason, got.message)) == want


def test_shards_transition_on_their_applied_condition() -> None:
    body = shard(
        status={"conditions": with_condition("Applied", kind="Applied")["status"]["conditions"]}
    )
    assert events.for_outcome(body, reconcile.Outcome(R.APPLIED, "ok"), status.APPLIED) is None


async def test_the_apply_handler_posts_the_events_of_its_transitions() -> None:
    store = testing.MemorySpecStore()
    posted: list[events.Event] = []
    patch: dict[str, Any] = {}

    async def apply(body: dict[str, Any]) -> None:
        patch.clear()
        await handlers.on_apply(
            body, patch, reconcile.JOURNALS, CONFIG, store, clock=lambda: NOW,
            post=lambda b, e: posted.append(e),
        )  # fmt: skip

    body = journal()
    await apply(body)
    body["status"] = patch["status"]
    await apply(body)  # resumed: nothing new
    assert [(e.type, e.reason) for e in posted] == [("Normal", "Applied")]
    store.fail = True
    with pytest.raises(kopf.TemporaryError):
        await apply(body)
    assert [(e.type, e.reason) for e in posted][-1] == ("Warning", "EtcdError")


@pytest.mark.parametrize("kind", [reconcile.JOURNALS, reconcile.SHARDS])
def test_an_object_without_the_cluster_label_is_told_so(kind: reconcile.SpecKind) -> None:
    body = journal() if kind is reconcile.JOURNALS else shard()
    del body["metadata"]["labels"][crd.CLUSTER_LABEL]
    patch: dict[str, Any] = {}
    posted: list[events.Event] = []
    handlers.on_event(
        None, body, patch, kind, CONFIG, clock=lambda: NOW, post=lambda b, e: posted.append(e)
    )
    got = {c["type"]: (c["status"], c["reason"]) for c in patch["status"]["conditions"]}
    want = {"Ready": ("False", "NoCluster")}
    if kind is reconcile.SHARDS:
        want["Applied"] = ("False", "NoCluster")
    assert got == want
    assert crd.CLUSTER_LABEL in patch["status"]["conditions"][0]["message"]
    assert [(e.type, e.reason) for e in posted] == [("Warning", "NoCluster")]
    # Told once: the next event of the object changes nothing.
    body["status"] = patch["status"]
    again: dict[str, Any] = {}
    handlers.on_event(
        "MODIFIED", body, again, kind, CONFIG, clock=lambda: NOW, post=lambda b, e: posted.append(e)
    )
    assert again == {}
    assert len(posted) == 1


def test_labelled_unmanaged_and_deleted_objects_are_not_told() -> None:
    labelled = journal()
    unmanaged = journal(annotations={crd.UNMANAGED_ANNOTATION: "true"})
    del unmanaged["metadata"]["labels"][crd.CLUSTER_LABEL]
    for event_type, body in ((None, labelled), (None, unmanaged), ("DELETED", journal(labels={}))):
        patch: dict[str, Any] = {}
        handlers.on_event(event_type, body, patch, reconcile.JOURNALS, CONFIG, clock=lambda: NOW)
        assert patch == {}


def test_no_timer_or_daemon_and_a_finalizer_only_for_the_delete_policy() -> None:
    registry = handlers.build_registry(CONFIG, testing.MemorySpecStore())
    # kopf puts a finalizer on every object that has a timer or a daemon: there are none.
    assert list(registry._spawning.get_all_handlers()) == []
    needing = [h for h in registry._changing.get_all_handlers() if h.requires_finalizer]
    assert sorted(str(h.id) for h in needing) == [
        "delete_journal/spec.deletionPolicy",
        "delete_shard/spec.deletionPolicy",
    ]
    for h in needing:
        assert (h.field, h.value) == (("spec", "deletionPolicy"), "Delete")
    watching = sorted(str(h.id) for h in registry._watching.get_all_handlers())
    assert watching == ["observe_journal", "observe_shard"]
    settings = handlers.operator_settings()
    assert settings.persistence.finalizer == crd.FINALIZER
    assert settings.posting.enabled


def test_quiet_observers_drop_only_their_success_lines() -> None:
    quiet = handlers.QuietObservers()

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, msg, (), None)

    assert not quiet.filter(record("Handler 'observe_journal' succeeded."))
    assert not quiet.filter(record("Handler 'observe_shard' succeeded."))
    assert quiet.filter(record("Handler 'apply_journal' succeeded."))


def test_pausing_and_unmanaging_are_changes_kopf_handles() -> None:
    # kopf compares objects without the annotations under its progress prefix: ours must
    # not be among them, or an unpaused object would stay Paused.
    settings = handlers.operator_settings()
    essence: Any = {
        "metadata": {
            "annotations": {
                crd.PAUSED_ANNOTATION: "true",
                crd.UNMANAGED_ANNOTATION: "true",
                f"{handlers.PROGRESS_PREFIX}/apply_journal": "{}",
            }
        }
    }
    kept = settings.persistence.progress_storage.clear(essence=essence)
    assert set(kept["metadata"]["annotations"]) == {
        crd.PAUSED_ANNOTATION,
        crd.UNMANAGED_ANNOTATION,
    }
