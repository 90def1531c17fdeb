"""GZIP fragments our broker compresses (ISA-L, a gzip member per batch) served by Go's broker.

Our broker persists a journal whose appends each fill a compression batch,
so its GZIP fragment file is several gzip members written by ISA-L; a Go
broker given the same journal over the same ``file://`` root serves it to
Go's gazctl and ours, byte for byte (Go decodes it with its own gzip reader).
"""

from __future__ import annotations

import pathlib
import time
import uuid
import zlib
from collections.abc import Callable

import pytest
from go_gazette import GoBroker, go_gazctl, our_gazctl, store_fragments

from gazette.broker import testing
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.integration

SPEC = """
name: gzfrag/
replication: 1
labels:
- name: topic
  value: gzfrag
fragment:
  length: 67108864
  compression_codec: GZIP
  stores:
  - file:///
  refresh_interval: 1s
  flush_interval: 1h0m0s
children:
- name: gzfrag/big
"""
NAME = "gzfrag/big"


def _until(what: str, check: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting until {what}")
        time.sleep(0.2)


def _members(blob: bytes) -> int:
    n = 0
    while blob:
        d = zlib.decompressobj(wbits=31)
        d.decompress(blob)
        assert d.eof, "a truncated gzip member"
        blob = d.unused_data
        n += 1
    return n


def test_go_broker_serves_our_multi_member_gzip_fragment(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    store = tmp_path / "shared-fragments"
    store.mkdir()
    # Appends of 1.2 MB: each commit makes a compression batch, so a member (the first
    # append's fragment rolls on the next: a fragment of several members follows it).
    appends = [
        b"".join(b"append %d line %d %s\n" % (a, i, b"z" * (i % 90)) for i in range(20_000))[
            :1_200_000
        ]
        for a in range(3)
    ]
    content = b"".join(appends)
    go_root = f"/gazette/go-{uuid.uuid4().hex[:8]}"

    def go(endpoint: str, *args: str, **kw: object) -> object:
        return go_gazctl(go_bins, endpoint, *args, **kw)  # type: ignore[arg-type]

    try:
        with testing.running_cluster(
            etcd_server.endpoint, tmp_path / "py", brokers=1, file_root=store
        ) as cluster:
            ours = cluster[0].endpoint
            go(ours, "journals", "apply", input=SPEC.encode())
            _until(
                f"{NAME} is writable",
                lambda: (
                    go(
                        ours, "journals", "append", "-l", f"name={NAME}", input=b"", ok=False
                    ).returncode  # type: ignore[attr-defined]
                    == 0
                ),
            )
            for a in appends:
                go(ours, "journals", "append", "-l", f"name={NAME}", input=a)
            go(ours, "journals", "suspend", "-l", f"name={NAME}", "--force")
            _until(
                "the fragment is persisted",
                lambda: b"".join(f.content for f in store_fragments(store, NAME)) == content,
            )
        frags = store_fragments(store, NAME)  # Decoded and checked by the standard library.
        assert {f.codec for f in frags} == {"GZIP"}
        assert max(_members(f.path.read_bytes()) for f in frags) >= 2

        with GoBroker(
            go_bins,
            etcd_server.endpoint,
            go_root,
            zone="zone-go",
            suffix="go-broker-0",
            file_root=store,
            log_path=tmp_path / "go.log",
        ) as gb:
            go(gb.endpoint, "journals", "apply", input=SPEC.encode())
            _until(
                "Go's broker serves the fragment",
                lambda: (
                    go(gb.endpoint, "journals", "read", "-l", f"name={NAME}", ok=False).stdout  # type: ignore[attr-defined]
                    == content
                ),
            )
            assert our_gazctl(gb.endpoint, "journals", "read", "-l", f"name={NAME}").stdout == (
                content
            )
    finally:
        ks_testing.wipe_prefix(etcd_server.endpoint, go_root + "/")
