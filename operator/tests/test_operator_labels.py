"""An object's Gazette labels: its metadata.labels (outside reserved domains) plus spec.labels."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from operator_objects import JOURNAL_SPEC, SHARD_SPEC, journal, shard

from gazette.broker import protocol as pb
from gazette.operator import errors, handlers, mapping, reconcile, testing

CONFIG = handlers.HandlerConfig(
    reconcile=reconcile.ReconcileConfig(broker_root="/g/cluster", consumers_root="/g/consumers")
)
NOW = datetime.datetime(2030, 1, 2, tzinfo=datetime.UTC)


def pairs(labels: pb.LabelSet) -> list[tuple[str, str]]:
    return [(lb.name, lb.value) for lb in labels.labels]


def test_metadata_labels_are_gazette_labels_and_reserved_domains_are_not() -> None:
    got = mapping.gazette_labels(
        {
            "topic": "logs",
            "example.com/team": "core",
            "gazette.dev/cluster": "default",
            "app.kubernetes.io/name": "gazette",
            "kwok.x-k8s.io/node": "fake",
        },
        [("content-type", "application/x-ndjson")],
    )
    assert pairs(got) == [
        ("content-type", "application/x-ndjson"),
        ("example.com/team", "core"),
        ("topic", "logs"),
    ]


def test_spec_labels_give_a_name_several_values() -> None:
    got = mapping.gazette_labels({"topic": "logs"}, [("topic", "audit"), ("topic", "logs")])
    assert pairs(got) == [("topic", "audit"), ("topic", "logs")]


def test_a_conflict_names_the_label() -> None:
    with pytest.raises(errors.InvalidSpecError) as info:
        mapping.gazette_labels({"topic": "logs"}, [("topic", "metrics")])
    assert info.value.field == "metadata.labels[topic]"
    assert "'logs'" in str(info.value) and "'metrics'" in str(info.value)


@pytest.mark.parametrize(
    ("labels", "meta", "needle"),
    [
        ({"x": "y"}, (), "not a Gazette label"),  # Gazette names are 2 to 64 long
        ({"name": "n"}, ("name", "prefix"), "meta-label"),
        ({"id": "n"}, ("id",), "meta-label"),
        ({"topic": 3}, (), "expected a string"),
    ],
)
def test_metadata_labels_that_are_no_gazette_labels_are_named(
    labels: dict[str, Any], meta: tuple[str, ...], needle: str
) -> None:
    with pytest.raises(errors.InvalidSpecError) as info:
        mapping.gazette_labels(labels, [], meta_labels=meta)
    (name,) = labels
    assert info.value.field == f"metadata.labels[{name}]"
    assert needle in str(info.value)


def test_journal_and_shard_specs_take_metadata_labels() -> None:
    spec = copy.deepcopy(JOURNAL_SPEC)
    spec["labels"] = [{"name": "content-type", "value": "application/x-ndjson"}]
    journal_spec = mapping.journal_spec(spec, {"topic": "logs", "gazette.dev/cluster": "a"})
    assert pairs(journal_spec.labels) == [
        ("content-type", "application/x-ndjson"),
        ("topic", "logs"),
    ]
    shard_spec = mapping.shard_spec(SHARD_SPEC, {"gazette.dev/consumer": "wc", "tier": "gold"})
    assert pairs(shard_spec.labels) == [("app", "word-count"), ("tier", "gold")]


async def test_reconcile_writes_metadata_labels_and_reports_a_conflict() -> None:
    store = testing.MemorySpecStore()
    body = journal(labels={"tier": "gold", "app.kubernetes.io/part-of": "x"})
    outcome = await reconcile.reconcile(body, reconcile.JOURNALS, CONFIG.reconcile, store)
    assert outcome.reason is reconcile.Reason.APPLIED
    written = pb.JournalSpec.FromString(store.values["/g/cluster/items/examples/logs/one"])
    assert ("tier", "gold") in pairs(written.labels)
    assert all(not name.startswith("app.kubernetes.io") for name, _ in pairs(written.labels))

    clash = journal(labels={"topic": "metrics"})  # spec.labels says topic=logs
    patch: dict[str, Any] = {}
    posted: list[Any] = []
    outcome = await handlers.on_apply(
        clash,
        patch,
        reconcile.JOURNALS,
        CONFIG,
        store,
        clock=lambda: NOW,
        post=lambda body, event: posted.append(event),
    )
    assert outcome.reason is reconcile.Reason.INVALID_SPEC
    (cond,) = patch["status"]["conditions"]
    assert cond["reason"] == "InvalidSpec"
    assert "metadata.labels[topic]" in cond["message"]
    assert [(e.type, e.reason) for e in posted] == [("Warning", "InvalidSpec")]


async def test_shard_labels_from_metadata() -> None:
    store = testing.MemorySpecStore()
    for source in SHARD_SPEC["sources"]:
        spec = pb.JournalSpec(name=source["journal"], replication=1)
        spec.labels.CopyFrom(pb.label_set([("content-type", "application/x-ndjson")]))
        store.put(f"/g/cluster/items/{source['journal']}", spec.SerializeToString())
    body = shard(labels={"gazette.dev/consumer": "word-count", "app": "other"})
    outcome = await reconcile.reconcile(body, reconcile.SHARDS, CONFIG.reconcile, store)
    assert outcome.reason is reconcile.Reason.INVALID_SPEC  # spec.labels says app=word-count
    assert "metadata.labels[app]" in outcome.message
