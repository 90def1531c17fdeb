"""Tier 3 (``make e2e-node``): the chart on a real node of this machine, pods running.

Needs root, Debian's containerd and containernetworking-plugins, podman, and the images
of ``make images``; ``GAZETTE_NODE=1`` (set by ``make e2e-node``) runs it, elsewhere it
is skipped, and ``make test`` deselects it (marker ``e2e``). See ``e2e/node/cluster.py``
for the node and what it puts back when it stops.

One module-scoped node with the release installed, then, in order:

1. ``helm install charts/gazette`` (images from ``localhost``, pullPolicy Never, stand-ins
   for the bundled etcd and the trial S3 server): every pod Ready; each pod's time from
   creation to Ready is printed;
2. the example journals of ``examples/k8s/chart`` applied with kubectl, Ready through
   the operator and listed by the brokers;
3. an append and a read through the brokers' Service, from a gazctl pod;
4. ``helm test --logs``: gazctl's round trip, and its log;
5. the primary broker pod of a journal deleted under a steady append load: every
   acknowledged byte is read back (0 lost), and the brokers are 3 Ready again;
6. the brokers rolled by ``helm upgrade`` under the same load: 0 lost;
7. the release's namespace deleted: it goes away whole (Journals' finalizers released).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import helm
import kind
import pytest
import yaml
from apiserver import kubeapi
from node import cluster as node_cluster
from node import images as node_images

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600, func_only=True)]

REQUIRED_ENV = "GAZETTE_NODE"
VALUES = pathlib.Path(__file__).resolve().parent / "node" / "values.yaml"
NAMESPACE = "gazette"
RELEASE = "gazette"
CHART_EXAMPLE = kubeapi.REPO / "examples" / "k8s" / "chart" / "journals.yaml"
LOAD_JOURNAL = "examples/logs/web"
TOOLBOX = "gazette-e2e-toolbox"
ETCD_PVS = 3


class Release:
    """kubectl and helm against the node's apiserver, with the release's namespace."""

    def __init__(self, node: node_cluster.NodeCluster, helm_bin: pathlib.Path) -> None:
        self.node = node
        self.helm_bin = helm_bin
        self.home = node.work_dir / "helm"

    def run(
        self, argv: list[str], *, timeout: float = 300, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.node.api.kubeconfig),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        proc = subprocess.run(
            argv, env=env, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv[:4])} ... exited {proc.returncode}:\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    def kubectl(
        self, *args: str, timeout: float = 300, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run(
            [str(self.node.bins / "kubectl"), *args], timeout=timeout, input=input, check=check
        )

    def helm(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.helm_bin), *args], timeout=timeout)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def until(self, what: str, check: Any, within: float = 300) -> Any:
        deadline = time.monotonic() + within
        while True:
            self.node.check_alive()
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {within}s waiting for {what}")
            time.sleep(1)

    def gazctl(self, *args: str, input: str | None = None) -> str:
        return self.kubectl(
            "exec", "-i" if input is not None else "-q", "-n", NAMESPACE, TOOLBOX, "--",
            "gazctl", "journals", *args, input=input,
        ).stdout  # fmt: skip


def _local(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod of e2e/kind's, with its image named as containerd holds it (localhost/...)."""
    for container in pod["spec"]["containers"]:
        container["image"] = f"localhost/{container['image']}"
    return pod


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions", [])
    )


