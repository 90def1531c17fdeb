"""The chart's own configuration carries a real cluster: its pods run as local processes.

``helm template`` renders the default (trial) release for Kubernetes 1.36. Each broker
pod of the StatefulSet, the bucket hook Job and the ``helm test`` pod then run as a
local process with the container's rendered command and environment, resolved as the
kubelet would (``fieldRef``, ``secretKeyRef`` from the rendered Secret) and the
cluster's DNS names mapped to loopback: etcd to a real etcd, the trial S3 server to a
real S3 server (moto), the brokers' Service to a broker. Only what a pod has and a
process on a shared loopback can't is changed, and checked first: each broker's ports
(every pod has its own IP) and spool directory (its volume's mount path).

Then: the helm test's append/read round trip passes; a broker is SIGKILLed and the
journal keeps taking appends and reading back everything acknowledged; the broker is
restarted as its pod would be; and SIGTERM of every broker (a release uninstalled)
persists every acknowledged byte to the bucket within the rendered grace period.
"""

from __future__ import annotations

import base64
import pathlib
import re
import signal
import subprocess
import time
import types
from collections.abc import Iterator
from typing import Any

import helm
import pytest
import yaml
from helm import pods

from gazette.broker.fragment import testing as s3_testing
from gazette.keyspace import testing as etcd_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240, func_only=True)]

NAMESPACE = "gazette-local"
ZONES = ("zone-a", "zone-b", "zone-c")


class Rendered:
    """The rendered release, with the cluster's DNS names of ``dns`` mapped to loopback."""

    def __init__(self, text: str) -> None:
        self.objects = [o for o in yaml.safe_load_all(text) if o]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return found

    def secret(self, name: str, key: str) -> str:
        return base64.b64decode(self.get("Secret", name)["data"][key]).decode()


def _render(helm_bin: pathlib.Path, dns: dict[str, str]) -> Rendered:
    proc = helm.run(helm_bin, *helm.template_args(namespace=NAMESPACE, kube_version="1.36.3"))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for name, local in dns.items():
        assert name in text, f"{name} is not in the rendered release"
        text = text.replace(name, local)
        # In store URLs' query: endpoint=http%3A%2F%2F<host>%3A<port>.
        text = text.replace(
            name.replace(":", "%3A").replace("/", "%2F"),
            local.replace(":", "%3A").replace("/", "%2F"),
        )
    return Rendered(text)


class BrokerPod(pods.LocalProcess):
    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.env['BROKER_PORT']}"

    @property
    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.env['BROKER_HTTP_PORT']}/debug/ready"


