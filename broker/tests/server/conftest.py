"""Fixtures of the broker server's integration tests: real broker clusters over a real etcd.

A cluster fixture is module-scoped and lives under its own etcd root, so it
doesn't disturb the per-test ``etcd`` fixture's "etcd is empty" check: at tear
down the brokers are killed and every key under that root is deleted.
"""

from __future__ import annotations

import contextlib
import pathlib
import uuid
from collections.abc import Iterator

import pytest

from gazette.broker import testing
from gazette.broker.fragment.testing import S3Server, s3_bucket, s3_server
from gazette.keyspace import testing as ks_testing

__all__ = ["cluster", "cluster_factory", "make_cluster", "s3_bucket", "s3_server"]


@contextlib.contextmanager
def make_cluster(
    etcd_server: ks_testing.EtcdServer,
    work_dir: pathlib.Path,
    *,
    brokers: int = 4,
    env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[testing.BrokerCluster]:
    """A started cluster under a fresh etcd root; killed and wiped on exit."""
    root = f"/gazette/test-{uuid.uuid4().hex[:8]}"
    cluster = testing.BrokerCluster(
        etcd_server.endpoint,
        work_dir=work_dir,
        brokers=brokers,
        etcd_prefix=root,
        env=env,
        extra_args=extra_args,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_all()
        ks_testing.wipe_prefix(etcd_server.endpoint, root + "/")


@pytest.fixture(scope="module")
def cluster(
    etcd_server: ks_testing.EtcdServer,
    s3_server: S3Server,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[testing.BrokerCluster]:
    """Four brokers in two zones, able to reach the session's S3 server."""
    with make_cluster(
        etcd_server, tmp_path_factory.mktemp("brokers"), brokers=4, env=dict(s3_server.env)
    ) as c:
        yield c


@pytest.fixture
def cluster_factory() -> object:
    """:func:`make_cluster`, for tests that need a cluster of their own."""
    return make_cluster
