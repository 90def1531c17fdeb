"""The README's Kubernetes quick start, step by step, on a real kube-apiserver.

    helm install gazette charts/gazette
    kubectl apply -f examples/k8s/chart/journals.yaml
    kubectl get journals -l topic=logs

The install is the default values' (its hooks skipped: no controllers run the trial
bucket's Job here); the operator then runs as a local process with its Deployment's
command and environment, under the chart's ServiceAccount token, against Gazette's etcd
(the bundled etcd needs volumes nothing provisions here). The journals must come out
Ready in ``kubectl get journals`` and their specs reach etcd naming the release's
bucket. A check without any server keeps ``examples/k8s/chart/journals.yaml`` the
example journals of ``examples/k8s/journals.yaml`` with the release's store.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import pathlib
import subprocess
import time
import urllib.parse
from typing import Any

import helm
import pytest
import yaml
from apiserver import kubeapi
from helm import pods

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.keyspace import testing as etcd_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180, func_only=True)]

EXAMPLE = kubeapi.REPO / "examples" / "k8s" / "journals.yaml"
CHART_EXAMPLE = kubeapi.REPO / "examples" / "k8s" / "chart" / "journals.yaml"


def _docs(path: pathlib.Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _example_store() -> str:
    stores = {s for d in _docs(CHART_EXAMPLE) for s in d["spec"]["fragment"]["stores"]}
    assert len(stores) == 1, stores
    return stores.pop()


def _release_store(helm_bin: pathlib.Path, namespace: str) -> str:
    """The store URL the release `gazette` of default values names (its ConfigMap)."""
    objects = helm.template(helm_bin, namespace=namespace)
    (cm,) = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gazette-store"
    ]
    return str(cm["data"]["store"])


def _fully_qualified(store: str, namespace: str) -> str:
    """The store with its endpoint's short Service name spelled in full."""
    url = urllib.parse.urlsplit(store)
    query = urllib.parse.parse_qs(url.query)
    endpoint = urllib.parse.urlsplit(query["endpoint"][0])
    host = f"{endpoint.hostname}.{namespace}.svc:{endpoint.port}"
    full = endpoint._replace(netloc=host).geturl()
    return store.replace(
        urllib.parse.quote(query["endpoint"][0], safe=""), urllib.parse.quote(full, safe="")
    )


def test_chart_example_is_the_example_on_the_release_bucket(helm_bin: pathlib.Path) -> None:
    store = _example_store()
    ours = _docs(CHART_EXAMPLE)
    theirs = yaml.safe_load_all(EXAMPLE.read_text(encoding="utf-8").replace("file:///", store))
    assert ours == [d for d in theirs if d]
    assert sorted(
        d["metadata"]["name"] for d in ours if d["metadata"]["labels"].get("topic") == "logs"
    ) == [
        "logs-api",
        "logs-web",
        "logs-worker",
    ]
    # The release's bucket, in whatever namespace the release is.
    for namespace in ("default", "gazette"):
        assert _fully_qualified(store, namespace) == _release_store(helm_bin, namespace)


