"""Fixtures of the broker server's integration tests: real broker clusters over a real etcd.

A cluster fixture is module-scoped and lives under its own etcd root, so it
doesn't disturb the per-test ``etcd`` fixture's "etcd is empty" check: at tear
down the brokers are killed and every key under that root is deleted.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator

import pytest

from gazette.broker import testing
from gazette.broker.fragment.testing import S3Server, s3_bucket, s3_server
from gazette.keyspace import testing as ks_testing

__all__ = ["cluster", "cluster_factory", "make_cluster", "s3_bucket", "s3_server"]


def make_cluster(
    etcd_server: ks_testing.EtcdServer,
    work_dir: pathlib.Path,
    **options: object,
) -> contextlib.AbstractContextManager[testing.BrokerCluster]:
    """A started cluster under a fresh etcd root; killed and wiped on exit."""
    options.setdefault("brokers", 4)
    return testing.running_cluster(etcd_server.endpoint, work_dir, **options)


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
