from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gazette.operator import crd, crds

REPO = Path(__file__).resolve().parents[2]


def version(doc: dict[str, Any]) -> dict[str, Any]:
    (v,) = doc["spec"]["versions"]
    return dict(v)


def test_committed_crds_are_fresh() -> None:
    assert crds.main([str(REPO / "crds"), "--check"]) == 0


def test_render_writes_then_checks(tmp_path: Path) -> None:
    assert crds.main([str(tmp_path), "--check"]) == 1
    assert crds.main([str(tmp_path)]) == 0
    assert crds.main([str(tmp_path), "--check"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "journals.gazette.dev.yaml",
        "shards.gazette.dev.yaml",
    ]


def test_names_and_columns() -> None:
    for doc, kind, short in (
        (crd.journal_crd(), "Journal", "gj"),
        (crd.shard_crd(), "Shard", "gs"),
    ):
        names = doc["spec"]["names"]
        assert (names["kind"], names["shortNames"], names["categories"]) == (
            kind,
            [short],
            ["gazette"],
        )
        assert doc["spec"]["scope"] == "Namespaced"
        assert version(doc)["subresources"] == {"status": {}}
        assert yaml.safe_load(crd.render()[f"{names['plural']}.gazette.dev.yaml"]) == doc
    columns = {c["name"]: c for c in version(crd.journal_crd())["additionalPrinterColumns"]}
    # kubectl prints the object's NAME itself: the journal name is JOURNAL, not a 2nd NAME.
    assert [n for n, c in columns.items() if not c.get("priority")] == [
        "Journal",
        "Cluster",
        "Replication",
        "Codec",
        "Ready",
        "Age",
    ]
    assert columns["Store"]["priority"] == 1
    assert columns["Cluster"]["jsonPath"] == ".metadata.labels.gazette\\.dev/cluster"
    assert columns["DeletionPolicy"] == {
        "name": "DeletionPolicy",
        "type": "string",
        "priority": 1,
        "description": "Retain (the default: no finalizer) or Delete (the spec leaves etcd).",
        "jsonPath": ".spec.deletionPolicy",
    }
    shard_columns = [c["name"] for c in version(crd.shard_crd())["additionalPrinterColumns"]]
    assert shard_columns[:3] == ["Shard", "Cluster", "Consumer"]
    assert "Name" not in shard_columns
    assert "DeletionPolicy" in shard_columns


def test_name_is_a_selectable_field() -> None:
    for doc in (crd.journal_crd(), crd.shard_crd()):
        assert version(doc)["selectableFields"] == [{"jsonPath": ".spec.name"}]


def test_conditions_require_reason_message_and_transition_time() -> None:
    for doc in (crd.journal_crd(), crd.shard_crd()):
        status = version(doc)["schema"]["openAPIV3Schema"]["properties"]["status"]
        item = status["properties"]["conditions"]["items"]
        assert item["required"] == ["type", "status", "reason", "message", "lastTransitionTime"]
        assert item["properties"]["reason"]["minLength"] == 1


def test_retain_is_the_documented_default() -> None:
    spec = version(crd.journal_crd())["schema"]["openAPIV3Schema"]["properties"]["spec"]
    policy = spec["properties"]["deletionPolicy"]
    assert policy["default"] == "Retain"
    assert "no finalizer" in policy["description"]


@pytest.mark.parametrize(
    ("label", "reserved"),
    [
        ("topic", False),
        ("example.com/team", False),
        ("app.gazette.dev/message-type", True),
        ("gazette.dev/cluster", True),
        ("kubernetes.io/metadata.name", True),
        ("app.kubernetes.io/name", True),
        ("kubectl.kubernetes.io/last-applied-configuration", True),
        ("k8s.io/x", True),
        ("node-role.k8s.io/control", True),
        ("kwok.x-k8s.io/node", True),
        ("notkubernetes.io/x", False),
        ("kubernetes.io.example.com/x", False),
    ],
)
def test_reserved_label_domains(label: str, reserved: bool) -> None:
    assert crd.is_reserved_label(label) is reserved


def test_schema_carries_gazette_limits() -> None:
    spec = version(crd.journal_crd())["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props = spec["properties"]
    assert (props["replication"]["minimum"], props["replication"]["maximum"]) == (1, 5)
    frag = props["fragment"]["properties"]
    assert (frag["length"]["minimum"], frag["length"]["maximum"]) == (1024, 1 << 34)
    assert props["name"]["maxLength"] == 512
    rules = [r["rule"] for r in props["name"]["x-kubernetes-validations"]]
    assert "self == oldSelf" in rules
    shard = version(crd.shard_crd())["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert any("minTxnDuration" in r["rule"] for r in shard["x-kubernetes-validations"])