def _client_of(rel: Release, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` (one container) signed in as the chart's clients are: the environment,
    mounts and volumes of the release's own test pod (its token, or TLS files), beside
    the pod's own."""
    hooks = rel.run([str(rel.helm_bin), "get", "hooks", RELEASE, "--namespace", NAMESPACE])
    (test_pod,) = [
        o for o in yaml.safe_load_all(hooks.stdout)
        if o and o["kind"] == "Pod" and o["metadata"]["name"].endswith("-test-roundtrip")
    ]  # fmt: skip
    (source,) = test_pod["spec"]["containers"]
    (container,) = pod["spec"]["containers"]
    names = {e["name"] for e in container.get("env", [])}
    container.setdefault("env", []).extend(
        e for e in source.get("env", []) if e["name"] not in names and e["name"] != "STORE"
    )
    mounts = {m["name"] for m in container.get("volumeMounts", [])}
    container.setdefault("volumeMounts", []).extend(
        m for m in source.get("volumeMounts", []) if m["name"] not in mounts
    )
    pod["spec"].setdefault("volumes", []).extend(
        v for v in test_pod["spec"].get("volumes", []) if v["name"] not in mounts
    )
    return pod


def _ready_seconds(pod: dict[str, Any]) -> float:
    """From the pod's creation to its Ready condition, by the API's timestamps."""

    def parse(stamp: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    created = parse(pod["metadata"]["creationTimestamp"])
    for cond in pod["status"]["conditions"]:
        if cond["type"] == "Ready":
            return (parse(cond["lastTransitionTime"]) - created).total_seconds()
    return float("nan")


def _etcd_volumes(tmp: pathlib.Path) -> dict[str, Any]:
    """hostPath PersistentVolumes for the bundled etcd's claims, owned by the pods' UID."""
    items = []
    for i in range(ETCD_PVS):
        path = tmp / "volumes" / f"etcd-{i}"  # fresh: a new release has new etcd passwords
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 65532, 65532)
        items.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"gazette-e2e-etcd-{i}"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "hostPath": {"path": str(path), "type": "Directory"},
                },
            }
        )
    return {"apiVersion": "v1", "kind": "List", "items": items}


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    if not os.environ.get(REQUIRED_ENV):
        pytest.skip(
            f"the real-node tier runs under `make e2e-node` ({REQUIRED_ENV}=1): it needs root"
        )
    try:
        made = node_images.made_images()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    refs = {name: m["ref"] for name, m in made.items() if name in ("broker", "operator", "gazctl")}
    stale = node_images.stale_images(sorted(refs))
    if stale:
        print(
            f"\nnote: {', '.join(stale)} built from other inputs than this checkout (make images)"
        )
    work = tmp_path_factory.mktemp("node")
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(node_cluster.NodeCluster(work, image_refs=refs))
        started = time.monotonic() - t0
        rel = Release(node, helm.binary())
        print(f"\nnode up in {started:.1f}s:")
        for what, took in node.timings.items():
            print(f"  {what}: {took:.1f}s")
        rel.kubectl("apply", "-f", "-", input=json.dumps(_etcd_volumes(work)))
        etcd_repo, etcd_tag = node.standins["etcd"].rsplit(":", 1)
        s3_repo, s3_tag = node.standins["s3"].rsplit(":", 1)
        t1 = time.monotonic()
        try:
            rel.helm(
                "install", RELEASE, str(helm.CHART), "--namespace", NAMESPACE, "--create-namespace",
                "-f", str(VALUES),
                "--set", f"etcd.bundled.image.repository={etcd_repo}",
                "--set", f"etcd.bundled.image.tag={etcd_tag}",
                "--set", f"storage.trialServer.image.repository={s3_repo}",
                "--set", f"storage.trialServer.image.tag={s3_tag}",
                "--timeout", "10m",
            )  # fmt: skip
        except BaseException:
            print(rel.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout)
            print(rel.kubectl("get", "events", "-A", check=False).stdout[-4000:])
            raise
        rel.install_seconds = time.monotonic() - t1  # type: ignore[attr-defined]
        rel.kubectl(
            "apply",
            "-n",
            NAMESPACE,
            "-f",
            "-",
            input=json.dumps(_client_of(rel, _local(kind.toolbox_pod(TOOLBOX)))),
        )
        yield rel
        # Uninstall while the node runs, so its pods stop as they would on any node.
        if not getattr(rel, "deleted", False):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                rel.helm(
                    "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "3m"
                )
        print(f"\nnode down: {node.dns.queries} DNS queries answered")


def test_every_pod_ready(release: Release) -> None:
    def pods() -> list[dict[str, Any]] | None:
        items = release.get_json("pods", "-n", NAMESPACE)["items"]
        running = [p for p in items if p["status"].get("phase") != "Succeeded"]
        return running if running and all(map(_ready, running)) else None

    ready = release.until("every pod Ready", pods, within=300)
    took = release.install_seconds  # type: ignore[attr-defined]
    print(f"\nhelm install {took:.1f}s; pods Ready (creation -> Ready):")
    for pod in sorted(ready, key=lambda p: p["metadata"]["name"]):
        print(f"  {pod['metadata']['name']}: {_ready_seconds(pod):.0f}s")
    components = [p["metadata"]["labels"].get("app.kubernetes.io/component") for p in ready]
    assert components.count("broker") == 3
    assert components.count("etcd") == 3
    assert "operator" in components and "s3" in components
    for pod in ready:
        assert pod["spec"]["nodeName"] == node_cluster.NODE


def test_journals_through_the_operator(release: Release) -> None:
    release.kubectl("apply", "-n", NAMESPACE, "-f", str(CHART_EXAMPLE))

    def ready() -> bool:
        items = release.get_json("journals", "-n", NAMESPACE, "-l", "topic=logs")["items"]
        return len(items) == 3 and all(kubeapi.condition(j, "Ready")[0] == "True" for j in items)

    t0 = time.monotonic()
    release.until("the log journals Ready", ready, within=180)
    print(f"\nexample journals Ready in {time.monotonic() - t0:.1f}s")
    print(release.kubectl("get", "journals", "-n", NAMESPACE, "-l", "topic=logs").stdout)
    listed = json.loads(release.gazctl("list", "-l", "topic=logs", "-o", "json"))
    assert sorted(j["spec"]["name"] for j in listed["journals"]) == [
        "examples/logs/api",
        "examples/logs/web",
        "examples/logs/worker",
    ]


def test_append_and_read_through_the_brokers(release: Release) -> None:
    release.until(
        "the toolbox pod Ready",
        lambda: _ready(release.get_json("pod", TOOLBOX, "-n", NAMESPACE)),
        within=120,
    )
    line = json.dumps({"from": "the e2e node", "at": time.time()}) + "\n"
    release.gazctl("append", "-l", "name=examples/logs/api", input=line)
    read = release.gazctl("read", "-l", "name=examples/logs/api")
    assert line in read, read


def test_helm_test_round_trip(release: Release) -> None:
    # --logs: the test pod is kept after it succeeds, so its log can be shown (it was
    # deleted on success, and `helm test --logs` failed to find it).
    out = release.helm("test", RELEASE, "--namespace", NAMESPACE, "--logs", timeout=300).stdout
    assert "Succeeded" in out, out
    assert "round trip ok" in out, out


def test_broker_pod_deletion_under_load_loses_nothing_acknowledged(release: Release) -> None:
    name = "gazette-e2e-load"
    release.kubectl(
        "apply", "-n", NAMESPACE, "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List",
                          "items": [kind.load_config_map(name), _client_of(release, _local(kind.load_pod(name, LOAD_JOURNAL, 60)))]}),
    )  # fmt: skip
    release.kubectl(
        "wait", "-n", NAMESPACE, "--for=condition=Ready", f"pod/{name}", "--timeout=120s"
    )
    time.sleep(15)  # some load first
    listed = json.loads(release.gazctl("list", "-l", f"name={LOAD_JOURNAL}", "-o", "json"))
    route = listed["journals"][0]["route"]
    primary = route["members"][route.get("primary", 0)]["suffix"]
    started = time.monotonic()
    release.kubectl("delete", "pod", "-n", NAMESPACE, primary, "--wait=true", timeout=300)
    print(f"\ndeleted the primary {primary} in {time.monotonic() - started:.1f}s, under load")

    def done() -> bool:
        phase = release.get_json("pod", name, "-n", NAMESPACE)["status"].get("phase")
        return phase in ("Succeeded", "Failed")

    release.until("the load pod to finish", done, within=600)
    logs = release.kubectl("logs", "-n", NAMESPACE, name).stdout
    summary = json.loads(logs.strip().splitlines()[-1])
    print(f"load summary: {summary}")
    assert summary["read_ok"], logs[-3000:]
    assert summary["acked"] > 0
    assert summary["missing"] == 0, summary
    assert summary["read_bytes"] >= summary["acked_bytes"]

    def brokers_ready() -> bool:
        selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=broker"
        items = release.get_json("pods", "-n", NAMESPACE, "-l", selector)["items"]
        return len([p for p in items if _ready(p)]) == 3

    t0 = time.monotonic()
    release.until("3 ready broker pods again", brokers_ready)
    print(f"brokers 3/3 Ready again {time.monotonic() - t0:.1f}s after the load ended")


def test_rolling_the_brokers_under_load_loses_nothing_acknowledged(release: Release) -> None:
    """``helm upgrade`` that changes the brokers' pod template: the StatefulSet replaces
    each broker pod in turn (drain, persist, exit, start again) under a steady load."""
    name = "gazette-e2e-roll"
    release.kubectl(
        "apply", "-n", NAMESPACE, "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List",
                          "items": [kind.load_config_map(name), _client_of(release, _local(kind.load_pod(name, LOAD_JOURNAL, 150)))]}),
    )  # fmt: skip
    release.kubectl(
        "wait", "-n", NAMESPACE, "--for=condition=Ready", f"pod/{name}", "--timeout=120s"
    )
    time.sleep(10)
    t0 = time.monotonic()
    release.helm(
        "upgrade", RELEASE, str(helm.CHART), "--namespace", NAMESPACE, "--reuse-values",
        "--set-string", f"broker.podAnnotations.gazette\\.dev/e2e-roll={int(time.time())}",
        "--timeout", "10m",
    )  # fmt: skip
    release.kubectl(
        "rollout", "status", "-n", NAMESPACE, f"statefulset/{RELEASE}-broker", "--timeout=600s",
        timeout=660,
    )  # fmt: skip
    print(f"\nbrokers rolled by helm upgrade in {time.monotonic() - t0:.1f}s, under load")

    def done() -> bool:
        phase = release.get_json("pod", name, "-n", NAMESPACE)["status"].get("phase")
        return phase in ("Succeeded", "Failed")

    release.until("the load pod to finish", done, within=600)
    logs = release.kubectl("logs", "-n", NAMESPACE, name).stdout
    summary = json.loads(logs.strip().splitlines()[-1])
    print(f"load summary (roll): {summary}")
    assert summary["read_ok"], logs[-3000:]
    assert summary["acked"] > 0
    assert summary["missing"] == 0, summary
    assert summary["read_bytes"] >= summary["acked_bytes"]


def test_deleting_the_namespace_completes(release: Release) -> None:
    """Last: the release's namespace goes away whole, Journals with their finalizer
    included (they outlived the operator deleted with them, and the namespace hung)."""
    release.kubectl("delete", "pod", "-n", NAMESPACE, TOOLBOX, "--wait=false")
    t0 = time.monotonic()
    release.kubectl("delete", "namespace", NAMESPACE, "--wait=false")

    def gone() -> bool:
        out = release.kubectl("get", "namespace", NAMESPACE, check=False)
        return out.returncode != 0 and "NotFound" in out.stderr

    release.until(f"namespace {NAMESPACE} deleted", gone, within=240)
    print(f"\nnamespace {NAMESPACE} deleted in {time.monotonic() - t0:.1f}s")
    release.deleted = True  # type: ignore[attr-defined]
