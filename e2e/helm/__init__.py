"""Helm 3, built from its Go module, and the chart ``charts/gazette``, for the e2e suites.

``build.sh`` beside this file builds ``helm`` from the ``helm.sh/helm/v3`` module pinned
in ``go.mod`` into ``helm/<version>/helm`` of the tool cache (``e2e/cache-root.sh``,
outside the checkout; once, later runs and fresh clones reuse it).
:func:`binary` finds it, building it if Go is there; :func:`run` runs it;
:func:`template` renders the chart into a list of objects::

    helm_bin = binary()
    objects = template(helm_bin, values=[CHART / "values-production.yaml"])
    kinds = {o["kind"] for o in objects}

The chart is tested by ``e2e/test_helm_chart.py`` (lint, template, schema, server-side
dry run on a real kube-apiserver) and its images by ``e2e/test_helm_images.py``.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from apiserver import kubeapi

__all__ = [
    "CHART",
    "HERE",
    "REPO",
    "HelmUnavailableError",
    "binary",
    "binary_path",
    "run",
    "template",
    "version",
]

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
CHART = REPO / "charts" / "gazette"
#: Overrides the root of build.sh's output (default: the tool cache; helm goes to
#: <root>/helm/<version>/helm, kwok to <root>/kwok/<version>/kwok).
CACHE_ENV = "GAZETTE_HELM_CACHE"
#: Bound of one build (a cold module cache downloads, then compiles on 2 cores: ~3 min).
BUILD_TIMEOUT = 1800.0


class HelmUnavailableError(RuntimeError):
    """helm is not built and can't be here (no Go toolchain)."""


def _cache_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get(CACHE_ENV) or str(kubeapi.cache_root()))


def version() -> str:
    """The ``helm.sh/helm/v3`` version pinned in ``e2e/helm/go.mod``."""
    for line in (HERE / "go.mod").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "helm.sh/helm/v3":
            return parts[1]
    raise RuntimeError("no helm.sh/helm/v3 requirement in e2e/helm/go.mod")


def binary_path() -> pathlib.Path:
    """Where the pinned helm lives (built or not)."""
    return _cache_root() / "helm" / version() / "helm"


def binary(*, build: bool = True) -> pathlib.Path:
    """The helm binary, built first if missing and Go is here.

    Raises HelmUnavailableError without Go, CalledProcessError if the build fails and
    TimeoutExpired after BUILD_TIMEOUT seconds.
    """
    path = binary_path()
    if os.access(path, os.X_OK):
        return path
    if shutil.which("go") is None:
        raise HelmUnavailableError(
            f"helm {version()} is not built and there is no Go toolchain to build it "
            "(e2e/helm/build.sh needs `go` on PATH)"
        )
    if not build:
        raise HelmUnavailableError(f"helm {version()} not built yet: run e2e/helm/build.sh")
    subprocess.run(
        [str(HERE / "build.sh"), str(_cache_root()), "helm"],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        timeout=BUILD_TIMEOUT,
    )
    return path


def run(
    helm: pathlib.Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run helm (never raises on its exit status: callers check ``returncode``).

    HOME and helm's own folders point into the cache, so no user config is read or
    written.
    """
    home = helm.parent / "home"
    full = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        **(env or {}),
    }
    return subprocess.run(
        [str(helm), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
        check=False,
    )


def _set_args(values: Mapping[str, Any]) -> list[str]:
    args = []
    for key, value in values.items():
        if isinstance(value, str):
            args += ["--set-string", f"{key}={value}"]
        else:
            args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def template_args(
    *,
    values: Iterable[pathlib.Path] = (),
    sets: Mapping[str, Any] | None = None,
    namespace: str = "default",
    release: str = "gazette",
    kube_version: str | None = None,
    api_versions: Iterable[str] = (),
) -> list[str]:
    """The arguments of ``helm template`` (after the binary) for these values."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for path in values:
        args += ["-f", str(path)]
    args += _set_args(sets or {})
    if kube_version:
        args += ["--kube-version", kube_version]
    for api in api_versions:
        args += ["--api-versions", api]
    return args


def template(helm: pathlib.Path, **kwargs: Any) -> list[dict[str, Any]]:
    """Render the chart (``template_args`` keywords) into its objects; raises on failure."""
    proc = run(helm, *template_args(**kwargs))
    if proc.returncode != 0:
        raise RuntimeError(f"helm template failed ({proc.returncode}):\n{proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
