"""Tier 2 (``make e2e-kind``): the chart on a kind cluster, with real pods in 3 zones.

Written for hosts with Docker; see ``e2e/kind/__init__.py`` for the setup and the README
("Kubernetes: the Helm chart") for what was and wasn't run where. Without Docker the
tests fail under ``make e2e-kind`` (it asks for kind) and are skipped elsewhere
(``make e2e``); ``make test`` deselects them (marker ``e2e``) and checks their setup
and manifests in ``e2e/test_helm_kind.py`` instead.

One module-scoped cluster, then, in order:

1. broker pods: 1/1/1 over the zones, Ready, each announcing its node's zone;
2. ``kubectl apply`` of the chart-ready example journals, Ready through the operator
   and listed by the brokers (so in etcd);
3. ``helm test``: gazctl's append/read round trip through the brokers' Service;
4. the journal's primary broker pod deleted under a steady append load: every
   acknowledged byte is read back;
5. the Spark example job (``examples/spark_daily_counts``) on the appended journals,
   writing Parquet to the release's bucket.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import helm
import pytest
import yaml
from apiserver import kubeapi

import kind

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600, func_only=True)]

ZONES = ("zone-a", "zone-b", "zone-c")
CHART_EXAMPLE = kubeapi.REPO / "examples" / "k8s" / "chart" / "journals.yaml"
LOAD_JOURNAL = "examples/logs/web"
#: A sleeping gazctl pod: `kubectl exec` of gazctl and boto3 inside the cluster.
TOOLBOX = "gazette-e2e-toolbox"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kind.KindCluster]:
    missing = kind.docker_missing()
    if missing:
        if os.environ.get(kind.REQUIRED_ENV):
            pytest.fail(f"make e2e-kind needs Docker: {missing}")
        pytest.skip(f"the kind suite needs Docker: {missing}")
    try:
        tools = kind.Tools(helm.binary(), kind.kind_binary(), kubeapi.binaries() / "kubectl")
    except (
        helm.HelmUnavailableError,
        kind.KindUnavailableError,
        kubeapi.KubeUnavailableError,
    ) as e:
        pytest.fail(f"make e2e-kind needs helm, kind and kubectl built from Go: {e}")
    objects = helm.template(tools.helm, values=[kind.VALUES], namespace=kind.NAMESPACE)
    third_party = sorted(i for i in kind.rendered_images(objects) if not i.startswith("gazette-"))
    with kind.KindCluster(tools, tmp_path_factory.mktemp("kind"), third_party) as c:
        c.kubectl(
            "apply", "-n", kind.NAMESPACE, "-f", "-", input=json.dumps(kind.toolbox_pod(TOOLBOX))
        )
        c.kubectl(
            "wait",
            "-n",
            kind.NAMESPACE,
            "--for=condition=Ready",
            f"pod/{TOOLBOX}",
            "--timeout=120s",
        )
        yield c


def _broker_pods(c: kind.KindCluster) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={kind.RELEASE},app.kubernetes.io/component=broker"
    items = c.get_json("pods", "-n", kind.NAMESPACE, "-l", selector)["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def _gazctl(c: kind.KindCluster, *args: str) -> str:
    return c.kubectl(
        "exec", "-n", kind.NAMESPACE, TOOLBOX, "--", "gazctl", "journals", *args
    ).stdout


def test_brokers_one_per_zone(cluster: kind.KindCluster) -> None:
    zones = {
        n["metadata"]["name"]: n["metadata"]["labels"].get("topology.kubernetes.io/zone")
        for n in cluster.get_json("nodes")["items"]
    }
    pods = cluster.until(
        "3 ready broker pods",
        lambda: (p := _broker_pods(cluster)) and len(p) == 3 and all(map(_ready, p)) and p,
    )
    per_zone = collections.Counter(zones[p["spec"]["nodeName"]] for p in pods)
    print(f"\nbroker pods per zone (kind, 3 brokers): {dict(sorted(per_zone.items()))}")
    assert per_zone == dict.fromkeys(ZONES, 1)
    for pod in pods:
        # PodTopologyLabels (Kubernetes >= 1.35) copied the node's zone onto the pod.
        assert (
            pod["metadata"]["labels"]["topology.kubernetes.io/zone"]
            == zones[pod["spec"]["nodeName"]]
        )
    assert (
        cluster.get_json("pdb", f"{kind.RELEASE}-broker", "-n", kind.NAMESPACE)["status"][
            "currentHealthy"
        ]
        == 3
    )


def test_journals_through_the_operator(cluster: kind.KindCluster) -> None:
    cluster.kubectl("apply", "-n", kind.NAMESPACE, "-f", str(CHART_EXAMPLE))

    def ready() -> bool:
        items = cluster.get_json("journals", "-n", kind.NAMESPACE, "-l", "topic=logs")["items"]
        return len(items) == 3 and all(kubeapi.condition(j, "Ready")[0] == "True" for j in items)

    cluster.until("the log journals Ready", ready)
    print(cluster.kubectl("get", "journals", "-n", kind.NAMESPACE, "-l", "topic=logs").stdout)
    # The brokers list them: the specs are in etcd.
    listed = json.loads(_gazctl(cluster, "list", "-l", "topic=logs", "-o", "json"))
    assert sorted(j["spec"]["name"] for j in listed["journals"]) == [
        "examples/logs/api",
        "examples/logs/web",
        "examples/logs/worker",
    ]


def test_helm_test_round_trip(cluster: kind.KindCluster) -> None:
    out = cluster.helm("test", kind.RELEASE, "--namespace", kind.NAMESPACE, "--logs").stdout
    assert "round trip ok" in out, out


def test_broker_pod_deletion_under_load_loses_nothing_acknowledged(
    cluster: kind.KindCluster,
) -> None:
    name = "gazette-e2e-load"
    cluster.kubectl(
        "apply", "-n", kind.NAMESPACE, "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List",
                          "items": [kind.load_config_map(name), kind.load_pod(name, LOAD_JOURNAL, 90)]}),
    )  # fmt: skip
    cluster.kubectl(
        "wait", "-n", kind.NAMESPACE, "--for=condition=Ready", f"pod/{name}", "--timeout=120s"
    )
    time.sleep(20)  # some load first
    listed = json.loads(_gazctl(cluster, "list", "-l", f"name={LOAD_JOURNAL}", "-o", "json"))
    route = listed["journals"][0]["route"]
    primary = route["members"][route.get("primary", 0)]["suffix"]
    started = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", kind.NAMESPACE, primary, "--wait=true", timeout=300)
    print(f"\ndeleted the primary {primary} in {time.monotonic() - started:.1f}s, under load")

    def done() -> bool:
        phase = cluster.get_json("pod", name, "-n", kind.NAMESPACE)["status"].get("phase")
        return phase in ("Succeeded", "Failed")

    cluster.until("the load pod to finish", done, within=600)
    logs = cluster.kubectl("logs", "-n", kind.NAMESPACE, name).stdout
    summary = json.loads(logs.strip().splitlines()[-1])
    print(f"load summary: {summary}")
    assert summary["read_ok"], logs[-3000:]
    assert summary["acked"] > 0
    assert summary["missing"] == 0, summary
    assert summary["read_bytes"] >= summary["acked_bytes"]
    cluster.until(
        "3 ready broker pods again",
        lambda: len([p for p in _broker_pods(cluster) if _ready(p)]) == 3,
    )


def test_spark_daily_counts_on_the_bucket(
    cluster: kind.KindCluster, tmp_path: pathlib.Path
) -> None:
    rendered = cluster.kubectl("kustomize", str(kind.SPARK_OVERLAY)).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    creds = cluster.get_json("secret", f"{kind.RELEASE}-s3", "-n", kind.NAMESPACE)["data"]
    for obj in objects:
        if obj["kind"] == "Secret":
            obj.pop("stringData", None)
            obj["data"] = {k: creds[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    try:
        cluster.kubectl(
            "wait", "-n", kind.NAMESPACE, "--for=condition=Complete", "job/gazette-daily-counts",
            "--timeout=1200s", timeout=1300,
        )  # fmt: skip
    finally:
        print(
            cluster.kubectl(
                "logs", "-n", kind.NAMESPACE, "job/gazette-daily-counts", "--tail=40"
            ).stdout
        )
    # The Parquet output is in the bucket: list it from inside the cluster with the
    # gazctl image's boto3, as the release's own credentials.
    key_id = base64.b64decode(creds["AWS_ACCESS_KEY_ID"]).decode()
    secret = base64.b64decode(creds["AWS_SECRET_ACCESS_KEY"]).decode()
    script = (
        "import boto3\n"
        f"s3 = boto3.client('s3', endpoint_url='http://{kind.RELEASE}-s3:9000', region_name='us-east-1',"
        f" aws_access_key_id={key_id!r}, aws_secret_access_key={secret!r})\n"
        "r = s3.list_objects_v2(Bucket='gazette', Prefix='reports/daily-counts/')\n"
        "print('\\n'.join(o['Key'] for o in r.get('Contents', [])))\n"
    )
    keys = cluster.kubectl(
        "exec", "-n", kind.NAMESPACE, TOOLBOX, "--", "python", "-c", script
    ).stdout.split()
    print(f"daily counts in the bucket: {keys}")
    assert any(k.endswith(".parquet") and "/day=" in k for k in keys), keys
