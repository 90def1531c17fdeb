"""The manifests of examples/k8s declare valid journals and shards, as the operator reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gazette.broker import protocol as pb
from gazette.operator import crd, reconcile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "k8s"
CONFIG = reconcile.ReconcileConfig()


def documents() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    return out


def test_examples_declare_valid_specs_with_their_metadata_labels() -> None:
    docs = documents()
    kinds = {"Journal": reconcile.JOURNALS, "Shard": reconcile.SHARDS}
    assert {d["kind"] for d in docs} == set(kinds)
    for doc in docs:
        assert doc["apiVersion"] == f"{crd.GROUP}/{crd.VERSION}"
        assert doc["metadata"]["labels"][crd.CLUSTER_LABEL] == "default"
        _, name, spec = reconcile.declared(doc, kinds[doc["kind"]], CONFIG)
        assert name == doc["spec"]["name"]
        gazette = {(lb.name, lb.value) for lb in spec.labels.labels}  # type: ignore[attr-defined]
        for label, value in doc["metadata"]["labels"].items():
            assert ((label, value) in gazette) != crd.is_reserved_label(label), (name, label)
    logs = [d for d in docs if d["metadata"]["labels"].get("topic") == "logs"]
    assert len(logs) == 3
    scratch = next(d for d in docs if d["spec"]["name"] == "examples/scratch")
    _, _, spec = reconcile.declared(scratch, reconcile.JOURNALS, CONFIG)
    assert pb.values_of(spec.labels, "owner") == ["alice", "bob"]  # type: ignore[attr-defined]
