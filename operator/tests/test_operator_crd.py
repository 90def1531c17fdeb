from __future__ import annotations

from pathlib import Path
from typing import Any

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
    assert list(columns)[:5] == ["Name", "Replication", "Codec", "Ready", "Age"]
    assert columns["Store"]["priority"] == 1


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
