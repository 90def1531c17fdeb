"""Tier 1: `helm install` onto a scheduling control plane with kwok nodes in 3 zones.

A real kube-apiserver, kube-controller-manager and kube-scheduler (built from Go
modules, cached) and kwok's fake nodes, one per zone (``helm.kwokcluster``). The chart
is installed with ``helm install --wait`` (its CRDs from ``crds/``), against an
external etcd (bundled etcd needs volumes no provisioner serves here) and a real S3
server; then:

- the controllers create the broker pods and the scheduler places them one per zone
  (1/1/1), and 2/2/2 after ``helm upgrade`` to 6 — printed; each pod carries its
  node's zone label (PodTopologyLabels), which is the broker's BROKER_ZONE;
- the PodDisruptionBudget and Services exist;
- the operator runs (as a local process, with its Deployment's command and
  environment) under the chart's ServiceAccount token: its RBAC is enough to serve
  ``kubectl apply`` of Journals into etcd and write their status, and it is refused
  what the chart does not grant;
- each broker pod runs as a local process with its pod's own environment (resolved
  from the pod objects the controllers made), carrying an append/read round trip on
  the applied journals, and a broker kill.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import pathlib
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import helm
import pytest
import yaml
from apiserver import kubeapi
from helm import kwokcluster, pods

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.broker.fragment import testing as s3_testing
from gazette.keyspace import testing as etcd_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300, func_only=True)]

NS = "gazette"
ZONES = ("zone-a", "zone-b", "zone-c")

#: An API refusal in the operator's log (not a timestamp's milliseconds, such as ",403").
FORBIDDEN = re.compile(r"Forbidden|(?<![,.:\d])403(?!\d)")


@pytest.fixture(scope="module")
def tools() -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """(helm, the control-plane bin folder, kwok), built where missing (outside any timeout)."""
    try:
        return helm.binary(), kwokcluster.binaries(), kwokcluster.kwok_binary()
    except helm.HelmUnavailableError as e:
        pytest.skip(str(e))
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"building helm, kwok or the Kubernetes binaries failed: {e}")


@pytest.fixture
def cluster(
    tools: tuple[pathlib.Path, pathlib.Path, pathlib.Path], tmp_path: pathlib.Path
) -> Iterator[kwokcluster.KwokCluster]:
    _, bins, kwok = tools
    with kwokcluster.KwokCluster(tmp_path / "k8s", zones=ZONES, bins=bins, kwok=kwok) as c:
        yield c


def _helm(helm_bin: pathlib.Path, api: kubeapi.KubeAPIServer, *args: str) -> str:
    proc = helm.run(helm_bin, *args, env={"KUBECONFIG": str(api.kubeconfig)}, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _broker_pods(cluster: kwokcluster.KwokCluster) -> list[dict[str, Any]]:
    selector = "app.kubernetes.io/instance=gazette,app.kubernetes.io/component=broker"
    items = cluster.get_json("pods", "-n", NS, "-l", selector)["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _per_zone(cluster: kwokcluster.KwokCluster, expected: int) -> dict[str, int]:
    """Wait for ``expected`` broker pods scheduled and ready; count them per zone."""
    deadline = time.monotonic() + 90
    while True:
        cluster.check_alive()
        items = _broker_pods(cluster)
        ready = [
            p
            for p in items
            if p["spec"].get("nodeName")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p.get("status", {}).get("conditions", [])
            )
        ]
        if len(items) == expected and len(ready) == expected:
            break
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(ready)}/{expected} broker pods scheduled and ready: "
                f"{[(p['metadata']['name'], p['spec'].get('nodeName')) for p in items]}\n"
                f"{cluster.log_tail('kube-scheduler')}"
            )
        time.sleep(0.5)
    zones = {
        n["metadata"]["name"]: n["metadata"]["labels"]["topology.kubernetes.io/zone"]
        for n in cluster.get_json("nodes")["items"]
    }
    counts: collections.Counter[str] = collections.Counter()
    for pod in ready:
        zone = zones[pod["spec"]["nodeName"]]
        # PodTopologyLabels copied the node's zone onto the pod: the broker's BROKER_ZONE.
        assert pod["metadata"]["labels"].get("topology.kubernetes.io/zone") == zone, pod["metadata"]
        counts[zone] += 1
    return dict(sorted(counts.items()))


def _secret_getter(cluster: kwokcluster.KwokCluster) -> Any:
    def get(name: str, key: str) -> str:
        data = cluster.get_json("secret", name, "-n", NS)["data"]
        return base64.b64decode(data[key]).decode()

    return get


def _gazctl(
    home: pathlib.Path, address: str, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    keys = home / "auth-keys"  # The release's keys (authorization is on by default).
    return subprocess.run(
        [str(pods.VENV_BIN / "gazctl"), "journals", *args, "--broker.address", address],
        env={**pods.base_env(home), "BROKER_AUTH_KEYS": keys.read_text() if keys.exists() else ""},
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _until(what: str, check: Any, within: float = 60) -> Any:
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        time.sleep(0.5)


def test_helm_install_on_kwok_nodes_in_three_zones(
    tools: tuple[pathlib.Path, pathlib.Path, pathlib.Path],
    cluster: kwokcluster.KwokCluster,
    tmp_path: pathlib.Path,
) -> None:
    helm_bin = tools[0]
    api = cluster.api
    with (
        etcd_testing.EtcdServer(work_dir=tmp_path / "gazette-etcd") as etcd,
        s3_testing.run_s3_server() as s3,
    ):
        s3.client().create_bucket(Bucket="gazette-e2e")
        api.kubectl("create", "namespace", NS)
        api.kubectl(
            "create", "secret", "generic", "s3-credentials", "-n", NS,
            "--from-literal=AWS_ACCESS_KEY_ID=testing", "--from-literal=AWS_SECRET_ACCESS_KEY=testing",
        )  # fmt: skip
        values = {
            "etcd": {"bundled": {"enabled": False}, "external": {"endpoint": etcd.endpoint}},
            "storage": {
                "bucket": "gazette-e2e",
                "trialServer": {"enabled": False},
                "s3": {"endpoint": s3.endpoint, "credentialsSecret": "s3-credentials"},
            },
            "broker": {"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
        }
        values_file = tmp_path / "values.yaml"
        values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        base = ["--namespace", NS, "-f", str(values_file), "--wait", "--timeout", "180s"]
        notes = _helm(helm_bin, api, "install", "gazette", str(helm.CHART), *base)
        assert "zones from: podLabel" in notes

        # --- one broker per zone; PDB and Services --------------------------------
        per_zone = _per_zone(cluster, 3)
        print(f"\nbroker pods per zone (3 brokers): {per_zone}")
        assert per_zone == dict.fromkeys(ZONES, 1)
        pdb = cluster.get_json("pdb", "gazette-broker", "-n", NS)
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["status"]["expectedPods"] == 3
        for svc in ("gazette-broker", "gazette-broker-headless"):
            assert cluster.get_json("service", svc, "-n", NS)["spec"]["ports"]
        assert {c["metadata"]["name"] for c in cluster.get_json("crd")["items"]} >= {
            "journals.gazette.dev",
            "shards.gazette.dev",
        }

        # --- the brokers, as local processes with their pods' environment ------------
        secret = _secret_getter(cluster)
        (tmp_path / "auth-keys").write_text(secret("gazette-auth-keys", "auth-keys"))
        ports = etcd_testing.free_ports(7)
        brokers: list[pods.LocalProcess] = []
        try:
            for i, pod in enumerate(_broker_pods(cluster)):
                (container,) = pod["spec"]["containers"]
                assert pod["status"].get("podIP"), "kwok gives each pod an IP"
                env = pods.resolve_env(container, pod=pod, secret=secret)
                env = pods.mount_secrets(
                    env, container, pod=pod, secret=secret, directory=tmp_path / f"secrets-{i}"
                )
                assert (
                    env["BROKER_ZONE"] == pod["metadata"]["labels"]["topology.kubernetes.io/zone"]
                )
                assert env["BROKER_ID"] == pod["metadata"]["name"]
                assert env["ETCD_ADDRESS"] == etcd.endpoint
                env["BROKER_PORT"] = str(ports[2 * i])
                env["BROKER_HTTP_PORT"] = str(ports[2 * i + 1])
                env["BROKER_SPOOL_DIR"] = str(tmp_path / pod["metadata"]["name"])
                argv = pods.local_command([*container["command"], *container.get("args", [])])
                broker = pods.LocalProcess(pod["metadata"]["name"], argv, env, tmp_path)
                broker.start()
                brokers.append(broker)
            for broker in brokers:
                broker.wait_http(f"http://127.0.0.1:{broker.env['BROKER_HTTP_PORT']}/debug/ready")
            address = [f"http://127.0.0.1:{b.env['BROKER_PORT']}" for b in brokers]

            # --- the operator, under the chart's ServiceAccount ---------------------
            token = api.kubectl(
                "create", "token", "gazette-operator", "-n", NS, "--duration=1h"
            ).stdout.strip()
            admin = yaml.safe_load(api.kubeconfig.read_text(encoding="utf-8"))
            admin["users"] = [{"name": "operator", "user": {"token": token}}]
            admin["contexts"][0]["context"]["user"] = "operator"
            op_kubeconfig = tmp_path / "operator.kubeconfig"
            op_kubeconfig.write_text(yaml.safe_dump(admin), encoding="utf-8")
            deploy = cluster.get_json("deployment", "gazette-operator", "-n", NS)
            (op_container,) = deploy["spec"]["template"]["spec"]["containers"]
            op_env = pods.resolve_env(op_container, pod=deploy["spec"]["template"], secret=secret)
            # Its auth keys file (Shards' lag reads write heads), as the kubelet mounts it.
            op_env = pods.mount_secrets(
                op_env,
                op_container,
                pod=deploy["spec"]["template"],
                secret=secret,
                directory=tmp_path / "secrets-operator",
            )
            assert op_env["BROKER_AUTH_KEYS_FILE"].startswith(str(tmp_path))
            op_env["KUBECONFIG"] = str(op_kubeconfig)
            live = etcd_testing.free_port()
            assert "--health.address=:8080" in op_container["args"]
            args = [
                f"--health.address=127.0.0.1:{live}" if a.startswith("--health.address=") else a
                for a in op_container["args"]
            ]
            operator = pods.LocalProcess(
                "operator", pods.local_command([*op_container["command"], *args]), op_env, tmp_path
            )
            # The operator process reads its API server from $KUBECONFIG (no in-cluster env).
            operator.start()
            brokers.append(operator)
            # Ready: logged in with the token, etcd answers, the Lease is held.
            operator.wait_http(f"http://127.0.0.1:{live}/readyz")

            # The chart grants it its objects, not the cluster.
            def can(verb: str, resource: str) -> bool:
                proc = api.kubectl(
                    "auth", "can-i", verb, resource, "-n", NS,
                    f"--as=system:serviceaccount:{NS}:gazette-operator", check=False,
                )  # fmt: skip
                return proc.stdout.strip() == "yes"

            assert can("patch", "journals.gazette.dev")
            assert can("patch", "shards.gazette.dev/status")
            assert can("create", "events")
            assert can("update", "leases.coordination.k8s.io/gazette-operator")
            assert not can("update", "leases.coordination.k8s.io/kube-scheduler")
            assert not can("delete", "journals.gazette.dev")
            assert not can("get", "secrets")
            assert not can("list", "pods")

            # --- kubectl apply of Journals reaches etcd, with the chart's store ------
            store = cluster.get_json("configmap", "gazette-store", "-n", NS)["data"]["store"]
            manifests = (kubeapi.REPO / "examples" / "k8s" / "journals.yaml").read_text(
                encoding="utf-8"
            )
            api.kubectl("apply", "-n", NS, "-f", "-", input=manifests.replace("file:///", store))

            def listed() -> bool:
                out = _gazctl(tmp_path, address[0], "list", "-l", "topic=logs")
                return out.returncode == 0 and out.stdout.count("examples/logs/") == 3

            _until("the operator to put the log journals into etcd", listed)

            def ready() -> bool:
                items = cluster.get_json("journals", "-n", NS, "-l", "topic=logs")["items"]
                return len(items) == 3 and all(
                    any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in j.get("status", {}).get("conditions", [])
                    )
                    for j in items
                )

            _until("the operator to write Ready status", ready)
            assert not FORBIDDEN.search(operator.log_tail(100_000)), operator.log_tail()

            # --- append/read round trip, then a broker kill -------------------------
            journal = "examples/logs/api"
            line = json.dumps({"msg": "through the chart"}) + "\n"

            def appended(via: str, data: str) -> bool:
                return (
                    _gazctl(tmp_path, via, "append", "-l", f"name={journal}", input=data).returncode
                    == 0
                )

            _until("an append", lambda: appended(address[0], line))
            brokers[1].kill()
            after = json.dumps({"msg": "after a broker kill"}) + "\n"
            _until("an append after the kill", lambda: appended(address[2], after), within=90)
            read = _gazctl(tmp_path, address[0], "read", "-l", f"name={journal}")
            assert read.returncode == 0, read.stderr
            assert read.stdout == line + after
        finally:
            for process in brokers:
                process.kill()

        # --- 6 brokers: 2/2/2 -------------------------------------------------------
        _helm(
            helm_bin,
            api,
            "upgrade",
            "gazette",
            str(helm.CHART),
            *base,
            "--set",
            "broker.replicas=6",
        )
        per_zone = _per_zone(cluster, 6)
        print(f"broker pods per zone (6 brokers): {per_zone}")
        assert per_zone == dict.fromkeys(ZONES, 2)
        _helm(
            helm_bin, api, "uninstall", "gazette", "--namespace", NS, "--wait", "--timeout", "120s"
        )


def test_zone_from_node_with_least_rbac(
    tools: tuple[pathlib.Path, pathlib.Path, pathlib.Path],
    cluster: kwokcluster.KwokCluster,
    tmp_path: pathlib.Path,
) -> None:
    """zone.from=node: each broker pod's init container reads its Node with the broker's
    ServiceAccount token (get nodes, nothing more), and the broker announces that zone."""
    helm_bin = tools[0]
    api = cluster.api
    with etcd_testing.EtcdServer(work_dir=tmp_path / "gazette-etcd") as etcd:
        api.kubectl("create", "namespace", NS)
        values = {
            "zone": {"from": "node"},
            "etcd": {"bundled": {"enabled": False}, "external": {"endpoint": etcd.endpoint}},
            "storage": {"trialServer": {"enabled": False}},
            "operator": {"enabled": False},
            "broker": {"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
        }
        values_file = tmp_path / "values.yaml"
        values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        notes = _helm(
            helm_bin, api, "install", "gazette", str(helm.CHART), "--namespace", NS,
            "-f", str(values_file), "--wait", "--timeout", "180s",
        )  # fmt: skip
        assert "zones from: node" in notes
        assert _per_zone(cluster, 3) == dict.fromkeys(ZONES, 1)

        # The broker's token, where the projected volume would put it.
        sa_dir = tmp_path / "serviceaccount"
        sa_dir.mkdir()
        token = api.kubectl("create", "token", "gazette-broker", "-n", NS).stdout.strip()
        (sa_dir / "token").write_text(token, encoding="utf-8")
        (sa_dir / "ca.crt").write_bytes((api.work_dir / "pki" / "ca.crt").read_bytes())
        scripts = tmp_path / "scripts"
        scripts.mkdir()
        for key, text in cluster.get_json("configmap", "gazette-scripts", "-n", NS)["data"].items():
            (scripts / key).write_text(text, encoding="utf-8")

        def can(verb: str, resource: str) -> bool:
            proc = api.kubectl(
                "auth", "can-i", verb, resource,
                f"--as=system:serviceaccount:{NS}:gazette-broker", check=False,
            )  # fmt: skip
            return proc.stdout.strip() == "yes"

        assert can("get", "nodes")
        assert not can("list", "nodes")
        assert not can("patch", "nodes")

        ports = etcd_testing.free_ports(6)
        brokers: list[pods.LocalProcess] = []
        announced: dict[str, str] = {}
        try:
            for i, pod in enumerate(_broker_pods(cluster)):
                name = pod["metadata"]["name"]
                zone_dir = tmp_path / name / "zone"
                zone_dir.mkdir(parents=True)
                (init,) = pod["spec"]["initContainers"]
                init_env = pods.resolve_env(init, pod=pod, secret=_secret_getter(cluster))
                init_env["ZONE_FILE"] = str(zone_dir / "zone")
                init_env["SERVICE_ACCOUNT_DIR"] = str(sa_dir)
                init_env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
                init_env["KUBERNETES_SERVICE_PORT"] = str(api.port)
                ran = subprocess.run(
                    pods.local_command(init["command"], {"/opt/gazette/scripts": scripts}),
                    env={**pods.base_env(tmp_path), **init_env},
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                assert ran.returncode == 0, ran.stderr
                node = cluster.get_json("node", pod["spec"]["nodeName"])
                zone = node["metadata"]["labels"]["topology.kubernetes.io/zone"]
                assert (zone_dir / "zone").read_text(encoding="utf-8") == zone
                announced[name] = zone

                (container,) = pod["spec"]["containers"]
                env = pods.resolve_env(container, pod=pod, secret=_secret_getter(cluster))
                env = pods.mount_secrets(
                    env,
                    container,
                    pod=pod,
                    secret=_secret_getter(cluster),
                    directory=tmp_path / name / "secrets",
                )
                assert "BROKER_ZONE" not in env  # the wrapper exports it from the file
                env["BROKER_PORT"] = str(ports[2 * i])
                env["BROKER_HTTP_PORT"] = str(ports[2 * i + 1])
                env["BROKER_SPOOL_DIR"] = str(tmp_path / name / "spool")
                argv = pods.local_command(
                    [*container["command"], *container.get("args", [])],
                    {"/run/gazette/zone": zone_dir},
                )
                assert argv[:2] == ["/bin/sh", "-ec"]
                argv[2] = argv[2].replace("exec python", f"exec {pods.VENV_BIN / 'python'}")
                broker = pods.LocalProcess(name, argv, env, tmp_path)
                broker.start()
                brokers.append(broker)
            for broker in brokers:
                broker.wait_http(f"http://127.0.0.1:{broker.env['BROKER_HTTP_PORT']}/debug/ready")
            # Each announced its node's zone: members/<zone>#<pod name> in etcd.
            request = urllib.request.Request(
                f"{etcd.endpoint}/v3/kv/range",
                data=json.dumps(
                    {
                        "key": base64.b64encode(b"/gazette/cluster/members/").decode(),
                        "range_end": base64.b64encode(b"/gazette/cluster/members0").decode(),
                        "keys_only": True,
                    }
                ).encode(),
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=10) as resp:
                kvs = json.load(resp).get("kvs", [])
            members = sorted(base64.b64decode(kv["key"]).decode() for kv in kvs)
            expected = sorted(f"/gazette/cluster/members/{z}#{n}" for n, z in announced.items())
            assert members == expected
        finally:
            for broker in brokers:
                broker.kill()


def test_namespace_deletion_finishes_after_the_operator(
    tools: tuple[pathlib.Path, pathlib.Path, pathlib.Path],
    cluster: kwokcluster.KwokCluster,
    tmp_path: pathlib.Path,
) -> None:
    """``kubectl delete namespace`` of a release whose Journals hold the operator's finalizer.

    The namespace controller (kube-controller-manager) deletes the pods first and waits
    for them to be gone; only then the Journals. The operator runs as a local process
    under the chart's ServiceAccount token, and its pod is bound to a node no kwok
    serves, so that the test plays that node's kubelet: once the pod is marked for
    deletion it sends the operator SIGTERM, waits for it to exit, then reports the pod
    gone. The namespace must then be gone within a minute (it hung, "Some content in
    the namespace has finalizers remaining", before the operator released its
    finalizers on its way out), with the Delete journal's spec, the Retain ones' left
    in etcd.
    """
    helm_bin = tools[0]
    api = cluster.api
    node = "kubelet-of-the-test"
    with etcd_testing.EtcdServer(work_dir=tmp_path / "gazette-etcd") as etcd:
        api.kubectl("create", "namespace", NS)
        values = {
            "etcd": {"bundled": {"enabled": False}, "external": {"endpoint": etcd.endpoint}},
            "storage": {"trialServer": {"enabled": False}},
            "broker": {"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
        }
        values_file = tmp_path / "values.yaml"
        values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        _helm(
            helm_bin, api, "install", "gazette", str(helm.CHART), "--namespace", NS,
            "-f", str(values_file), "--wait", "--timeout", "180s",
        )  # fmt: skip
        # The operator's pod onto a node of the test's (no kwok annotation: kwok, which
        # deletes a pod at once, leaves it alone).
        api.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
        }))  # fmt: skip
        api.kubectl(
            "patch", "deployment", "gazette-operator", "-n", NS, "--type=merge",
            "-p", json.dumps({"spec": {
                "strategy": {"type": "Recreate", "rollingUpdate": None},
                "template": {"spec": {"nodeName": node}},
            }}),
        )  # fmt: skip
        selector = "app.kubernetes.io/instance=gazette,app.kubernetes.io/component=operator"

        def moved() -> list[dict[str, Any]]:
            items = cluster.get_json("pods", "-n", NS, "-l", selector)["items"]
            ok = len(items) == 1 and items[0]["spec"].get("nodeName") == node
            return items if ok else []

        (op_pod,) = _until("the operator's pod on the test's node", moved)
        pod_name = op_pod["metadata"]["name"]

        token = api.kubectl(
            "create", "token", "gazette-operator", "-n", NS, "--duration=1h"
        ).stdout.strip()
        admin = yaml.safe_load(api.kubeconfig.read_text(encoding="utf-8"))
        admin["users"] = [{"name": "operator", "user": {"token": token}}]
        admin["contexts"][0]["context"]["user"] = "operator"
        op_kubeconfig = tmp_path / "operator.kubeconfig"
        op_kubeconfig.write_text(yaml.safe_dump(admin), encoding="utf-8")
        (op_container,) = op_pod["spec"]["containers"]
        op_env = pods.resolve_env(op_container, pod=op_pod, secret=_secret_getter(cluster))
        op_env = pods.mount_secrets(
            op_env,
            op_container,
            pod=op_pod,
            secret=_secret_getter(cluster),
            directory=tmp_path / "secrets-operator",
        )
        op_env["KUBECONFIG"] = str(op_kubeconfig)
        live = etcd_testing.free_port()
        args = [
            f"--health.address=127.0.0.1:{live}" if a.startswith("--health.address=") else a
            for a in op_container["args"]
        ]
        operator = pods.LocalProcess(
            "operator", pods.local_command([*op_container["command"], *args]), op_env, tmp_path
        )
        operator.start()
        try:
            operator.wait_http(f"http://127.0.0.1:{live}/readyz")
            manifests = (kubeapi.REPO / "examples" / "k8s" / "journals.yaml").read_text(
                encoding="utf-8"
            )
            api.kubectl("apply", "-n", NS, "-f", "-", input=manifests)
            names = {
                d["spec"]["name"]: d["spec"].get("deletionPolicy", "Retain")
                for d in yaml.safe_load_all(manifests)
                if d
            }
            assert "Delete" in names.values()

            def applied() -> bool:
                journals = cluster.get_json("journals", "-n", NS)["items"]
                held = [
                    "gazette.dev/delete-spec" in j["metadata"].get("finalizers", [])
                    for j in journals
                    if j["spec"].get("deletionPolicy") == "Delete"
                ]
                specs = _spec_names(etcd.endpoint, op_env["ETCD_PREFIX"])
                return len(journals) == len(names) and all(held) and len(specs) == len(names)

            _until("the operator to apply the journals", applied)

            t0 = time.monotonic()
            api.kubectl("delete", "namespace", NS, "--wait=false")

            def pod_terminating() -> bool:
                pod = cluster.get_json("pod", pod_name, "-n", NS)
                return bool(pod["metadata"].get("deletionTimestamp"))

            _until("the namespace controller to delete the operator's pod", pod_terminating)
            # The kubelet's part: SIGTERM, the exit, then the pod reported gone.
            assert operator.terminate(timeout=30) == 0, operator.log_tail()
        finally:
            operator.kill()
        api.kubectl("delete", "pod", pod_name, "-n", NS, "--grace-period=0", "--force")

        def gone() -> bool:
            return api.kubectl("get", "namespace", NS, check=False).returncode != 0

        try:
            _until("the namespace to be deleted", gone, within=60)
        except AssertionError:
            left = api.kubectl("get", "journals", "-n", NS, "-o", "yaml", check=False).stdout
            ns = api.kubectl("get", "namespace", NS, "-o", "yaml", check=False).stdout
            raise AssertionError(f"{ns}\n{left}\n{operator.log_tail()}") from None
        print(f"\nnamespace deleted {time.monotonic() - t0:.1f}s after kubectl delete namespace")
        specs = _spec_names(etcd.endpoint, op_env["ETCD_PREFIX"])
        assert specs == sorted(n for n, policy in names.items() if policy != "Delete")


def _spec_names(endpoint: str, prefix: str) -> list[str]:
    """The names of the JournalSpecs under ``prefix``/items/ in etcd."""

    async def names() -> list[str]:
        client = await keyspace.connect(endpoint)
        try:
            kvs = await client.get_prefix(f"{prefix}/items/".encode())
        finally:
            await client.close()
        return sorted(pb.JournalSpec.FromString(bytes(kv.value)).name for kv in kvs)

    return asyncio.run(names())
