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
import json
import pathlib
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

    # The operator of the release, as its Deployment runs it, with the chart's RBAC.
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
