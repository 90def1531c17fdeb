"""Tier 2: the chart on kind (Kubernetes in Docker), with real pods, where Docker runs.

``make e2e-kind`` runs ``e2e/kind/test_kind_cluster.py``: a kind cluster of one control
plane and three workers in three zones (``cluster.yaml``), the images of ``make images``
and the third-party images the chart names loaded onto the nodes (``kind load
docker-image``), ``helm install`` of ``charts/gazette`` with ``values.yaml``, then the
tier-1 assertions with real pods plus a broker pod deleted under load and the Spark
example job on the release's bucket (``spark/``). kind itself is built from its Go
module (``go.mod`` beside this file) by ``e2e/helm/build.sh`` into the tool cache
(``e2e/cache-root.sh kind``), as helm and kwok are.

Everything here that needs no container engine is checked by ``e2e/test_helm_kind.py``
in ``make test``: the cluster config with kind's own types (``configcheck/``), the
command lines of the setup, and every manifest the suite applies, by a server-side dry
run on the tier-1 kube-apiserver.

    with KindCluster(tools, work_dir) as cluster:
        cluster.kubectl("get", "pods", "-n", NAMESPACE)
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
from typing import Any, NamedTuple

import yaml

__all__ = [
    "CLUSTER_CONFIG",
    "CLUSTER_NAME",
    "GAZETTE_IMAGES",
    "NAMESPACE",
    "RELEASE",
    "REQUIRED_ENV",
    "SPARK_OVERLAY",
    "VALUES",
    "KindCluster",
    "KindUnavailableError",
    "Tools",
    "config_check",
    "docker_missing",
    "image_tag",
    "kind_binary",
    "kind_version",
    "load_pod",
    "setup_commands",
    "toolbox_pod",
]

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
CHART = REPO / "charts" / "gazette"
CLUSTER_CONFIG = HERE / "cluster.yaml"
VALUES = HERE / "values.yaml"
SPARK_OVERLAY = HERE / "spark"
LOAD_SCRIPT = HERE / "load.py"
CLUSTER_NAME = "gazette-e2e"
NAMESPACE = "gazette"
RELEASE = "gazette"
#: Gazette's images (images/<name>/Dockerfile), as `make images` tags them.
GAZETTE_IMAGES = ("broker", "consumer", "operator", "gazctl", "spark")
#: Set by `make e2e-kind`: without Docker the suite fails instead of skipping.
REQUIRED_ENV = "GAZETTE_KIND"
#: Bound of the kind build (a cold module cache downloads, then compiles).
BUILD_TIMEOUT = 1200.0


class KindUnavailableError(RuntimeError):
    """kind can't be built or run here (no Go toolchain, or no Docker)."""


class Tools(NamedTuple):
    helm: pathlib.Path
    kind: pathlib.Path
    kubectl: pathlib.Path


def kind_version() -> str:
    """The ``sigs.k8s.io/kind`` version pinned in ``e2e/kind/go.mod``."""
    for line in (HERE / "go.mod").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "sigs.k8s.io/kind":
            return parts[1]
    raise RuntimeError("no sigs.k8s.io/kind requirement in e2e/kind/go.mod")


def _cache_root() -> pathlib.Path:
    out = subprocess.run(
        [str(REPO / "e2e" / "cache-root.sh")], capture_output=True, text=True, check=True
    ).stdout
    return pathlib.Path(out.strip())


def kind_binary() -> pathlib.Path:
    """kind, built from its Go module into the tool cache first if missing."""
    root = _cache_root()
    path = root / "kind" / kind_version() / "kind"
    if os.access(path, os.X_OK):
        return path
    if shutil.which("go") is None:
        raise KindUnavailableError("kind is not built and there is no Go toolchain to build it")
    subprocess.run(
        [str(REPO / "e2e" / "helm" / "build.sh"), str(root), "kind"],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        timeout=BUILD_TIMEOUT,
    )
    return path


