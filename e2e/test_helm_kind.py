"""What of the kind suite (``make e2e-kind``, ``e2e/kind/``) can be checked without Docker.

The tier-2 suite needs Docker, which ``make test`` does not assume. Here, in ``make test``:

- the cluster config, decoded and defaulted by kind's own types (``e2e/kind/configcheck``,
  strict: a misspelled field fails), has one control plane and three workers in three
  zones, on a node image of Kubernetes >= 1.35 (PodTopologyLabels, where the chart's
  brokers read their zone);
- kind builds from its Go module at the pinned version;
- the setup's command lines: the images ``make images`` builds are the chart's and the
  ones loaded onto the nodes, with every other image the chart renders (nothing pulled
  inside the cluster, pullPolicy Never);
- every manifest the suite applies (the chart with the kind values, the Spark overlay of
  ``examples/spark_daily_counts/k8s``, the load and toolbox pods) passes a server-side
  dry run on the tier-1 kube-apiserver;
- the load pod's script, run locally against a real broker, acknowledges appends and
  finds every acknowledged line in its read-back.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import helm
import kind
import pytest
import yaml
from apiserver import kubeapi

from gazette.broker import testing as broker_testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.keyspace import testing as etcd_testing

# Building kind and running `go run ./configcheck` happen in fixtures, outside the
# per-test timeout; each is bounded on its own (kind.BUILD_TIMEOUT).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(180, func_only=True)]

ZONES = ("zone-a", "zone-b", "zone-c")


@pytest.fixture(scope="module")
def kind_bin() -> pathlib.Path:
    try:
        return kind.kind_binary()
    except kind.KindUnavailableError as e:
        pytest.skip(str(e))
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"building kind failed: {e}")


@pytest.fixture(scope="module")
def kind_config() -> dict[str, Any]:
    try:
        return kind.config_check()
    except kind.KindUnavailableError as e:
        pytest.skip(str(e))


def _chart_objects(helm_bin: pathlib.Path, namespace: str) -> list[dict[str, Any]]:
    # kind 0.33's node image is Kubernetes 1.37: zones from the pods' labels.
    return helm.template(helm_bin, values=[kind.VALUES], namespace=namespace, kube_version="1.37.0")


def test_kind_config_has_three_workers_in_three_zones(kind_config: dict[str, Any]) -> None:
    nodes = kind_config["nodes"]
    assert [n["role"] for n in nodes].count("control-plane") == 1
    workers = [n for n in nodes if n["role"] == "worker"]
    assert sorted(n["labels"]["topology.kubernetes.io/zone"] for n in workers) == list(ZONES)
    assert kind_config["name"] == kind.CLUSTER_NAME
    # The defaulted node image: Kubernetes >= 1.35, where PodTopologyLabels is on.
    (image,) = {n["image"] for n in nodes}
    version = image.split(":")[1].split("@")[0]  # kindest/node:v1.37.0@sha256:...
    major, minor = (int(p) for p in version.lstrip("v").split(".")[:2])
    print(f"\nkind node image: {image}")
    assert (major, minor) >= (1, 35), image


def test_kind_config_is_decoded_strictly(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = kind.CLUSTER_CONFIG.read_text(encoding="utf-8").replace("labels:", "lables:", 1)
    bad.write_text(text, encoding="utf-8")
    try:
        kind.config_check(bad)
    except kind.KindUnavailableError as e:
        pytest.skip(str(e))
    except ValueError as e:
        assert "lables" in str(e)
    else:
        raise AssertionError("a misspelled field was accepted")


def test_kind_builds_at_the_pinned_version(kind_bin: pathlib.Path) -> None:
    out = subprocess.run(
        [str(kind_bin), "version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert out.startswith(f"kind {kind.kind_version()} "), out


def test_setup_builds_and_loads_every_image(helm_bin: pathlib.Path) -> None:
    objects = _chart_objects(helm_bin, kind.NAMESPACE)
    rendered = kind.rendered_images(objects)
    third_party = sorted(i for i in rendered if not i.startswith("gazette-"))
    assert third_party, "the bundled etcd and the trial S3 server"
    tools = kind.Tools(helm_bin, pathlib.Path("kind"), pathlib.Path("kubectl"))
    commands = kind.setup_commands(tools, third_party)

    # `make images` as a dry run: what it would build, from which Dockerfile, is
    # exactly the gazette images the suite loads.
    make = commands[0]
    assert make[:4] == ["make", "-C", str(kubeapi.REPO), "images"]
    assert "ENGINE=docker" in make
    out = subprocess.run(
        [*make, "DRY_RUN=1"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    builds = [line.split() for line in out.splitlines() if line.startswith("docker build ")]
    built = set()
    for words in builds:
        dockerfile = kubeapi.REPO / words[words.index("-f") + 1]
        assert dockerfile.is_file(), dockerfile
        built.add(words[words.index("-t") + 1])
    loads = [c for c in commands if c[1:3] == ["load", "docker-image"]]
    (load,) = loads
    loaded = set(load[5:])
    assert built == set(kind.gazette_images()) <= loaded
    # Every image a rendered pod runs is on the nodes, and nothing is pulled.
    assert rendered <= loaded, rendered - loaded
    for obj in objects:
        spec = obj.get("spec", {})
        pod = spec if obj["kind"] == "Pod" else spec.get("template", {}).get("spec", {})
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            assert c["imagePullPolicy"] == "Never", (obj["metadata"]["name"], c["name"])
    # The third-party images are pulled first; the cluster is the checked config.
    assert [c[2] for c in commands if c[:2] == ["docker", "pull"]] == third_party
    create = next(c for c in commands if c[1:3] == ["create", "cluster"])
    assert create[create.index("--config") + 1] == str(kind.CLUSTER_CONFIG)
    install = commands[-1]
    assert install[1:3] == ["install", kind.RELEASE]
    assert install[install.index("-f") + 1] == str(kind.VALUES)
    assert "--wait" in install


@pytest.fixture
def dry_run_namespace(kube: kubeapi.KubeAPIServer) -> Iterator[str]:
    import secrets

    name = f"kind-{secrets.token_hex(4)}"
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _dry_run(kube: kubeapi.KubeAPIServer, ns: str, objects: list[dict[str, Any]]) -> None:
    proc = kube.kubectl(
        "apply", "--dry-run=server", "--namespace", ns, "-o", "json", "-f", "-",
        input=yaml.safe_dump_all(objects), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    accepted = json.loads(proc.stdout)
    items = accepted.get("items", [accepted])
    assert sorted((o["kind"], o["metadata"]["name"]) for o in items) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in objects
    )


def test_suite_manifests_pass_a_server_side_dry_run(
    helm_bin: pathlib.Path, kube: kubeapi.KubeAPIServer, dry_run_namespace: str
) -> None:
    ns = dry_run_namespace
    chart = _chart_objects(helm_bin, ns)
    # The Spark overlay, rendered by kubectl's kustomize, moved to this namespace.
    spark = [
        o
        for o in yaml.safe_load_all(kube.kubectl("kustomize", str(kind.SPARK_OVERLAY)).stdout)
        if o
    ]
    job = next(o for o in spark if o["kind"] == "Job")
    (driver,) = job["spec"]["template"]["spec"]["containers"]
    assert driver["image"] == f"gazette-spark:{kind.image_tag()}"
    assert {"name": "SPARK_IMAGE", "value": driver["image"]} in driver["env"]
    config = next(o for o in spark if o["kind"] == "ConfigMap" and "SELECTOR" in o["data"])
    assert config["data"]["SELECTOR"] == "topic=logs"
    assert config["data"]["BROKER_ADDRESS"] == (
        f"http://{kind.RELEASE}-broker.{kind.NAMESPACE}.svc:8080"
    )
    assert config["data"]["S3_ENDPOINT"] == f"http://{kind.RELEASE}-s3.{kind.NAMESPACE}.svc:9000"
    assert config["data"]["OUTPUT"].startswith("s3a://gazette/")  # the release's bucket
    for obj in spark:
        assert obj["metadata"].get("namespace") == kind.NAMESPACE
        obj["metadata"]["namespace"] = ns
        for subject in obj.get("subjects", []):
            subject["namespace"] = ns
    suite = [
        kind.load_config_map("gazette-e2e-load"),
        kind.load_pod("gazette-e2e-load", "examples/logs/web", 90),
        kind.toolbox_pod("gazette-e2e-toolbox"),
    ]
    _dry_run(kube, ns, chart + spark + suite)


def test_load_script_against_a_broker(
    gazette_etcd: etcd_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    import asyncio

    prefix = f"/kind-load-{os.getpid()}/cluster"
    with broker_testing.BrokerCluster(
        gazette_etcd.endpoint, work_dir=tmp_path, brokers=1, zones=("zone-a",), etcd_prefix=prefix
    ) as cluster:
        journal = "examples/logs/web"

        async def setup() -> None:
            async with cluster.channel(0) as ch:
                stub = pb2_grpc.JournalStub(ch)
                await broker_testing.apply_specs(
                    stub,
                    broker_testing.journal_spec(journal, replication=1, stores=[cluster.store_url]),
                )
                await broker_testing.wait_writable(stub, journal)

        asyncio.run(setup())
        env = {
            "PATH": f"{pathlib.Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "BROKER_ADDRESS": cluster.brokers[0].endpoint,
            "JOURNAL": journal,
            "LOAD_SECONDS": "4",
        }
        proc = subprocess.run(
            [sys.executable, str(kind.LOAD_SCRIPT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nload script summary: {summary}")
    assert summary["acked"] >= 1
    assert summary["failed"] == 0
    assert summary["missing"] == 0
    assert summary["read_lines"] == summary["acked"]
    assert summary["read_bytes"] == summary["acked_bytes"]
