"""Fixtures of the Go side-by-side tests: Gazette's own broker and gazctl beside ours.

* ``go_bins`` (session): the directory of Go's ``gazette`` and ``gazctl``
  (v0.103), built by ``go/build.sh`` on first use. Tests using it are skipped
  when ``go`` is not on PATH; a failed build fails them.
* ``go_broker`` (test): one Go broker under a fresh etcd root of the
  session's etcd, its ``file://`` root in the test's directory; killed and its
  keys wiped at the end.
"""

from __future__ import annotations

import pathlib
import shutil
import uuid
from collections.abc import Iterator

import go_gazette
import pytest

from gazette.keyspace import testing as ks_testing

__all__ = ["go_bins", "go_broker"]


@pytest.fixture(scope="session")
def go_bins() -> pathlib.Path:
    if shutil.which("go") is None:
        pytest.skip("`go` is not on PATH: the Go side-by-side tests need a Go toolchain")
    try:
        return go_gazette.build()
    except go_gazette.BuildError as e:
        pytest.fail(str(e))


@pytest.fixture
def go_broker(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> Iterator[go_gazette.GoBroker]:
    prefix = f"/gazette/go-{uuid.uuid4().hex[:8]}"
    broker = go_gazette.GoBroker(
        go_bins,
        etcd_server.endpoint,
        prefix,
        zone="zone-go",
        suffix="go-broker-0",
        file_root=tmp_path / "fragments",
        log_path=tmp_path / "go-broker.log",
    )
    try:
        with broker:
            yield broker
    finally:
        ks_testing.wipe_prefix(etcd_server.endpoint, prefix + "/")