def config_check(config: pathlib.Path = CLUSTER_CONFIG) -> dict[str, Any]:
    """The kind config as kind decodes and defaults it (``configcheck/``; needs Go)."""
    if shutil.which("go") is None:
        raise KindUnavailableError("checking the kind config needs a Go toolchain")
    proc = subprocess.run(
        ["go", "run", "-mod=readonly", "./configcheck", str(config)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
        env={**os.environ, "GOFLAGS": "-p=1"},
    )
    if proc.returncode != 0:
        raise ValueError(proc.stderr.strip())
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def docker_missing() -> str | None:
    """Why Docker can't run kind's nodes here, or None when it can."""
    docker = shutil.which("docker")
    if docker is None:
        return "no `docker` on PATH (kind runs Kubernetes nodes as Docker containers)"
    proc = subprocess.run(
        [docker, "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        return f"`docker info` failed: {proc.stderr.strip()[:500]}"
    return None


def image_tag() -> str:
    """The tag `make images` gives and the chart defaults to (the chart's appVersion)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    return str(chart["appVersion"])


def gazette_images() -> list[str]:
    return [f"gazette-{name}:{image_tag()}" for name in GAZETTE_IMAGES]


def rendered_images(objects: Sequence[dict[str, Any]]) -> set[str]:
    """Every container image of these objects' pod specs."""
    found: set[str] = set()
    for obj in objects:
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec", spec) if obj["kind"] != "Pod" else spec
        for key in ("initContainers", "containers"):
            found.update(c["image"] for c in pod.get(key, []) if "image" in c)
    return found


def setup_commands(tools: Tools, third_party: Sequence[str]) -> list[list[str]]:
    """The command lines that build the cluster, in order (run by KindCluster)."""
    tag = image_tag()
    images = [*gazette_images(), *third_party]
    return [
        ["make", "-C", str(REPO), "images", f"IMAGE_TAG={tag}", "ENGINE=docker"],
        *(["docker", "pull", image] for image in third_party),
        [
            str(tools.kind), "create", "cluster", "--name", CLUSTER_NAME,
            "--config", str(CLUSTER_CONFIG), "--wait", "180s",
        ],
        [str(tools.kind), "load", "docker-image", "--name", CLUSTER_NAME, *images],
        [
            str(tools.helm), "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
            "--create-namespace", "-f", str(VALUES), "--wait", "--timeout", "600s",
        ],
    ]  # fmt: skip


def load_pod(name: str, journal: str, seconds: int) -> dict[str, Any]:
    """The Pod that appends to ``journal`` through the brokers' Service for ``seconds``.

    It runs ``load.py`` (from the ConfigMap ``<name>``) in the gazctl image, and ends by
    printing one JSON line: what was acknowledged, and what of it was read back.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "gazette-e2e-load"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "load",
                    "image": f"gazette-gazctl:{image_tag()}",
                    "imagePullPolicy": "Never",
                    "command": ["python", "/opt/load/load.py"],
                    "env": [
                        {
                            "name": "BROKER_ADDRESS",
                            "value": f"http://{RELEASE}-broker.{NAMESPACE}.svc:8080",
                        },
                        {"name": "JOURNAL", "value": journal},
                        {"name": "LOAD_SECONDS", "value": str(seconds)},
                    ],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [
                        {"name": "load", "mountPath": "/opt/load", "readOnly": True},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                {"name": "load", "configMap": {"name": name}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            ],
        },
    }


def toolbox_pod(name: str) -> dict[str, Any]:
    """A gazctl pod that sleeps, for the suite's ``kubectl exec gazctl ...`` and boto3."""
    pod = load_pod(name, "-", 0)
    (container,) = pod["spec"]["containers"]
    container["name"] = "gazctl"
    container["command"] = ["sleep", "7200"]
    container["env"] = [e for e in container["env"] if e["name"] == "BROKER_ADDRESS"]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] == "tmp"]
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] == "tmp"]
    pod["metadata"]["labels"] = {"app.kubernetes.io/name": "gazette-e2e-toolbox"}
    return pod


def load_config_map(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"load.py": LOAD_SCRIPT.read_text(encoding="utf-8")},
    }


class KindCluster:
    """A kind cluster with the chart installed: created on enter, deleted on exit.

    ``GAZETTE_KIND_KEEP=1`` keeps it (to look around); it is then reused by the next
    run only after ``kind delete cluster --name gazette-e2e``.
    """

    def __init__(self, tools: Tools, work_dir: pathlib.Path, third_party: Sequence[str]) -> None:
        self.tools = tools
        self.work_dir = work_dir
        self.third_party = list(third_party)
        self.kubeconfig = work_dir / "kubeconfig"
        self._created = False

    def __enter__(self) -> KindCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            for argv in setup_commands(self.tools, self.third_party):
                self._created = self._created or argv[1:3] == ["create", "cluster"]
                self.run(argv, timeout=1800)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        if self._created and not os.environ.get("GAZETTE_KIND_KEEP"):
            with contextlib.suppress(subprocess.SubprocessError):
                self.run(
                    [str(self.tools.kind), "delete", "cluster", "--name", CLUSTER_NAME],
                    timeout=300,
                )
            self._created = False

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(self.work_dir / "helm" / "cache"),
            "HELM_CONFIG_HOME": str(self.work_dir / "helm" / "config"),
            "HELM_DATA_HOME": str(self.work_dir / "helm" / "data"),
        }

    def run(
        self, argv: Sequence[str], *, timeout: float = 300, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command against the cluster; raise with its output when it fails."""
        proc = subprocess.run(
            list(argv),
            env=self.env(),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    def kubectl(
        self, *args: str, timeout: float = 300, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.tools.kubectl), *args], timeout=timeout, input=input)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def helm(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.tools.helm), *args], timeout=timeout)

    def until(self, what: str, check: Any, within: float = 300) -> Any:
        deadline = time.monotonic() + within
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {within}s waiting for {what}")
            time.sleep(2)
