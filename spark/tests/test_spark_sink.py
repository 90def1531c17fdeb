"""The ``gazette`` sink (``df.write`` and ``writeStream``) on real brokers and pyspark local mode."""

from __future__ import annotations

import datetime
import decimal
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyspark.sql import types as st

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.keyspace import testing as ks_testing
from gazette.spark import options, sink

if TYPE_CHECKING:
    # Annotations only: several test directories have a conftest module.
    from conftest import Harness

JSON = [(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]


def lines(gz: Harness, journal: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gz.read(journal).splitlines()]


def runs(values: list[int]) -> int:
    """How many runs of equal consecutive values ``values`` has."""
    return sum(1 for i, v in enumerate(values) if i == 0 or values[i - 1] != v)


@pytest.mark.integration
def test_batch_round_trip_by_journal_column(spark: Any, gz: Harness) -> None:
    journals = ["sink/batch/x", "sink/batch/y"]
    for j in journals:
        gz.create(j, labels=[*JSON, ("suite", "sink-batch")])
    ts = datetime.datetime(2026, 11, 23, 10, 30, tzinfo=datetime.UTC)
    rows = [
        (journals[i % 2], i, f"name-{i}", ts, datetime.date(2026, 11, 23), decimal.Decimal("1.25"))
        for i in range(200)
    ]
    schema = "j STRING, id BIGINT, name STRING, ts TIMESTAMP, d DATE, amount DECIMAL(10,2)"
    df = spark.createDataFrame(rows, schema).repartition(3)
    (
        df.withColumn("task", spark_partition_id())
        .write.format("gazette")
        .mode("append")
        .options(**gz.options(journal_column="j"))
        .save()
    )
    for j in journals:
        got = lines(gz, j)
        assert sorted(r["id"] for r in got) == [r[1] for r in rows if r[0] == j]
        assert "j" not in got[0]  # The journal column routes rows; it isn't written.
        assert got[0]["ts"] == "2026-11-23T10:30:00Z"
        assert got[0]["d"] == "2026-11-23"
        assert got[0]["amount"] == "1.25"
        # One atomic append per journal per task: each task's rows are contiguous.
        tasks = [r["task"] for r in got]
        assert runs(tasks) == len(set(tasks)) <= 3

    back = (
        spark.read.format("gazette")
        .options(**gz.options(selector="suite=sink-batch"))
        .schema(
            "id BIGINT, name STRING, ts TIMESTAMP, d DATE, amount DECIMAL(10,2), _journal STRING"
        )
        .load()
        .collect()
    )
    assert sorted(
        (r["_journal"], r["id"], r["name"], r["ts"], r["d"], r["amount"]) for r in back
    ) == (sorted((j, i, n, t.replace(tzinfo=None), d, a) for j, i, n, t, d, a in rows))


def spark_partition_id() -> Any:
    from pyspark.sql import functions as F

    return F.spark_partition_id()


@pytest.mark.integration
def test_batch_by_template_makes_hive_partitions(spark: Any, gz: Harness) -> None:
    dates = ["2026-11-23", "2026-11-24"]
    for d in dates:
        for part in (0, 1):
            gz.create(f"sink/tpl/date={d}/part={part:03d}", labels=[*JSON, ("suite", "sink-tpl")])
    rows = [(dates[i % 2], i % 3 % 2, i) for i in range(60)]
    df = spark.createDataFrame(rows, "date STRING, part INT, id INT")
    df.write.format("gazette").mode("append").options(
        **gz.options(journal="sink/tpl/date={date}/part={part:03d}")
    ).save()
    back = (
        spark.read.format("gazette")
        .options(**gz.options(selector="suite=sink-tpl"))
        .schema("id INT, _journal STRING, date STRING, part STRING")
        .load()
        .collect()
    )
    assert sorted((r["date"], r["part"], r["id"]) for r in back) == sorted(
        (d, f"{p:03d}", i) for d, p, i in rows
    )


@pytest.mark.integration
def test_one_journal_for_every_row_and_the_save_mode(
    spark: Any, gz: Harness, tmp_path: Path
) -> None:
    journal = "sink/one/all"
    gz.create(journal, labels=JSON)
    df = spark.createDataFrame([(i, f"n{i}") for i in range(20)], "id INT, name STRING")
    df.repartition(2).write.format("gazette").mode("append").options(
        **gz.options(journal=journal)
    ).save()
    assert sorted(r["id"] for r in lines(gz, journal)) == list(range(20))
    assert set(lines(gz, journal)[0]) == {"id", "name"}

    # Spark's default save mode (ErrorIfExists) and ignore: the error names the fix.
    for writer in (df.write, df.write.mode("ignore")):
        with pytest.raises(options.OptionError, match=r'\.mode\("append"\)') as info:
            writer.format("gazette").options(**gz.options(journal=journal)).save()
        assert info.value.option == "mode"
    assert len(lines(gz, journal)) == 20
    # Other sources' errors pass through untouched.
    with pytest.raises(Exception, match="PATH_ALREADY_EXISTS") as other:
        df.write.format("parquet").save(str(tmp_path))
    assert not isinstance(other.value, options.OptionError)


@pytest.mark.integration
def test_missing_journal_and_bad_options_are_clear_errors(spark: Any, gz: Harness) -> None:
    gz.create("sink/errors/ok", labels=JSON)

    def error(df: Any, **opts: str) -> str:
        with pytest.raises(Exception) as info:
            df.write.format("gazette").mode("append").options(**gz.options(**opts)).save()
        return str(info.value)

    # One task (coalesce) with rows for an existing and a missing journal: nothing is appended.
    df = spark.createDataFrame(
        [("sink/errors/ok", 1), ("sink/errors/missing", 2)], "j STRING, id INT"
    ).coalesce(1)
    message = error(df, journal_column="j")
    assert "journal 'sink/errors/missing' does not exist" in message
    assert "creates no journals" in message
    assert gz.read("sink/errors/ok") == b""

    assert "exactly one of option journal (one journal" in error(df)
    assert "not both" in error(df, journal_column="j", journal="x/{j}")
    assert "option journal_column: no column 'jj'" in error(df, journal_column="jj")
    assert "column 'id' is int, not a string" in error(df, journal_column="id")
    assert "names {nope}, which is no column" in error(df, journal="sink/{nope}")
    assert "unknown option 'journalcolum'" in error(df, journalcolum="j")
    assert "append_timeout must be positive" in error(df, journal_column="j", append_timeout="0")
    down = f"http://127.0.0.1:{ks_testing.free_port()}"
    assert f"cannot reach the Gazette broker at {down}" in error(
        df, journal_column="j", broker=down
    )
    with pytest.raises(Exception, match="journals are append-only"):
        df.write.format("gazette").mode("overwrite").options(
            **gz.options(journal_column="j")
        ).save()

    gz.create("sink/errors/raw", labels=[(pb.LABEL_CONTENT_TYPE, "text/plain")])
    raw = spark.createDataFrame([("sink/errors/raw", 1)], "j STRING, id INT")
    assert "its content-type is 'text/plain'" in error(raw, journal_column="j")


def stream_query(
    spark: Any, gz: Harness, source: Path, checkpoint: Path, journal_template: str
) -> Any:
    df = (
        spark.readStream.format("json")
        .schema("id INT, name STRING, shard STRING")
        .option("maxFilesPerTrigger", 1)
        .load(str(source))
    )
    return (
        df.writeStream.format("gazette")
        .options(**gz.options(journal=journal_template))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def write_json_file(directory: Path, name: str, rows: list[dict[str, Any]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory.parent / f".{name}"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.rename(directory / name)


@pytest.mark.integration
def test_stream_round_trip_commits_each_batch_once(spark: Any, gz: Harness, tmp_path: Path) -> None:
    for shard in ("a", "b"):
        gz.create(f"sink/stream/{shard}", labels=JSON)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    # Three files, one per micro-batch, each with rows for both journals.
    expected: dict[str, list[int]] = {"a": [], "b": []}
    for f in range(3):
        rows = [{"id": f * 100 + i, "name": f"n{i}", "shard": "ab"[i % 2]} for i in range(20)]
        for r in rows:
            expected[r["shard"]].append(r["id"])
        write_json_file(source, f"f{f}.json", rows)

    q = stream_query(spark, gz, source, checkpoint, "sink/stream/{shard}")
    q.awaitTermination(60)
    assert q.exception() is None
    assert q.lastProgress["batchId"] == 2
    for shard in ("a", "b"):
        assert sorted(r["id"] for r in lines(gz, f"sink/stream/{shard}")) == sorted(expected[shard])

    # Batch 2 ran, but (as if the driver died before recording it) its commit is lost:
    # the restarted query runs batch 2 again, and the journals' registers skip its appends.
    (checkpoint / "commits" / "2").unlink()
    for crc in (checkpoint / "commits").glob(".2.crc"):
        crc.unlink()
    q = stream_query(spark, gz, source, checkpoint, "sink/stream/{shard}")
    q.awaitTermination(60)
    assert q.exception() is None
    assert q.lastProgress["batchId"] == 2  # Batch 2 was indeed run again.
    for shard in ("a", "b"):
        assert sorted(r["id"] for r in lines(gz, f"sink/stream/{shard}")) == sorted(expected[shard])

    # New input goes on as batch 3, appended once.
    write_json_file(source, "f3.json", [{"id": 999, "name": "late", "shard": "a"}])
    q = stream_query(spark, gz, source, checkpoint, "sink/stream/{shard}")
    q.awaitTermination(60)
    assert q.exception() is None
    assert sorted(r["id"] for r in lines(gz, "sink/stream/a")) == sorted([*expected["a"], 999])
    shutil.rmtree(checkpoint)


@pytest.mark.integration
def test_registers_make_a_task_append_at_most_once(gz: Harness) -> None:
    """The append of a re-run task (same query, partition and batch) is skipped."""
    journal = "sink/registers"
    gz.create(journal, labels=JSON)
    opts = sink.SinkOptions.parse(gz.options(journal_column="j"))
    schema = st.StructType(
        [st.StructField("j", st.StringType()), st.StructField("id", st.LongType())]
    )
    router = sink.JournalRouter(opts, schema)

    def batches(ids: list[int]) -> Any:
        import pyarrow as pa

        return iter([pa.RecordBatch.from_pylist([{"j": journal, "id": i} for i in ids])])

    name = sink.register_name("6f1c0d9e-1b7e-4c55-9c1e-3f3c1f2b8a11", 7)
    reg = sink._Registers(name, "4")
    first = sink._write(opts, router, batches([1, 2]), reg, 7)
    again = sink._write(opts, router, batches([1, 2]), reg, 7)
    other_task = sink._write(opts, router, batches([3]), sink._Registers(name[:-1] + "8", "4"), 8)
    next_batch = sink._write(opts, router, batches([4]), sink._Registers(name, "5"), 7)
    assert first.appends[0].begin >= 0 and first.appends[0].rows == 2
    assert again.appends[0].begin == -1  # Skipped: already committed.
    assert other_task.appends[0].begin >= 0
    assert next_batch.appends[0].begin >= 0
    assert [r["id"] for r in lines(gz, journal)] == [1, 2, 3, 4]

    # The register holds only the last batch of each task.
    resp = gz.append(journal, b"")
    regs = {(lb.name, lb.value) for lb in resp.registers.labels}
    assert (name, "5") in regs and (name, "4") not in regs


def test_sink_options_unit() -> None:
    with pytest.raises(options.OptionError, match="exactly one of") as info:
        sink.SinkOptions.parse({"broker": "http://x"})
    assert info.value.option == "journal"
    schema = st.StructType(
        [st.StructField("date", st.DateType()), st.StructField("n", st.IntegerType())]
    )
    router = sink.JournalRouter(
        sink.SinkOptions.parse({"journal": "ev/date={date}/n={n:03d}"}), schema
    )
    assert (
        router.journal({"date": datetime.date(2026, 11, 23), "n": 7}) == "ev/date=2026-11-23/n=007"
    )
    with pytest.raises(options.OptionError, match="column 'n' is null"):
        router.journal({"date": datetime.date(2026, 11, 23), "n": None})
    # A journal without fields is one journal for every row, as the Kafka sink's topic.
    one = sink.JournalRouter(sink.SinkOptions.parse({"journal": "ev/all"}), schema)
    assert one.journal({"date": None, "n": 1}) == "ev/all"
    assert one.columns == ["date", "n"]
    with pytest.raises(options.OptionError, match="bad template"):
        sink.JournalRouter(sink.SinkOptions.parse({"journal": "ev/{date"}), schema)
    assert sink.encode_row({"b": b"\x00\x01", "m": {"k": 1}, "x": None}) == (
        b'{"b":"AAE=","m":{"k":1},"x":null}\n'
    )
    assert client.errors.RegisterMismatch  # The status the skip path relies on exists.