def test_quick_start(
    helm_bin: pathlib.Path,
    kube: kubeapi.KubeAPIServer,
    gazette_etcd: etcd_testing.EtcdServer,
    etcd_roots: tuple[str, str],
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    ns = namespace
    env = {"KUBECONFIG": str(kube.kubeconfig)}
    # 1. helm install gazette charts/gazette
    install = helm.run(
        helm_bin, "install", "gazette", str(helm.CHART), "--namespace", ns, "--no-hooks", env=env
    )
    assert install.returncode == 0, install.stderr
    # Its notes say the next step.
    assert f"kubectl apply -n {ns} -f examples/k8s/chart/journals.yaml" in install.stdout
    # 2. kubectl apply -f examples/k8s/chart/journals.yaml
    kube.kubectl("apply", "-n", ns, "-f", str(CHART_EXAMPLE))

    operator = _release_operator(kube, ns, gazette_etcd, etcd_roots, tmp_path)
    try:
        # 3. kubectl get journals -l topic=logs
        deadline = time.monotonic() + 60
        while True:
            table = kube.kubectl("get", "journals", "-n", ns, "-l", "topic=logs").stdout
            rows = [line.split() for line in table.strip().splitlines()[1:]]
            header = table.splitlines()[0].split() if table.strip() else []
            if len(rows) == 3 and "READY" in header:
                ready = [r[header.index("READY")] for r in rows]
                if ready == ["True"] * 3:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"journals not Ready in 60 s:\n{table}\n{operator.log_tail()}")
            time.sleep(0.5)
        print(f"\n$ kubectl get journals -l topic=logs\n{table}")
        assert sorted(r[1] for r in rows) == [
            "examples/logs/api",
            "examples/logs/web",
            "examples/logs/worker",
        ]
        # Their specs are in etcd, on the release's bucket.
        specs = asyncio.run(_journal_specs(gazette_etcd.endpoint, f"{etcd_roots[0]}/items/"))
        assert sorted(specs) == sorted(d["spec"]["name"] for d in _docs(CHART_EXAMPLE))
        for spec in specs.values():
            assert list(spec.fragment.stores) == [_example_store()]
    finally:
        operator.kill()
    down = helm.run(helm_bin, "uninstall", "gazette", "--namespace", ns, "--no-hooks", env=env)
    assert down.returncode == 0, down.stderr


def _release_operator(
    kube: kubeapi.KubeAPIServer,
    ns: str,
    gazette_etcd: etcd_testing.EtcdServer,
    etcd_roots: tuple[str, str],
    tmp_path: pathlib.Path,
) -> pods.LocalProcess:
    """The release's operator, started as its Deployment runs it, with the chart's RBAC,
    and ready (the caller kills it)."""
    deploy = json.loads(
        kube.kubectl("get", "deployment", "gazette-operator", "-n", ns, "-o", "json").stdout
    )
    (container,) = deploy["spec"]["template"]["spec"]["containers"]

    def no_secrets(name: str, key: str) -> str:
        raise AssertionError(f"the operator reads no Secret ({name}/{key})")

    op_env = pods.resolve_env(container, pod=deploy["spec"]["template"], secret=no_secrets)

    def installed_secret(name: str, key: str) -> str:
        obj = json.loads(kube.kubectl("get", "secret", name, "-n", ns, "-o", "json").stdout)
        return base64.b64decode(obj["data"][key]).decode()

    # The etcd password, from the Secret the install made, as the kubelet mounts it (this
    # etcd has auth off, as the bundled one has until its hook Job runs: the operator
    # calls it without signing in).
    op_env = pods.mount_secrets(
        op_env,
        container,
        pod=deploy["spec"]["template"],
        secret=installed_secret,
        directory=tmp_path / "operator-secrets",
    )
    assert op_env["ETCD_USERNAME"] == "gazette"
    assert op_env["WATCH_NAMESPACES"] == ns
    assert op_env["GAZETTE_CLUSTER"] == "default"
    op_env.update(
        ETCD_ADDRESS=gazette_etcd.endpoint,
        ETCD_PREFIX=etcd_roots[0],
        CONSUMERS_PREFIX=etcd_roots[1],
        KUBECONFIG=str(_token_kubeconfig(kube, ns, tmp_path)),
    )
    port = etcd_testing.free_port()
    args = [
        f"--health.address=127.0.0.1:{port}" if a.startswith("--health.address=") else a
        for a in container["args"]
    ]
    operator = pods.LocalProcess(
        "operator", pods.local_command([*container["command"], *args]), op_env, tmp_path
    )
    operator.start()
    try:
        operator.wait_http(f"http://127.0.0.1:{port}/readyz")
    except BaseException:
        operator.kill()
        raise
    return operator


async def _journal_specs(endpoint: str, prefix: str) -> dict[str, Any]:
    """The JournalSpecs under an etcd prefix, by name."""
    client = await keyspace.connect(endpoint)
    try:
        kvs = await client.get_prefix(prefix.encode())
    finally:
        await client.close()
    specs = [pb.JournalSpec.FromString(bytes(kv.value)) for kv in kvs]
    return {spec.name: spec for spec in specs}


