"""``lake_paths``: store URLs as Spark paths and Hadoop settings, and spark.read.json on them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from gazette.broker import protocol as pb
from gazette.spark import lake, options

if TYPE_CHECKING:
    # Annotations only: several test directories have a conftest module.
    from conftest import Harness

JSON = [(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]


def test_s3_store_urls_map_to_s3a_paths_and_bucket_settings() -> None:
    root, path, settings = lake.store_path(
        "s3://bucket/pre/fix/?endpoint=http://127.0.0.1:9000&region=eu-west-1",
        "events/date=2026-11-23",
    )
    assert (root, path) == ("s3a://bucket/pre/fix/", "s3a://bucket/pre/fix/events/date=2026-11-23/")
    assert settings == {
        "fs.s3a.bucket.bucket.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.bucket.bucket.path.style.access": "true",
        "fs.s3a.bucket.bucket.connection.ssl.enabled": "false",
        "fs.s3a.bucket.bucket.endpoint.region": "eu-west-1",
        "fs.s3a.bucket.bucket.aws.credentials.provider": (
            "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
        ),
    }
    _, path, settings = lake.store_path("s3://b/?profile=ops&find=old/&replace=new/", "old/j")
    assert path == "s3a://b/new/j/"
    assert settings == {
        "fs.s3a.bucket.b.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.ProfileAWSCredentialsProvider"
        ),
        "fs.s3a.bucket.b.auth.profile.name": "ops",
    }


def test_file_and_other_store_urls() -> None:
    assert lake.store_path("file:///", "a/j", file_root="/data/root/") == (
        "file:///data/root/",
        "file:///data/root/a/j/",
        {},
    )
    assert lake.store_path("file:///sub/", "a/j", file_root="/data")[1] == "file:///data/sub/a/j/"
    assert lake.store_path("gs://b/p/", "a/j")[1] == "gs://b/p/a/j/"
    with pytest.raises(options.OptionError, match="pass file_root"):
        lake.store_path("file:///", "a/j")
    with pytest.raises(options.OptionError, match="no Spark path is known for azure://"):
        lake.store_path("azure://acct/container/", "a/j")


@pytest.mark.integration
def test_spark_reads_the_lake_with_partition_discovery(spark: Any, gz: Harness) -> None:
    persisted_lines = 0
    journals = {
        "lake/date=2026-11-23/part=000": pb.GZIP,
        "lake/date=2026-11-24/part=001": pb.ZSTANDARD,
        "lake/date=2026-11-24/part=002": pb.NONE,
    }
    for journal, codec in journals.items():
        gz.create(journal, codec=codec, labels=[*JSON, ("suite", "lake")])
        for a in range(6):
            gz.append(
                journal,
                b"".join(json.dumps({"i": a * 5 + k}).encode() + b"\n" for k in range(5)) * 8,
            )
        content = gz.read(journal)
        last = max(f.end for f in gz.wait_persisted(journal) if f.backing_store)
        persisted_lines += content[:last].count(b"\n")

    lp = lake.lake_paths("suite=lake", broker=gz.broker, file_root=gz.file_root)
    assert lp.journals == tuple(sorted(journals))
    assert lp.unreadable == ()
    assert lp.base_path == f"file://{gz.file_root}/lake/"
    assert lp.paths == tuple(f"file://{gz.file_root}/{j}/" for j in sorted(journals))
    assert lp.spark_conf() == {"spark.sql.sources.partitionColumnTypeInference.enabled": "false"}

    for key, value in lp.spark_conf().items():
        spark.conf.set(key, value)
    df = spark.read.option("basePath", lp.base_path).json(list(lp.paths))
    assert sorted(df.columns) == ["date", "i", "part"]
    assert df.count() == persisted_lines
    parts = {r["part"] for r in df.select("part").distinct().collect()}
    assert parts == {"000", "001", "002"}  # Strings, not the integers 0, 1, 2.


@pytest.mark.integration
def test_snappy_journals_are_warned_about(gz: Harness) -> None:
    gz.create("lake-sz/j", codec=pb.SNAPPY, labels=[("suite", "lake-sz")])
    with pytest.warns(lake.UnreadableByHadoopWarning, match="SNAPPY.*lake-sz/j"):
        lp = lake.lake_paths("suite=lake-sz", broker=gz.broker, file_root=gz.file_root)
    assert lp.unreadable == ("lake-sz/j",)


@pytest.mark.integration
def test_lake_paths_errors(gz: Harness) -> None:
    with pytest.raises(options.SelectorError, match="malformed label selector"):
        lake.lake_paths("a in (", broker=gz.broker)
    with pytest.raises(options.NoJournalsError, match="matches no journal"):
        lake.lake_paths("suite=none-such", broker=gz.broker)
