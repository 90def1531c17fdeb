"""The manifests of examples/k8s declare valid journals and shards, as the operator reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gazette.broker import protocol as pb
from gazette.operator import config, crd, health, reconcile

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


def test_the_operator_deployment_passes_flags_the_operator_takes() -> None:
    path = EXAMPLES / "operator" / "operator.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    (deployment,) = (d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2  # One leads, one stands by.
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    cfg = config.parse_args(container["args"], environ={"POD_NAMESPACE": "gazette"})
    assert (cfg.leader.enabled, cfg.leader.namespace) == (True, "gazette")
    port = health.parse_address(cfg.health.address)[1]
    assert container["ports"][0]["containerPort"] == port
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    (role,) = (d for d in docs if d["kind"] == "Role")
    leases = [r for r in role["rules"] if "leases" in r["resources"]]
    assert {v for r in leases for v in r["verbs"]} == {"get", "create", "update"}
    named = next(r for r in leases if "get" in r["verbs"])
    assert named["resourceNames"] == [cfg.leader.name] == ["gazette-operator-default"]


def test_each_shards_manifest_has_its_gazctl_twin() -> None:
    from gazette.gazctl import shardspace

    for example in ("word_count", "stream_sum"):
        folder = EXAMPLES.parent / example
        manifests = [
            d for d in yaml.safe_load_all((folder / "shards.yaml").read_text("utf-8")) if d
        ]
        declared = {}
        for doc in manifests:
            _, _, spec = reconcile.declared(doc, reconcile.SHARDS, CONFIG)
            declared[spec.id] = spec  # type: ignore[attr-defined]
        twin = shardspace.push_down(
            shardspace.load((folder / "shards.gazctl.yaml").read_text("utf-8"))
        )
        applied = {sh.spec.id: sh.spec for sh in twin.shards}
        assert applied == declared, example