def _token_kubeconfig(kube: kubeapi.KubeAPIServer, ns: str, tmp_path: pathlib.Path) -> pathlib.Path:
    """A kubeconfig of the chart's operator ServiceAccount (its token, its RBAC only)."""
    token = kube.kubectl(
        "create", "token", "gazette-operator", "-n", ns, "--duration=1h"
    ).stdout.strip()
    config = yaml.safe_load(kube.kubeconfig.read_text(encoding="utf-8"))
    config["users"] = [{"name": "operator", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "operator"
    path = tmp_path / "operator.kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_notes_store_command_keeps_every_character_of_the_store(
    helm_bin: pathlib.Path, kube: kubeapi.KubeAPIServer, namespace: str, tmp_path: pathlib.Path
) -> None:
    """The notes' commands for another release name, run as a user would, in bash.

    A store URL with an endpoint and a region joins them with ``&``, which a sed
    replacement reads as the matched text (``file:///``): the journals then named
    ``...endpoint=...file:///region=...`` and failed FRAGMENT_STORE_UNHEALTHY
    (missing AWS region) on a real node.
    """
    ns = namespace
    env = {"KUBECONFIG": str(kube.kubeconfig)}
    install = helm.run(
        helm_bin, "install", "logs", str(helm.CHART), "--namespace", ns, "--no-hooks",
        "--set-string", "storage.s3.region=us-east-1", env=env,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    notes = install.stdout.splitlines()
    start = notes.index("Journals (name the store above in spec.fragment.stores):") + 1
    commands = list(
        itertools.takewhile(lambda line: "kubectl get journals" not in line, notes[start:])
    )
    assert [c.split()[0].split("=")[0] for c in commands] == ["STORE", "sed"], commands
    store = json.loads(
        kube.kubectl("get", "configmap", "logs-gazette-store", "-n", ns, "-o", "json").stdout
    )["data"]["store"]
    assert "&region=us-east-1" in store, store

    # kubectl on PATH is the test's, against its API server; the paths are the repo's.
    bash_env = {
        **os.environ,
        **env,
        "PATH": f"{kube.kubectl_path.parent}{os.pathsep}{os.environ['PATH']}",
    }
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(c.strip() for c in commands)],
        cwd=kubeapi.REPO, env=bash_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    journals = json.loads(kube.kubectl("get", "journals", "-n", ns, "-o", "json").stdout)["items"]
    assert len(journals) == len(_docs(EXAMPLE))
    for journal in journals:
        assert journal["spec"]["fragment"]["stores"] == [store], journal["metadata"]["name"]


def test_helm_test_pod_stays_for_its_logs(
    helm_bin: pathlib.Path, kube: kubeapi.KubeAPIServer, namespace: str
) -> None:
    """``helm test --logs`` reads the test pod's log after it succeeded: the pod must stay.

    No kubelet runs here, so the test plays its part: it marks the pod Succeeded, as a
    kubelet would once the round trip exits 0. With ``hook-succeeded`` in the pod's
    delete policy helm deleted it right then, and ``--logs`` failed (pods "...-test-
    roundtrip" not found) on a real node. A second ``helm test`` replaces the pod.
    """
    ns = namespace
    env = {"KUBECONFIG": str(kube.kubeconfig)}
    install = helm.run(
        helm_bin, "install", "gazette", str(helm.CHART), "--namespace", ns, "--no-hooks", env=env
    )
    assert install.returncode == 0, install.stderr
    pod = "gazette-test-roundtrip"
    uids = []
    for _ in range(2):
        argv = [str(helm_bin), "test", "gazette", "--namespace", ns, "--timeout", "90s"]
        home = helm_bin.parent / "home"
        helm_env = {
            **os.environ, **env, "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data"),
        }  # fmt: skip
        with subprocess.Popen(
            argv, env=helm_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            try:
                deadline = time.monotonic() + 60
                while True:
                    got = kube.kubectl("get", "pod", pod, "-n", ns, "-o", "json", check=False)
                    if (
                        got.returncode == 0
                        and json.loads(got.stdout)["metadata"]["uid"] not in uids
                    ):
                        break
                    assert time.monotonic() < deadline, "helm test made no pod"
                    time.sleep(0.2)
                uids.append(json.loads(got.stdout)["metadata"]["uid"])
                status = {
                    "status": {
                        "phase": "Succeeded",
                        "conditions": [{"type": "Ready", "status": "False"}],
                    }
                }
                kube.kubectl(
                    "patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge",
                    "-p", json.dumps(status),
                )  # fmt: skip
                out, _ = proc.communicate(timeout=60)
            finally:
                proc.kill()
        assert proc.returncode == 0, out
        assert "Phase:          Succeeded" in out, out
        # The pod is still there, for `helm test --logs` and `kubectl logs`.
        kept = json.loads(kube.kubectl("get", "pod", pod, "-n", ns, "-o", "json").stdout)
        assert kept["metadata"]["uid"] == uids[-1]
        assert kept["status"]["phase"] == "Succeeded"
    assert len(set(uids)) == 2, "the second helm test replaced the pod"


def test_namespace_deletion_is_not_held_by_the_operators_finalizers(
    helm_bin: pathlib.Path,
    kube: kubeapi.KubeAPIServer,
    gazette_etcd: etcd_testing.EtcdServer,
    etcd_roots: tuple[str, str],
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    """``kubectl delete namespace`` of a release with a ``deletionPolicy: Delete`` Journal.

    Kubernetes deletes a namespace's pods first and the rest once they are gone: the
    operator is stopped (SIGTERM) while the Journals are still there, and the Delete one
    then held its finalizer for an operator that never came back, so the namespace hung
    in Terminating on a real node. Here no namespace controller runs: the namespace is
    marked for deletion, and the operator, run as its Deployment runs it with the
    chart's RBAC, gets the SIGTERM its pod would. It must delete that Journal's spec
    (its policy) and take the finalizer off every Journal before it exits, and leave the
    Retain ones' specs in etcd.
    """
    ns = namespace
    env = {"KUBECONFIG": str(kube.kubeconfig)}
    install = helm.run(
        helm_bin, "install", "gazette", str(helm.CHART), "--namespace", ns, "--no-hooks", env=env
    )
    assert install.returncode == 0, install.stderr
    kube.kubectl("apply", "-n", ns, "-f", str(CHART_EXAMPLE))
    operator = _release_operator(kube, ns, gazette_etcd, etcd_roots, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:  # The Delete journal's finalizer, and every spec in etcd.
            scratch = json.loads(
                kube.kubectl("get", "journal", "scratch", "-n", ns, "-o", "json").stdout
            )
            specs = asyncio.run(_journal_specs(gazette_etcd.endpoint, f"{etcd_roots[0]}/items/"))
            if "gazette.dev/delete-spec" in scratch["metadata"].get("finalizers", []) and len(
                specs
            ) == len(_docs(CHART_EXAMPLE)):
                break
            assert time.monotonic() < deadline, f"not applied in 60 s:\n{operator.log_tail()}"
            time.sleep(0.5)
        assert scratch["spec"]["deletionPolicy"] == "Delete"

        kube.kubectl("delete", "namespace", ns, "--wait=false")
        t0 = time.monotonic()
        assert operator.terminate(timeout=30) == 0, operator.log_tail()
        print(f"\noperator out in {time.monotonic() - t0:.1f}s after SIGTERM")
    finally:
        operator.kill()
    journals = json.loads(kube.kubectl("get", "journals", "-n", ns, "-o", "json").stdout)["items"]
    assert len(journals) == len(_docs(CHART_EXAMPLE))
    held = [j["metadata"]["name"] for j in journals if j["metadata"].get("finalizers")]
    assert held == [], f"finalizers left: {held}\n{operator.log_tail()}"
    specs = asyncio.run(_journal_specs(gazette_etcd.endpoint, f"{etcd_roots[0]}/items/"))
    assert sorted(specs) == sorted(
        d["spec"]["name"]
        for d in _docs(CHART_EXAMPLE)
        if d["spec"].get("deletionPolicy") != "Delete"
    )
    assert "examples/scratch" not in specs
