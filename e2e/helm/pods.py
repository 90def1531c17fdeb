"""Run a chart's containers as local processes: their command and environment, resolved.

A pod's container is run on loopback as the kubelet would start it: its ``env``
resolved from the pod object (``fieldRef``: name, namespace, labels, annotations,
node, IP) and Secrets (``secretKeyRef``), ``$(VAR)`` references expanded, ``python``
meaning this interpreter (the images' venv holds the same members as .venv). Used
by ``test_helm_processes.py`` (pods rendered by ``helm template``) and
``test_helm_kwok.py`` (pods created by the controllers and placed by the scheduler).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from gazette.keyspace import testing as etcd_testing

__all__ = ["VENV_BIN", "LocalProcess", "base_env", "local_command", "mount_secrets", "resolve_env"]

VENV_BIN = pathlib.Path(sys.executable).parent

SecretGetter = Callable[[str, str], str]


def _field(pod: Mapping[str, Any], path: str, pod_ip: str) -> str:
    meta = pod.get("metadata", {})
    if path == "metadata.name":
        return str(meta["name"])
    if path == "metadata.namespace":
        return str(meta.get("namespace", "default"))
    if path == "spec.nodeName":
        return str(pod.get("spec", {}).get("nodeName", ""))
    if path == "status.podIP":
        return pod_ip
    if m := re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path):
        # A missing label is an empty value, as the kubelet gives it.
        return str((meta.get(m[1]) or {}).get(m[2], ""))
    raise AssertionError(f"no local value of fieldRef {path}")


def resolve_env(
    container: Mapping[str, Any],
    *,
    pod: Mapping[str, Any],
    secret: SecretGetter,
    pod_ip: str = "127.0.0.1",
) -> dict[str, str]:
    """The container's environment, as the kubelet sets it (the sources the chart uses)."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            value = str(var["value"])
        else:
            source = var["valueFrom"]
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                value = secret(ref["name"], ref["key"])
            else:
                value = _field(pod, source["fieldRef"]["fieldPath"], pod_ip)
        env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), value)
    assert not container.get("envFrom"), "envFrom is not resolved here"
    return env


def mount_secrets(
    env: dict[str, str],
    container: Mapping[str, Any],
    *,
    pod: Mapping[str, Any],
    secret: SecretGetter,
    directory: pathlib.Path,
) -> dict[str, str]:
    """``env`` with paths into the container's Secret volumes made local.

    Each variable naming a file under a Secret volume's mount path (e.g.
    ``BROKER_AUTH_KEYS_FILE``) gets that file, written from the Secret as the kubelet
    would mount it, under ``directory/<volume>/``.
    """
    spec = pod.get("spec", {})
    volumes = {
        v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v
    }
    out = dict(env)
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volumes:
            continue
        prefix = mount["mountPath"].rstrip("/") + "/"
        local = directory / mount["name"]
        for name, value in env.items():
            if value.startswith(prefix):
                key = value[len(prefix) :]
                local.mkdir(parents=True, exist_ok=True)
                (local / key).write_text(secret(volumes[mount["name"]], key))
                out[name] = str(local / key)
    return out


def base_env(home: pathlib.Path) -> dict[str, str]:
    """What every local process gets besides its container's environment."""
    return {
        "PATH": f"{VENV_BIN}:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(home),
        # Keep a developer's ~/.aws out of the processes.
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


def local_command(
    command: list[str], mounts: Mapping[str, pathlib.Path] | None = None
) -> list[str]:
    """``command`` with ``python`` as this interpreter and mount paths mapped to local ones."""
    out = [sys.executable if command[0] == "python" else command[0], *command[1:]]
    for mount, local in (mounts or {}).items():
        out = [a.replace(mount, str(local)) for a in out]
    return out


class LocalProcess:
    """One container run as a process; its output goes to ``<work_dir>/<name>.log``."""

    def __init__(
        self, name: str, argv: list[str], env: Mapping[str, str], work_dir: pathlib.Path
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = dict(env)
        self.work_dir = work_dir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> pathlib.Path:
        return self.work_dir / f"{self.name}.log"

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*etcd_testing.die_with_parent_argv(), *self.argv],
                env={**base_env(self.work_dir), **self.env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def log_tail(self, chars: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def wait_http(self, url: str, timeout: float = 60) -> None:
        """Until ``url`` answers 200 (a readiness probe), or raise with the log's tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log_tail()
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(url, timeout=2) as resp,
            ):
                if resp.status == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: {url} not ready in {timeout}s:\n{self.log_tail()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def terminate(self, timeout: float) -> int:
        """SIGTERM, and the exit status within ``timeout`` seconds (else kill and raise)."""
        assert self.proc is not None
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.name} did not stop in {timeout}s:\n{self.log_tail()}"
            ) from None
