"""Test seam: a real S3 server (moto) on a free loopback port, and buckets in it.

The server runs as its own process (``python -m moto.server``), so its threads
and warnings stay out of the test process and broker processes under test can
reach it too. Use the pytest fixtures by importing them into a ``conftest.py``::

    from gazette.broker.fragment.testing import s3_bucket, s3_server  # noqa: F401

    @pytest.mark.integration
    async def test_upload(s3_bucket):
        url = s3_bucket.store_url("fragments/")   # s3://<bucket>/fragments/?endpoint=...
        store = stores.StoreRegistry().get(url)

``s3_server`` is session-scoped; ``s3_bucket`` creates a fresh bucket per test
and deletes it (and everything in it) afterwards. Both set the dummy AWS
credentials moto accepts in ``os.environ`` while they live; ``S3Server.env``
holds them for child processes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gazette.keyspace import testing as ks_testing

REGION = "us-east-1"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    # Keep any developer ~/.aws profile out of tests.
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


@dataclass
class S3Server:
    """A running moto S3 server at ``endpoint`` (``http://127.0.0.1:<port>``)."""

    endpoint: str
    process: subprocess.Popen[bytes]
    env: dict[str, str] = field(default_factory=lambda: dict(CREDENTIALS))

    def client(self) -> Any:
        """A boto3 S3 client of this server (path-style, as the store uses)."""
        import boto3
        import botocore.config

        return boto3.session.Session(
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=REGION,
        ).client(
            "s3",
            endpoint_url=self.endpoint,
            config=botocore.config.Config(s3={"addressing_style": "path"}),
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@contextlib.contextmanager
def run_s3_server(*, timeout: float = 30.0) -> Iterator[S3Server]:
    """Start moto's S3 server on a free loopback port; stop it on exit."""
    port = ks_testing.free_port()
    env = {**os.environ, **CREDENTIALS}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    server = S3Server(endpoint=f"http://127.0.0.1:{port}", process=proc)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(server.endpoint + "/moto-api/", timeout=1):
                    break
            except urllib.error.HTTPError:
                break  # Answering at all means it is up.
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"moto server not up within {timeout}s") from None
                time.sleep(0.1)
        yield server
    finally:
        server.stop()


@dataclass
class S3Bucket:
    """A bucket of an :class:`S3Server`."""

    server: S3Server
    name: str

    def store_url(self, prefix: str = "") -> str:
        """The FragmentStore URL of ``prefix`` (ending in '/' or empty) in this bucket."""
        query = urllib.parse.urlencode({"endpoint": self.server.endpoint, "region": REGION})
        return f"s3://{self.name}/{prefix}?{query}"

    def object_keys(self) -> list[str]:
        client = self.server.client()
        out: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.name):
            out.extend(obj["Key"] for obj in page.get("Contents", ()))
        return out


@contextlib.contextmanager
def _credentials_env() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def make_bucket(server: S3Server) -> Iterator[S3Bucket]:
    """A fresh, uniquely named bucket; emptied and deleted on exit."""
    client = server.client()
    name = f"gazette-test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    bucket = S3Bucket(server, name)
    try:
        yield bucket
    finally:
        for key in bucket.object_keys():
            client.delete_object(Bucket=name, Key=key)
        client.delete_bucket(Bucket=name)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server for the whole test session."""
    with _credentials_env(), run_s3_server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[S3Bucket]:
    """A fresh bucket of ``s3_server``, deleted with its objects after the test."""
    with _credentials_env(), make_bucket(s3_server) as bucket:
        yield bucket
