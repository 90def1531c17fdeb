"""Fixtures of the Go interop tests: Go's ``message`` package against our brokers.

* ``gazette_msg`` (session): an :class:`interop_go.GazetteMsg` running the
  ``gazette-msg`` binary, built by ``go/build.sh`` on first use. Tests using
  it are skipped when ``go`` is not on PATH; a failed build fails them.
* ``gazette_rlog`` (session): an :class:`interop_go.GazetteRlog` running
  ``gazette-rlog`` (Go's recoverylog Recorder and Player), built alike.
* ``interop_cluster`` (module): one broker process over the session's etcd,
  under a fresh etcd root, killed and wiped at the end.
"""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Iterator

import interop_go
import pytest

from gazette.broker import testing
from gazette.keyspace import testing as ks_testing

__all__ = ["gazette_msg", "gazette_rlog", "interop_cluster"]


def _go_program(program: str) -> pathlib.Path:
    if shutil.which("go") is None:
        pytest.skip("`go` is not on PATH: the Go interop tests need a Go toolchain")
    try:
        return interop_go.build(program)
    except interop_go.BuildError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def gazette_msg() -> interop_go.GazetteMsg:
    return interop_go.GazetteMsg(_go_program("gazette-msg"))


@pytest.fixture(scope="session")
def gazette_rlog() -> interop_go.GazetteRlog:
    return interop_go.GazetteRlog(_go_program("gazette-rlog"))


@pytest.fixture(scope="module")
def interop_cluster(
    etcd_server: ks_testing.EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[testing.BrokerCluster]:
    with testing.running_cluster(
        etcd_server.endpoint, tmp_path_factory.mktemp("brokers"), brokers=1
    ) as cluster:
        yield cluster
