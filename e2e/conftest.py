"""Fixtures of the end-to-end suites: a real kube-apiserver, Gazette's etcd, the operator.

* ``kube``: kube-apiserver (built from Go by ``e2e/apiserver/build.sh``, cached in
  the tool cache's ``k8s/``, outside the checkout: ``e2e/cache-root.sh``) over an etcd 3.6 of its own (built there too), with the Journal and Shard CRDs of
  ``crds/`` installed by ``kubectl apply``, once per session. The build, when the
  binaries are missing, runs after collection, outside any test's timeout. Tests
  using it are skipped, saying why, only when there is no Go toolchain.
* ``gazette_etcd``: the etcd Gazette's specs go to (one per session); ``etcd_client``
  a connected client and ``etcd_roots`` fresh prefixes per test.
* ``namespace``: a fresh namespace per test.
* ``start_operator``: runs ``python -m gazette.operator`` as a user would, for the
  test's namespaces and prefixes (and Gazette's etcd, unless told another), and waits
  until it is live; each serves its probes and metrics on a port of its own.
* ``helm_bin``: helm from the tool cache (built once when Go is here), or the test
  is skipped saying why.
* ``chaos_reports``: where the chaos suite (``test_chaos.py``) leaves each
  scenario's :class:`chaos.report.Report`; the session ends with their table.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import helm
import pytest
from apiserver import kubeapi

from gazette import keyspace
from gazette.keyspace import testing as etcd_testing

_CHAOS_REPORTS = pytest.StashKey[list[Any]]()


@pytest.fixture(scope="session")
def helm_bin() -> pathlib.Path:
    try:
        return helm.binary()
    except helm.HelmUnavailableError as e:
        pytest.skip(str(e))
    except subprocess.CalledProcessError as e:
        pytest.fail(f"building helm failed: {e}")


_unavailable: str | None = None
_build_failure: str | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    global _unavailable, _build_failure
    if not any("kube" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    try:
        kubeapi.binaries(build=True)
    except kubeapi.KubeUnavailableError as e:
        _unavailable = str(e)
    except subprocess.CalledProcessError as e:
        _build_failure = f"building the Kubernetes binaries failed: {e}"


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeapi.KubeAPIServer]:
    if _unavailable:
        pytest.skip(_unavailable)
    if _build_failure:
        pytest.fail(_build_failure)
    work = tmp_path_factory.mktemp("kube")
    with (
        kubeapi.kube_etcd(work / "etcd") as etcd,
        kubeapi.KubeAPIServer(kubeapi.binaries(build=False), etcd.endpoint, work / "api") as api,
    ):
        api.kubectl("apply", "--server-side", "-f", str(kubeapi.REPO / "crds"))
        api.kubectl(
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/journals.gazette.dev",
            "crd/shards.gazette.dev",
        )
        yield api


@pytest.fixture(scope="session")
def gazette_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[etcd_testing.EtcdServer]:
    with etcd_testing.EtcdServer(work_dir=tmp_path_factory.mktemp("gazette-etcd")) as server:
        yield server


@pytest.fixture
async def etcd_client(gazette_etcd: etcd_testing.EtcdServer) -> AsyncIterator[Any]:
    client = await keyspace.connect(gazette_etcd.endpoint)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def etcd_roots() -> tuple[str, str]:
    """(brokers' prefix, consumers' prefix), fresh for the test."""
    run = secrets.token_hex(4)
    return f"/e2e-{run}/cluster", f"/e2e-{run}/consumers"


@pytest.fixture
def namespace(kube: kubeapi.KubeAPIServer) -> str:
    name = f"e2e-{secrets.token_hex(4)}"
    kube.kubectl("create", "namespace", name)
    return name


class Operator:
    """A running ``python -m gazette.operator`` process."""

    def __init__(self, proc: subprocess.Popen[bytes], log: pathlib.Path, base: str) -> None:
        self.proc = proc
        self.log = log
        self.base = base
        self.liveness = f"{base}/healthz"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        """(HTTP status, body) of ``GET <its health server><path>`` (0 when unreachable)."""
        try:
            with urllib.request.urlopen(self.base + path, timeout=5) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode()
        except (urllib.error.URLError, OSError):
            return 0, ""

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to release anything."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _wait_live(op: Operator, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if op.proc.poll() is not None:
            raise RuntimeError(f"operator exited ({op.proc.returncode}):\n{op.log_text()[-4000:]}")
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(op.liveness, timeout=2) as resp,
        ):
            if resp.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"operator not live after {timeout}s:\n{op.log_text()[-4000:]}")


@pytest.fixture
def start_operator(
    kube: kubeapi.KubeAPIServer,
    gazette_etcd: etcd_testing.EtcdServer,
    etcd_roots: tuple[str, str],
    tmp_path: pathlib.Path,
) -> Iterator[Callable[..., Operator]]:
    started: list[Operator] = []

    def start(
        *namespaces: str,
        cluster: str = "e2e",
        etcd_address: str | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> Operator:
        port = etcd_testing.free_port()
        log = tmp_path / f"operator-{len(started)}.log"
        argv = [
            sys.executable,
            "-m",
            "gazette.operator",
            f"--etcd.address={etcd_address or gazette_etcd.endpoint}",
            f"--etcd.prefix={etcd_roots[0]}",
            f"--consumers.prefix={etcd_roots[1]}",
            f"--cluster={cluster}",
            "--retry-delay=1",
            f"--health.address=127.0.0.1:{port}",
            *(f"--namespace={ns}" for ns in namespaces),
            *args,
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                env={**kube.env(), **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        op = Operator(proc, log, f"http://127.0.0.1:{port}")
        started.append(op)
        _wait_live(op, timeout=60)
        return op

    yield start
    for op in started:
        op.stop()
        if os.environ.get("GAZETTE_E2E_OPERATOR_LOG"):
            print(op.log_text())


@pytest.fixture
def chaos_reports(request: pytest.FixtureRequest) -> list[Any]:
    return request.config.stash.setdefault(_CHAOS_REPORTS, [])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    reports = config.stash.get(_CHAOS_REPORTS, [])
    if reports:
        import json

        from chaos.report import save, side_by_side, table

        terminalreporter.section("chaos: acknowledged appends under faults")
        terminalreporter.write_line(table(reports))
        if out := os.environ.get("CHAOS_TABLE_OUT"):
            save(reports, pathlib.Path(out))
        # ``make chaos-go`` saved the same scenarios run on Gazette's Go brokers.
        other = pathlib.Path(os.environ.get("CHAOS_COMPARE", ""))
        if other.name and other.is_file():
            terminalreporter.section(f"chaos: ours beside Go Gazette ({other})")
            rows = json.loads(other.read_text())
            terminalreporter.write_line(side_by_side(reports, rows, "go"))
