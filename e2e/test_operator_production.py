"""The operator as a Kubernetes engineer would check it, on a real kube-apiserver.

* ``examples/k8s/`` applies as is; ``kubectl get journals -l topic=logs`` lists exactly
  its journals labelled so (metadata labels are the Gazette labels, written to etcd),
  and ``--field-selector spec.name=...`` finds one by its journal name.
* Only ``deletionPolicy: Delete`` objects hold a finalizer: with the operator stopped,
  deleting Retain Journals, and their namespace, completes (the namespace controller
  of a real kube-controller-manager empties it).
* Bad specs, conflicts and objects without the cluster label are told in conditions and
  Warning Events; an applied spec in a Normal one.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from apiserver import kubeapi

from gazette.broker import protocol as pb
from gazette.keyspace import testing as etcd_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

EXAMPLES = kubeapi.REPO / "examples" / "k8s"
CLUSTER = {"gazette.dev/cluster": "e2e"}


def journal(obj: str, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gazette.dev/v1alpha1",
        "kind": "Journal",
        "metadata": {"name": obj, "labels": {**CLUSTER, **(labels or {})}},
        "spec": {
            "name": name,
            "replication": 1,
            "labels": [{"name": "content-type", "value": "application/x-ndjson"}],
            "fragment": {
                "length": 1 << 20,
                "compressionCodec": "GZIP",
                "stores": ["file:///"],
                "refreshInterval": "1m",
            },
        },
    }


def manifest(*objects: dict[str, Any]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


get = kubeapi.get_json
condition = kubeapi.condition
wait_conditions = kubeapi.wait_conditions


@pytest.fixture(scope="module")
def controller_manager(
    kube: kubeapi.KubeAPIServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """kube-controller-manager's namespace and garbage collectors, which empty a namespace."""
    binary = kube.bins / "kube-controller-manager"
    if not binary.exists():
        pytest.skip(f"{binary} is not built (make apiserver)")
    log = tmp_path_factory.mktemp("controller-manager") / "controller-manager.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *etcd_testing.die_with_parent_argv(),
                str(binary),
                f"--kubeconfig={kube.kubeconfig}",
                "--controllers=namespace-controller,garbage-collector-controller",
                "--leader-elect=false",
                "--secure-port=0",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def example_objects(kind: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        out.extend(
            d
            for d in yaml.safe_load_all(path.read_text(encoding="utf-8"))
            if d and d["kind"] == kind
        )
    return out


async def test_examples_apply_and_select_by_label_and_by_name(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    etcd_client: Any,
    etcd_roots: tuple[str, str],
) -> None:
    start_operator(namespace, cluster="default")
    out = await kube.kubectl_async("apply", "-n", namespace, "-f", str(EXAMPLES))
    journals = example_objects("Journal")
    shards = example_objects("Shard")
    assert out.stdout.count("created") == len(journals) + len(shards), out.stdout

    # The headline command lists exactly the manifests labelled topic=logs.
    logs = sorted(
        j["metadata"]["name"] for j in journals if j["metadata"]["labels"].get("topic") == "logs"
    )
    assert len(logs) >= 2
    listed = await kube.kubectl_async(
        "get", "journals", "-n", namespace, "-l", "topic=logs", "-o", "name"
    )
    assert sorted(listed.stdout.split()) == [f"journal.gazette.dev/{n}" for n in logs]
    # A journal by its name, through the CRD's selectable field.
    (web,) = (j for j in journals if j["spec"]["name"] == "examples/logs/web")
    found = await kube.kubectl_async(
        "get", "journals", "-n", namespace, "--field-selector", "spec.name=examples/logs/web",
        "-o", "name",
    )  # fmt: skip
    assert found.stdout.split() == [f"journal.gazette.dev/{web['metadata']['name']}"]
    shard_names = await kube.kubectl_async(
        "get", "shards", "-n", namespace, "--field-selector", "spec.name=log-counter/web",
        "-o", "name",
    )  # fmt: skip
    assert shard_names.stdout.split() == ["shard.gazette.dev/log-counter-web"]

    applied = ("True", "Applied")
    got = await wait_conditions(
        kube, namespace, "journals", {j["metadata"]["name"]: applied for j in journals}
    )
    await wait_conditions(
        kube, namespace, "shards", {s["metadata"]["name"]: applied for s in shards}, "Applied"
    )
    # In etcd, the metadata label is a Gazette label, beside spec.labels' content-type.
    kv = await etcd_client.get(f"{etcd_roots[0]}/items/examples/logs/web".encode())
    spec = pb.JournalSpec.FromString(bytes(kv.value))
    assert [(lb.name, lb.value) for lb in spec.labels.labels] == [
        ("content-type", "application/x-ndjson"),
        ("topic", "logs"),
    ]
    # ...and so are spec.labels' several values of one name.
    kv = await etcd_client.get(f"{etcd_roots[0]}/items/examples/scratch".encode())
    scratch = pb.JournalSpec.FromString(bytes(kv.value))
    assert pb.values_of(scratch.labels, "owner") == ["alice", "bob"]

    # Only the Delete policy holds a finalizer; -o wide shows the policy.
    for name, obj in got.items():
        policy = obj["spec"]["deletionPolicy"]
        finalizers = obj["metadata"].get("finalizers", [])
        assert finalizers == (["gazette.dev/delete-spec"] if policy == "Delete" else []), name
    wide = await kube.kubectl_async("get", "journals", "-n", namespace, "-o", "wide")
    header, *rows = wide.stdout.strip().splitlines()
    assert header.split()[:3] == ["NAME", "JOURNAL", "CLUSTER"]
    assert header.split()[-1] == "DELETIONPOLICY"
    assert sorted(r.split()[-1] for r in rows).count("Retain") == len(journals) - 1


async def test_with_the_operator_stopped_deleting_journals_and_namespaces_completes(
    kube: kubeapi.KubeAPIServer,
    controller_manager: None,
    start_operator: Callable[..., Any],
    etcd_client: Any,
    etcd_roots: tuple[str, str],
) -> None:
    run = secrets.token_hex(4)
    first, second = f"e2e-{run}-a", f"e2e-{run}-b"
    for ns in (first, second):
        await kube.kubectl_async("create", "namespace", ns)
    op = start_operator(first, second)
    for ns in (first, second):
        docs = [journal(f"j{i}", f"{ns}/j{i}", {"topic": "logs"}) for i in range(3)]
        await kube.kubectl_async("apply", "-n", ns, "-f", "-", input=manifest(*docs))
    for ns in (first, second):
        got = await wait_conditions(
            kube, ns, "journals", {f"j{i}": ("True", "Applied") for i in range(3)}
        )
        assert all(not o["metadata"].get("finalizers") for o in got.values())
    op.stop()

    # Nothing waits for the operator: the objects go, their specs stay (Retain).
    out = await kube.kubectl_async(
        "delete", "journals", "--all", "-n", first, "--timeout=30s", limit=45
    )
    assert out.stdout.count("deleted") == 3, out.stdout
    left = await kube.kubectl_async("get", "journals", "-n", first, "-o", "name")
    assert left.stdout.split() == []
    await kube.kubectl_async("delete", "namespace", second, "--timeout=90s", limit=120)
    gone = await kube.kubectl_async("get", "namespace", second, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    for ns in (first, second):
        kv = await etcd_client.get(f"{etcd_roots[0]}/items/{ns}/j0".encode())
        assert kv is not None


async def events_of(kube: kubeapi.KubeAPIServer, ns: str) -> list[tuple[str, str, str, str]]:
    items = (await get(kube, "events", "-n", ns))["items"]
    return [
        (e["involvedObject"]["name"], e["type"], e["reason"], e.get("message", "")) for e in items
    ]


async def test_events_and_conditions_tell_what_went_wrong(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    etcd_client: Any,
    etcd_roots: tuple[str, str],
) -> None:
    start_operator(namespace)
    good = journal("good", "events/good", {"topic": "logs"})
    two_types = journal("two-types", "events/two-types")
    two_types["spec"]["labels"].append({"name": "content-type", "value": "text/csv"})
    clash = journal("clash", "events/clash", {"topic": "logs"})
    clash["spec"]["labels"].append({"name": "topic", "value": "metrics"})
    unlabelled = journal("unlabelled", "events/unlabelled")
    del unlabelled["metadata"]["labels"]["gazette.dev/cluster"]
    await kube.kubectl_async(
        "apply", "-n", namespace, "-f", "-", input=manifest(good, two_types, clash, unlabelled)
    )
    got = await wait_conditions(
        kube,
        namespace,
        "journals",
        {
            "good": ("True", "Applied"),
            "two-types": ("False", "InvalidSpec"),
            "clash": ("False", "InvalidSpec"),
            "unlabelled": ("False", "NoCluster"),
        },
    )
    assert "metadata.labels[topic]" in condition(got["clash"])[2]
    # A younger object naming the same journal.
    rival = journal("rival", "events/good")
    await kube.kubectl_async("apply", "-n", namespace, "-f", "-", input=manifest(rival))
    await wait_conditions(kube, namespace, "journals", {"rival": ("False", "ResourceConflict")})

    want = {
        ("good", "Normal", "Applied"),
        ("two-types", "Warning", "InvalidSpec"),
        ("clash", "Warning", "InvalidSpec"),
        ("unlabelled", "Warning", "NoCluster"),
        ("rival", "Warning", "ResourceConflict"),
    }
    seen: list[tuple[str, str, str, str]] = []

    async def posted() -> bool:
        seen[:] = await events_of(kube, namespace)
        return want <= {e[:3] for e in seen}

    await kubeapi.eventually(posted, within=30, what=f"events {want}")
    (clash_event,) = (e for e in seen if e[0] == "clash")
    assert "metadata.labels[topic]" in clash_event[3]
    # One event per transition, not per pass.
    assert sum(1 for e in seen if e[0] == "two-types") == 1
    # Nothing of the bad ones reached etcd.
    for name in ("two-types", "clash", "unlabelled"):
        assert await etcd_client.get(f"{etcd_roots[0]}/items/events/{name}".encode()) is None

    # Labelled at last, the object is served.
    await kube.kubectl_async(
        "label", "journal", "unlabelled", "-n", namespace, "gazette.dev/cluster=e2e"
    )
    await wait_conditions(kube, namespace, "journals", {"unlabelled": ("True", "Applied")})
