"""Hadoop's gzip reads GZIP fragment files as our broker writes them: several ISA-L members.

The primary compresses a spool batch by batch and ends a gzip member per
batch, so a fragment file is a concatenation of members. Spark's native path
(``spark.read.json`` over fragment files) decodes them with Hadoop's
``GzipCodec``; it must read every member, not just the first.
"""

from __future__ import annotations

import json
import pathlib
import zlib
from typing import Any

import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import codecs

pytestmark = pytest.mark.integration


def test_hadoop_reads_every_member_of_a_gzip_fragment(spark: Any, tmp_path: pathlib.Path) -> None:
    batches = [
        b"".join(json.dumps({"batch": b, "i": i}).encode() + b"\n" for i in range(2000))
        for b in range(4)
    ]
    c = codecs.new_compressor(pb.GZIP)
    blob = b"".join(c.compress(batch) + c.close() for batch in batches)
    members, rest = 0, blob
    while rest:
        d = zlib.decompressobj(wbits=31)
        d.decompress(rest)
        rest, members = d.unused_data, members + 1
    assert members == len(batches)

    path = tmp_path / "journal" / "0000000000000000-0000000000000000-0.gz"
    path.parent.mkdir()
    path.write_bytes(blob)
    df = spark.read.json(f"file://{path}")
    assert df.count() == 4 * 2000
    per_batch = {r["batch"]: r["count"] for r in df.groupBy("batch").count().collect()}
    assert per_batch == {0: 2000, 1: 2000, 2: 2000, 3: 2000}