@pytest.fixture
def cluster(
    helm_bin: pathlib.Path, tmp_path: pathlib.Path
) -> Iterator[tuple[Rendered, list[BrokerPod], Any]]:
    ports = etcd_testing.free_ports(6)
    with (
        etcd_testing.EtcdServer(work_dir=tmp_path / "etcd") as etcd,
        s3_testing.run_s3_server() as s3,
    ):
        svc = f"{NAMESPACE}.svc"
        rendered = _render(
            helm_bin,
            {
                f"http://gazette-etcd.{svc}:2379": etcd.endpoint,
                f"http://gazette-s3.{svc}:9000": s3.endpoint,
                f"http://gazette-broker.{svc}:8080": f"http://127.0.0.1:{ports[0]}",
            },
        )
        scripts = tmp_path / "scripts"
        scripts.mkdir()
        for key, text in rendered.get("ConfigMap", "gazette-scripts")["data"].items():
            (scripts / key).write_text(text, encoding="utf-8")
        mounts = {"/opt/gazette/scripts": scripts}

        # The bucket hook Job of the trial S3 server.
        job = rendered.get("Job", "gazette-s3-create-bucket")["spec"]["template"]
        (creator,) = job["spec"]["containers"]
        created = subprocess.run(
            pods.local_command(creator["command"], mounts),
            env={
                **pods.base_env(tmp_path),
                **pods.resolve_env(creator, pod=job, secret=rendered.secret),
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert created.returncode == 0, created.stderr
        assert "created gazette" in created.stdout

        sts = rendered.get("StatefulSet", "gazette-broker")
        spec = sts["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        assert "initContainers" not in spec  # zones from the pods' topology labels
        container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        (spool_mount,) = [m for m in container["volumeMounts"] if m["name"] == "spool"]
        # The chart's own auth keys (authorization is on by default), for gazctl.
        (tmp_path / "auth-keys").write_text(rendered.secret("gazette-auth-keys", "auth-keys"))
        assert container["readinessProbe"]["httpGet"] == {"path": "/debug/ready", "port": "http"}
        brokers = []
        for i in range(sts["spec"]["replicas"]):
            name = f"gazette-broker-{i}"
            # PodTopologyLabels copies the node's zone label onto the pod at binding.
            labels = {
                **sts["spec"]["template"]["metadata"]["labels"],
                "topology.kubernetes.io/zone": ZONES[i % 3],
            }
            pod = {"metadata": {"name": name, "namespace": NAMESPACE, "labels": labels}}
            env = pods.resolve_env(container, pod=pod, secret=rendered.secret)
            assert env["BROKER_ZONE"] == ZONES[i % 3]
            assert env["BROKER_PORT"] == str(container_ports["grpc"])
            assert env["BROKER_HTTP_PORT"] == str(container_ports["http"])
            assert env["BROKER_SPOOL_DIR"] == spool_mount["mountPath"]
            assert env["BROKER_AUTH_KEYS_FILE"] == "/etc/gazette/auth/auth-keys"
            env = pods.mount_secrets(
                env, container, pod=sts["spec"]["template"], secret=rendered.secret,
                directory=tmp_path / name / "secrets",
            )  # fmt: skip
            env["BROKER_PORT"] = str(ports[2 * i])
            env["BROKER_HTTP_PORT"] = str(ports[2 * i + 1])
            env["BROKER_SPOOL_DIR"] = str(tmp_path / name / "spool")
            argv = pods.local_command([*container["command"], *container.get("args", [])])
            brokers.append(BrokerPod(name, argv, env, tmp_path))

        control = types.SimpleNamespace(tmp=tmp_path, s3=s3)
        try:
            for broker in brokers:
                broker.start()
            for broker in brokers:
                broker.wait_http(broker.ready_url)
            _enable_etcd_auth(rendered, etcd, tmp_path)
            yield rendered, brokers, control
        finally:
            for broker in brokers:
                broker.kill()


def _enable_etcd_auth(rendered: Rendered, etcd: Any, tmp: pathlib.Path) -> None:
    """The bundled etcd's auth hook Job, run once the brokers serve (as helm runs
    post-install hooks): from then on etcd refuses anyone but its users, and the brokers,
    started while it was open, go on signing in."""
    job = rendered.get("Job", "gazette-etcd-auth")["spec"]["template"]
    (setup,) = job["spec"]["containers"]
    secrets = tmp / "etcd-auth"
    secrets.mkdir()
    for key in ("root-password", "password"):
        (secrets / key).write_text(rendered.secret("gazette-etcd-auth", key))
    (mount,) = setup["volumeMounts"]
    done = subprocess.run(
        pods.local_command(setup["command"], {mount["mountPath"]: secrets}),
        env={**pods.base_env(tmp), **pods.resolve_env(setup, pod=job, secret=rendered.secret)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "etcd auth enabled" in done.stderr, done.stderr
    etcd.auth_enabled, etcd.root_password = True, (secrets / "root-password").read_text()
    anonymous = subprocess.run(
        [str(pods.VENV_BIN / "python"), "-c", _ANONYMOUS_PUT, etcd.endpoint],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert anonymous.returncode != 0 and "user name is empty" in anonymous.stderr, anonymous


# A put to etcd by a client without a user.
_ANONYMOUS_PUT = """
import asyncio, sys
from gazette import keyspace
async def main():
    client = await keyspace.connect(sys.argv[1], call_timeout=10)
    try:
        await client.put(b"/gazette/cluster/anonymous", b"x")
    finally:
        await client.close()
asyncio.run(main())
"""


def _gazctl(
    tmp: pathlib.Path, address: str, *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(pods.VENV_BIN / "gazctl"), "journals", *args, "--broker.address", address],
        # Signing with the release's keys, as the helm test pod does.
        env={**pods.base_env(tmp), "BROKER_AUTH_KEYS": (tmp / "auth-keys").read_text()},
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _append(tmp: pathlib.Path, address: str, journal: str, data: str, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while True:
        proc = _gazctl(tmp, address, "append", "-l", f"name={journal}", input=data)
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"append to {journal} via {address}: {proc.stderr}")
        time.sleep(0.5)


def _read(tmp: pathlib.Path, address: str, journal: str) -> str:
    proc = _gazctl(tmp, address, "read", "-l", f"name={journal}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_chart_pods_as_local_processes(
    cluster: tuple[Rendered, list[BrokerPod], Any],
) -> None:
    rendered, brokers, control = cluster
    tmp: pathlib.Path = control.tmp

    # 1. `helm test`: the test pod's script and environment, as rendered.
    test_pod_obj = rendered.get("Pod", "gazette-test-roundtrip")
    (tester,) = test_pod_obj["spec"]["containers"]
    env = pods.resolve_env(tester, pod=test_pod_obj, secret=rendered.secret)
    assert env["BROKER_ADDRESS"] == brokers[0].address
    (tmp / "test-pod").mkdir()
    roundtrip = subprocess.run(
        [*tester["command"], *tester["args"]],
        env={**pods.base_env(tmp / "test-pod"), **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert roundtrip.returncode == 0, roundtrip.stdout + roundtrip.stderr
    assert "round trip ok: gazette-helm-test/" in roundtrip.stdout
    journal_of_test = re.search(r"round trip ok: (\S+)", roundtrip.stdout)[1]  # type: ignore[index]
    listed = _gazctl(tmp, brokers[1].address, "list", "-l", f"name={journal_of_test}")
    assert journal_of_test not in listed.stdout  # the test deleted its journal

    # 2. A journal on the chart's store, replicated over 2 of the 3 zones.
    store = rendered.get("ConfigMap", "gazette-store")["data"]["store"]
    assert store.startswith("s3://gazette/fragments/?endpoint=http%3A%2F%2F127.0.0.1")
    journal = "helm-local/kill"
    spec = {
        "name": journal,
        "replication": 2,
        "labels": [{"name": "content-type", "value": "text/plain"}],
        "fragment": {
            "length": 1048576,
            "compression_codec": "NONE",
            "stores": [store],
            "refresh_interval": "1s",
        },
    }
    applied = _gazctl(tmp, brokers[1].address, "apply", input=yaml.safe_dump(spec))
    assert applied.returncode == 0, applied.stderr
    _append(tmp, brokers[1].address, journal, "before the kill\n")

    # 3. SIGKILL a broker: appends and reads go on through the others.
    victim = brokers[0]
    victim.kill()
    _append(tmp, brokers[1].address, journal, "after the kill\n", within=90)
    assert _read(tmp, brokers[2].address, journal) == "before the kill\nafter the kill\n"

    # 4. The pod restarts (same name, same volume): it rejoins and serves the journal.
    victim.start()
    victim.wait_http(victim.ready_url)
    _append(tmp, victim.address, journal, "after the restart\n")
    assert _read(tmp, victim.address, journal) == (
        "before the kill\nafter the kill\nafter the restart\n"
    )

    # 5. SIGTERM every broker (an uninstall): each drains and persists its spools, and
    #    exits within the rendered grace period; the bucket then holds every byte.
    grace = rendered.get("StatefulSet", "gazette-broker")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    for broker in brokers:
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + min(grace, 120)
    for broker in brokers:
        status = broker.terminate(timeout=max(1.0, deadline - time.monotonic()))
        assert status == 0, broker.log_tail()
    bucket = control.s3.client()
    keys = [
        o["Key"]
        for page in bucket.get_paginator("list_objects_v2").paginate(
            Bucket="gazette", Prefix=f"fragments/{journal}/"
        )
        for o in page.get("Contents", ())
    ]
    assert keys, "no fragment of the journal was persisted"
    # Fragment names start with their hex begin offset: concatenating them in order
    # (replicas may persist the same range twice) must cover every acknowledged byte.
    by_begin: dict[int, bytes] = {}
    for key in keys:
        begin = int(key.rsplit("/", 1)[1].split("-")[0], 16)
        body = bucket.get_object(Bucket="gazette", Key=key)["Body"].read()
        if len(body) > len(by_begin.get(begin, b"")):
            by_begin[begin] = body
    content = b""
    for begin in sorted(by_begin):
        content = content[:begin] + by_begin[begin]
    assert content == b"before the kill\nafter the kill\nafter the restart\n"
