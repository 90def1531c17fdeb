"""Fixtures of the Spark tests: one SparkSession and one broker cluster per test module.

``spark`` is pyspark in local mode (``local[2]``) on the machine's Java, with
the ``gazette`` format registered; its Python workers run this interpreter.
``cluster`` is two real broker processes over the session's etcd, whose
environment reaches the session's moto S3 server. ``gz`` (a :class:`Harness`)
creates journals, appends and waits for fragments to be persisted.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.fragment import testing as fragment_testing
from gazette.broker.fragment.testing import s3_bucket, s3_server
from gazette.keyspace import testing as ks_testing

__all__ = ["Harness", "cluster", "gz", "s3_bucket", "s3_server", "spark"]


@pytest.fixture(scope="module")
def spark(s3_server: fragment_testing.S3Server) -> Iterator[Any]:
    """A local[2] SparkSession with ``gazette`` registered (S3 credentials in its environment)."""
    # Requested first: the JVM and its Python workers inherit the credentials from os.environ.
    del s3_server
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from gazette import spark as gspark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("gazette-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    gspark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def cluster(
    etcd_server: ks_testing.EtcdServer,
    s3_server: fragment_testing.S3Server,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[testing.BrokerCluster]:
    """Two brokers in two zones under a fresh etcd root; killed and wiped afterwards."""
    root = f"/gazette/spark-test-{uuid.uuid4().hex[:8]}"
    c = testing.BrokerCluster(
        etcd_server.endpoint,
        work_dir=tmp_path_factory.mktemp("brokers"),
        brokers=2,
        etcd_prefix=root,
        env=dict(s3_server.env),
        log_level="warn",
    )
    try:
        c.start()
        yield c
    finally:
        c.kill_all()
        ks_testing.wipe_prefix(etcd_server.endpoint, root + "/")


class Harness:
    """Journals of one test module's cluster, through the blocking client."""

    def __init__(self, cluster: testing.BrokerCluster) -> None:
        self.cluster = cluster
        self.broker = cluster[0].endpoint
        self.file_root = str(cluster.file_root)
        self.client = client.sync.Client(self.broker)

    def close(self) -> None:
        self.client.close()

    def options(self, **more: str) -> dict[str, str]:
        return {"broker": self.broker, "file_root": self.file_root, **more}

    def create(
        self,
        name: str,
        *,
        codec: int = pb.NONE,
        labels: Iterable[tuple[str, str]] = (),
        stores: Iterable[str] = (),
        length: int = 1024,
    ) -> None:
        spec = testing.journal_spec(
            name,
            stores=list(stores) or [self.cluster.store_url],
            codec=codec,
            length=length,
            labels=labels,
        )
        req = pb.ApplyRequest()
        req.changes.add().upsert.CopyFrom(spec)
        resp = self.client.apply(req)
        assert resp.status == pb.OK, resp
        deadline = time.monotonic() + 30
        while True:
            try:
                self.client.append(name, b"")
                return
            except client.errors.ClientError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def append(self, name: str, content: bytes) -> pb.AppendResponse:
        return self.client.append(name, content)

    def read(self, name: str) -> bytes:
        return self.client.read(name)

    def fragments(self, name: str) -> list[pb.Fragment]:
        return [f.spec for f in self.client.fragments(name)]

    def wait_persisted(self, name: str, within: float = 20.0) -> list[pb.Fragment]:
        """Wait until every listed fragment but the spool's last one is persisted."""
        deadline = time.monotonic() + within
        while True:
            frags = self.fragments(name)
            if len(frags) > 1 and all(f.backing_store and f.mod_time for f in frags[:-1]):
                return frags
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: fragments not persisted: {frags}")
            time.sleep(0.2)

    def journal_dir(self, name: str) -> pathlib.Path:
        return pathlib.Path(self.file_root) / name


@pytest.fixture(scope="module")
def gz(cluster: testing.BrokerCluster) -> Iterator[Harness]:
    h = Harness(cluster)
    try:
        yield h
    finally:
        h.close()
