"""The ``gazette`` batch data source on real brokers, stores and pyspark local mode."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyspark.sql import datasource as ds
from pyspark.sql import types as st

from gazette.broker import protocol as pb
from gazette.broker.fragment import testing as fragment_testing
from gazette.keyspace import testing as ks_testing
from gazette.spark import jsonlines, options, reader

if TYPE_CHECKING:
    # Annotations only: several test directories have a conftest module.
    from conftest import Harness

JSON = [(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]
CODECS = {
    "none": pb.NONE,
    "gzip": pb.GZIP,
    "zstd": pb.ZSTANDARD,
    "snappy": pb.SNAPPY,
}  # GZIP_OFFLOAD_DECOMPRESSION needs a store that decodes: see the S3 test.


def records(journal: str, start: int, n: int) -> bytes:
    return b"".join(
        json.dumps({"i": i, "s": f"{journal}-{i}", "pad": "x" * (i % 7)}).encode() + b"\n"
        for i in range(start, start + n)
    )


def line_offsets(content: bytes, base: int = 0) -> list[int]:
    """Offset of every line of ``content``."""
    out, at = [], base
    for line in content.splitlines(keepends=True):
        out.append(at)
        at += len(line)
    return out


def fill(gz: Harness, journal: str, appends: int, per_append: int = 6) -> bytes:
    """Appends of JSON records; returns the journal's content."""
    for a in range(appends):
        gz.append(journal, records(journal, a * per_append, per_append))
    return gz.read(journal)


def load(spark: Any, opts: dict[str, str], schema: str | None = None) -> Any:
    reader = spark.read.format("gazette").options(**opts)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load()


def opened(path: Path) -> list[tuple[str, int, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        journal, begin, end = line.split()
        out.append((journal, int(begin), int(end)))
    return out


@pytest.mark.integration
def test_every_codec_with_offsets_and_inferred_schema(
    spark: Any, gz: Harness, tmp_path: Path
) -> None:
    contents: dict[str, bytes] = {}
    for name, codec in CODECS.items():
        journal = f"codecs/{name}"
        gz.create(journal, codec=codec, labels=[*JSON, ("suite", "codecs")])
        contents[journal] = fill(gz, journal, appends=12)
    for journal in contents:
        # Everything but the spool's last fragment is in the store by now (or soon).
        gz.wait_persisted(journal)

    trace = tmp_path / "opened"
    df = load(spark, gz.options(selector="suite=codecs", trace_opened=str(trace)))
    assert df.columns == ["i", "s", "pad", "_journal", "_offset"]
    assert dict(df.dtypes)["i"] == "bigint"
    rows = df.select("_journal", "_offset", "i", "s").collect()
    by_journal: dict[str, list[tuple[int, int, str]]] = {}
    for r in rows:
        by_journal.setdefault(r["_journal"], []).append((r["_offset"], r["i"], r["s"]))
    assert sorted(by_journal) == sorted(contents)
    for journal, content in contents.items():
        got = sorted(by_journal[journal])
        assert [o for o, _, _ in got] == line_offsets(content)
        assert [i for _, i, _ in got] == list(range(len(got)))
        assert all(s == f"{journal}-{i}" for _, i, s in got)
    # Persisted fragments of every codec were read from the store, not through brokers.
    assert {j for j, _, _ in opened(trace)} == set(contents)


def raw_lines(start: int, n: int) -> bytes:
    return b"".join(b"line-%04d-%s\n" % (i, b"y" * 40) for i in range(start, start + n))


HIVE = {
    "hive/date=2026-11-23/part=000": "us",
    "hive/date=2026-11-23/part=001": "eu",
    "hive/date=2026-11-24/part=000": "eu",
}


@pytest.fixture(scope="module")
def hive(gz: Harness) -> dict[str, bytes]:
    """Raw-lines journals with Hive-style names and a region label, several fragments each."""
    out = {}
    for journal, region in HIVE.items():
        gz.create(journal, labels=[("suite", "hive"), ("region", region)])
        for a in range(10):
            gz.append(journal, raw_lines(a * 10, 10))
        out[journal] = gz.read(journal)
    for journal in HIVE:
        gz.wait_persisted(journal)
    return out


@pytest.mark.integration
def test_hive_and_label_columns_of_raw_lines(
    spark: Any, gz: Harness, hive: dict[str, bytes]
) -> None:
    df = load(spark, gz.options(selector="suite=hive", labels="region"))
    assert df.columns == ["value", "_journal", "_offset", "date", "part", "region"]
    assert all(t == "string" for c, t in df.dtypes if c != "_offset")
    rows = df.collect()
    assert len(rows) == sum(c.count(b"\n") for c in hive.values())
    for r in rows:
        content = hive[r["_journal"]]
        line = content[r["_offset"] :].split(b"\n", 1)[0].decode()
        assert r["value"] == line
        _, date, part = r["_journal"].split("/")
        assert (r["date"], r["part"], r["region"]) == (
            date.split("=")[1],
            part.split("=")[1],
            HIVE[r["_journal"]],
        )
    assert {r["part"] for r in rows} == {"000", "001"}  # Strings: "000" stays "000".


@pytest.mark.integration
def test_filters_prune_journals_and_fragments(
    spark: Any, gz: Harness, hive: dict[str, bytes], tmp_path: Path
) -> None:
    def run(where: str, name: str) -> tuple[int, list[tuple[str, int, int]]]:
        trace = tmp_path / name
        df = load(
            spark, gz.options(selector="suite=hive", labels="region", trace_opened=str(trace))
        )
        return df.where(where).count(), opened(trace)

    target = "hive/date=2026-11-23/part=001"
    n, seen = run("date = '2026-11-23' AND part = '001'", "hive-columns")
    assert n == hive[target].count(b"\n")
    assert {j for j, _, _ in seen} == {target}

    n, seen = run("region = 'eu'", "label")
    assert {j for j, _, _ in seen} == {j for j, r in HIVE.items() if r == "eu"}

    n, seen = run(f"_journal IN ('{target}')", "journal")
    assert {j for j, _, _ in seen} == {target}

    # An _offset range inside one persisted fragment opens that fragment only.
    frags = [f for f in gz.fragments(target) if f.backing_store]
    second = frags[1]
    offsets = [o for o in line_offsets(hive[target]) if second.begin <= o < second.end]
    lo, hi = offsets[1], offsets[-2]
    n, seen = run(f"_journal = '{target}' AND _offset >= {lo} AND _offset <= {hi}", "offsets")
    assert n == len([o for o in offsets if lo <= o <= hi])
    assert seen == [(target, second.begin, second.end)]

    n, seen = run("date = '2030-01-01'", "nothing")
    assert (n, seen) == (0, [])

    # An _offset set keeps exactly its rows (the reader filters them; Spark doesn't again).
    picked = [offsets[0], offsets[2]]
    n, seen = run(f"_offset IN ({picked[0]}, {picked[1]}, 3)", "offset-set")
    wanted = {*picked, 3}
    assert n == sum(len(wanted & set(line_offsets(c))) for c in hive.values()) >= 2


@pytest.mark.integration
def test_explain_lists_the_filters_the_reader_applies(
    spark: Any, gz: Harness, hive: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    df = load(spark, gz.options(selector="suite=hive", labels="region")).where(
        "region = 'eu' AND _offset >= 100 AND value LIKE 'line-001%'"
    )
    # Spark's Python scans list pushed filters in the scan's details (explain's
    # "formatted" mode); the default mode shows them gone from the Filter above the scan.
    df.explain(mode="formatted")
    plan = capsys.readouterr().out
    assert "PushedFilters: [" in plan, plan
    pushed = plan[plan.index("PushedFilters: [") :].split("]")[0]
    assert "EqualTo(region,eu)" in pushed
    assert "GreaterThanOrEqual(_offset,100)" in pushed
    assert "value" not in pushed  # A payload filter stays Spark's.
    expected = sum(
        1
        for j, content in hive.items()
        if HIVE[j] == "eu"
        for o, line in zip(line_offsets(content), content.splitlines(), strict=True)
        if o >= 100 and line.startswith(b"line-001")
    )
    assert df.count() == expected > 0


@pytest.mark.integration
def test_live_tail_while_appends_continue(spark: Any, gz: Harness, tmp_path: Path) -> None:
    journal = "tail/live"
    gz.create(journal, labels=JSON)
    appended = [0]
    fill(gz, journal, appends=10)
    appended[0] = 10
    gz.wait_persisted(journal)
    before = gz.read(journal)

    stop = threading.Event()

    def writer() -> None:
        from gazette.broker import client

        with client.sync.Client(gz.broker) as c:
            while not stop.is_set():
                c.append(journal, records(journal, appended[0] * 6, 6))
                appended[0] += 1
                time.sleep(0.01)

    t = threading.Thread(target=writer, name="appender")
    t.start()
    try:
        trace = tmp_path / "opened"
        df = load(spark, gz.options(selector=f"name={journal}", trace_opened=str(trace)))
        rows = sorted((r["_offset"], r["i"]) for r in df.select("_offset", "i").collect())
    finally:
        stop.set()
        t.join()

    content = gz.read(journal)
    offsets = line_offsets(content)
    # A prefix of the journal as of planning: every record once, in order, none skipped.
    assert [o for o, _ in rows] == offsets[: len(rows)]
    assert [i for _, i in rows] == list(range(len(rows)))
    assert len(rows) >= before.count(b"\n")
    # Both halves were used: persisted fragments from the store, the rest from brokers.
    seen = opened(trace)
    assert seen and rows[-1][0] >= max(end for _, _, end in seen)


#: A driver program of the kind that printed grpc's "Event loop is closed" tracebacks:
#: a blocking client left with an unfinished read, then the data source in the same
#: process (the driver's own loop listing journals, and a Spark read).
QUIET_JOB = """
import sys
from pyspark.sql import SparkSession
from gazette import spark as gspark
from gazette.broker import client

broker, file_root, journal = sys.argv[1:4]
with client.sync.Client(broker) as c:
    chunks = c.read_chunks(journal, 0, block=True)
    next(chunks)  # Left unfinished: its RPC is open when the client closes.
lake = gspark.lake_paths(f"name={journal}", broker=broker, file_root=file_root)
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
gspark.register(spark)
df = (
    spark.read.format("gazette")
    .option("broker", broker)
    .option("file_root", file_root)
    .option("selector", f"name={journal}")
    .load()
)
print(len(lake.paths), df.count(), len(df.limit(1).collect()))
del chunks
spark.stop()
"""


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_read_prints_no_traceback(gz: Harness, tmp_path: Path) -> None:
    journal = "quiet/events"
    gz.create(journal, labels=JSON, codec=pb.GZIP)
    content = fill(gz, journal, appends=20)
    gz.wait_persisted(journal)
    script = tmp_path / "job.py"
    script.write_text(QUIET_JOB)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, str(script), gz.broker, gz.file_root, journal],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    paths, rows, first = (int(v) for v in done.stdout.split())
    assert paths >= 1 and rows == content.count(b"\n") and first == 1
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    assert "Event loop is closed" not in done.stderr


@pytest.mark.integration
def test_fragments_overlapping_after_failover_are_read_once(
    spark: Any, gz: Harness, tmp_path: Path
) -> None:
    journal = "overlap/j"
    gz.create(journal)
    for a in range(8):
        gz.append(journal, raw_lines(a * 10, 10))
    content = gz.read(journal)
    frags = [f for f in gz.wait_persisted(journal) if f.backing_store]
    # What a failed-over primary would have persisted: a fragment across two others.
    first, second = frags[0], frags[1]
    starts = line_offsets(content)
    begin = next(o for o in starts if o > first.begin)
    end = next(o for o in starts if o > second.begin)
    data = content[begin:end]
    name = f"{begin:016x}-{end:016x}-{hashlib.sha1(data).hexdigest()}.raw"
    (gz.journal_dir(journal) / name).write_bytes(data)
    deadline = time.monotonic() + 20
    while not any(f.begin == begin and f.end == end for f in gz.fragments(journal)):
        assert time.monotonic() < deadline, "the broker never listed the extra fragment"
        time.sleep(0.2)

    trace = tmp_path / "opened"
    df = load(spark, gz.options(selector=f"name={journal}", trace_opened=str(trace)))
    rows = sorted((r["_offset"], r["value"]) for r in df.collect())
    assert [o for o, _ in rows] == starts
    assert [v.encode() + b"\n" for _, v in rows] == content.splitlines(keepends=True)
    assert (journal, begin, end) in opened(trace)


@pytest.mark.integration
def test_s3_store_and_gzip_offload(
    spark: Any, gz: Harness, s3_bucket: fragment_testing.S3Bucket, tmp_path: Path
) -> None:
    contents = {}
    for name, codec in (("gzod", pb.GZIP_OFFLOAD_DECOMPRESSION), ("snappy", pb.SNAPPY)):
        journal = f"s3/{name}"
        gz.create(
            journal,
            codec=codec,
            labels=[*JSON, ("suite", "s3")],
            stores=[s3_bucket.store_url("frags/")],
        )
        contents[journal] = fill(gz, journal, appends=8)
        gz.wait_persisted(journal)
    assert any(k.endswith(".sz") for k in s3_bucket.object_keys())

    trace = tmp_path / "opened"
    df = load(
        spark,
        gz.options(selector="suite=s3", trace_opened=str(trace), schema="i INT, s STRING"),
    )
    assert df.dtypes == [
        ("i", "int"),
        ("s", "string"),
        ("_journal", "string"),
        ("_offset", "bigint"),
    ]
    rows = df.collect()
    for journal, content in contents.items():
        got = sorted((r["_offset"], r["i"]) for r in rows if r["_journal"] == journal)
        assert [o for o, _ in got] == line_offsets(content)
        assert [i for _, i in got] == list(range(len(got)))
    assert {j for j, _, _ in opened(trace)} == set(contents)


@pytest.mark.integration
def test_schema_given_to_the_reader(spark: Any, gz: Harness) -> None:
    journal = "typed/j"
    gz.create(journal, labels=JSON)
    gz.append(journal, b'{"i": 1, "t": "2026-11-23T10:00:00Z", "x": 1.5}\n{"i": 2}\n')
    df = load(
        spark,
        gz.options(selector=f"name={journal}"),
        schema="i INT, t TIMESTAMP, x DOUBLE, _offset BIGINT, _journal STRING",
    )
    rows = df.selectExpr("*", "CAST(t AS STRING) AS ts").orderBy("_offset").collect()
    assert [(r["i"], r["ts"], r["x"], r["_offset"], r["_journal"]) for r in rows] == [
        (1, "2026-11-23 10:00:00", 1.5, 0, journal),
        (2, None, None, 48, journal),
    ]


@pytest.mark.integration
def test_plain_lines_in_a_json_journal_are_corrupt_records_not_a_failed_read(
    spark: Any, gz: Harness
) -> None:
    # The README's first steps once appended plain lines to the ndjson journals.
    journal = "lenient/j"
    gz.create(journal, labels=JSON)
    gz.append(journal, b"hello\n" + b'{"n": 1}\n' + b"over http\n" + b'{"n": 2}\n')
    df = load(spark, gz.options(selector=f"name={journal}"))
    assert df.schema.names == ["n", "_corrupt_record", "_journal", "_offset"]
    rows = [(r["n"], r["_corrupt_record"]) for r in df.orderBy("_offset").collect()]
    assert rows == [(None, "hello"), (1, None), (None, "over http"), (2, None)]
    dropped = load(spark, gz.options(selector=f"name={journal}", mode="DROPMALFORMED"))
    assert "_corrupt_record" not in dropped.schema.names
    assert [r["n"] for r in dropped.orderBy("_offset").collect()] == [1, 2]
    with pytest.raises(Exception, match="option mode FAILFAST"):
        load(spark, gz.options(selector=f"name={journal}", mode="FAILFAST")).collect()


@pytest.mark.integration
def test_bad_inputs_are_clear_errors(spark: Any, gz: Harness, hive: dict[str, bytes]) -> None:
    def error(opts: dict[str, str]) -> str:
        with pytest.raises(Exception) as info:
            load(spark, opts).collect()
        return str(info.value)

    assert "unknown option 'selektor'" in error(gz.options(selektor="suite=hive"))
    assert "malformed label selector 'suite=hive,=x'" in error(gz.options(selector="suite=hive,=x"))
    assert "label selector 'suite=nope' matches no journal" in error(
        gz.options(selector="suite=nope")
    )
    down = f"http://127.0.0.1:{ks_testing.free_port()}"
    message = error(gz.options(selector="suite=hive", broker=down))
    assert f"cannot reach the Gazette broker at {down}" in message
    # Without file_root, file:// fragments are read through the brokers: the same rows.
    direct = load(spark, gz.options(selector="suite=hive")).orderBy("_journal", "_offset")
    brokered = load(spark, {"broker": gz.broker, "selector": "suite=hive"})
    assert brokered.orderBy("_journal", "_offset").collect() == direct.collect()
    # The unknown option is refused by the reader too, with a schema given (schema() not called).
    with pytest.raises(Exception, match="unknown option 'selektor'"):
        load(spark, gz.options(selector="suite=hive", selektor="x"), "value STRING").collect()


# -- Unit tests (no Spark session, no cluster) ---------------------------------------------


def test_options_are_parsed_and_checked() -> None:
    opts = options.SourceOptions.parse(
        {"selector": "topic=logs", "fileRoot": "/data", "LABELS": "region, topic", "tail": "false"}
    )
    assert (opts.selector, opts.file_root, opts.labels, opts.tail) == (
        "topic=logs",
        "/data",
        ("region", "topic"),
        False,
    )
    assert options.SourceOptions.parse({"path": "ab=c"}).selector == "ab=c"
    with pytest.raises(options.OptionError, match="unknown option 'fileroots'") as info:
        options.SourceOptions.parse({"selector": "ab=c", "fileroots": "/x"})
    assert info.value.option == "fileroots"
    with pytest.raises(options.OptionError, match="batch_bytes must be an integer"):
        options.SourceOptions.parse({"batch_bytes": "lots"})
    with pytest.raises(options.OptionError, match="format must be one of"):
        options.SourceOptions.parse({"format": "csv"})
    with pytest.raises(options.SelectorError, match="malformed label selector 'a in \\('"):
        options.SourceOptions.parse({"selector": "a in ("})
    sink = options.SourceOptions.parse({"journal": "x/{a}"}, extra=("journal",))
    assert sink.extra_option("journal") == "x/{a}"
    lenient = options.SourceOptions.parse({"bogus": "1"}, strict=False)
    with pytest.raises(
        options.OptionError, match=r"selector is required.*; unknown option 'bogus'"
    ):
        lenient.require_selector()


def test_constant_column_filters_prune_only_what_cannot_match() -> None:
    row = {"_journal": "a/date=1/part=0", "date": "1", "part": "0", "region": None}
    assert reader._eval(ds.EqualTo(("date",), "1"), row) is True
    assert reader._eval(ds.EqualTo(("date",), "2"), row) is False
    assert reader._eval(ds.In(("part",), ("0", "9")), row) is True
    assert reader._eval(ds.EqualTo(("region",), "us"), row) is False  # NULL = 'us' is not true
    assert reader._eval(ds.IsNull(("region",)), row) is True
    assert reader._eval(ds.StringStartsWith(("_journal",), "b/"), row) is False
    assert reader._eval(ds.Not(ds.EqualTo(("date",), "1")), row) is False
    assert reader._eval(ds.Not(ds.EqualTo(("date",), "2")), row) is None
    assert reader._eval(ds.EqualTo(("date",), 1), row) is None  # Typed otherwise: can't tell.
    assert reader._eval(ds.EqualTo(("payload",), "x"), row) is None
    assert reader._pushed_names([ds.In(("_journal",), ("b", "a"))]) == ["a", "b"]


def test_filters_applied_exactly_are_those_on_constant_columns_and_offsets() -> None:
    schema = st.StructType(
        [
            st.StructField("n", st.LongType()),
            st.StructField("_journal", st.StringType()),
            st.StructField("_offset", st.LongType()),
            st.StructField("date", st.StringType()),
            st.StructField("region", st.StringType()),
        ]
    )

    def journal(name: str) -> reader.Journal:
        return reader.Journal(
            name, True, pb.NONE, (), tuple(reader.hive_segments(name)), (("region", None),)
        )

    both = [journal("a/date=1"), journal("a/date=2")]
    exact = [
        ds.EqualTo(("_journal",), "a/date=1"),
        ds.In(("date",), ("1", "2")),
        ds.IsNull(("region",)),
        ds.StringStartsWith(("_journal",), "a/"),
        ds.GreaterThan(("_offset",), 10),
        ds.In(("_offset",), (1, 2)),
    ]
    for f in exact:
        assert reader._applies_exactly(f, schema, both), f
    not_exact = [
        ds.EqualTo(("n",), 1),  # A payload field.
        ds.EqualTo(("date",), 1),  # Not a string.
        ds.Not(ds.EqualTo(("date",), "1")),
        ds.In(("_offset",), (1, "2")),
        ds.StringStartsWith(("_offset",), "1"),
        ds.EqualTo(("_offset",), True),
    ]
    for f in not_exact:
        assert not reader._applies_exactly(f, schema, both), f
    # A segment one journal's name lacks is a payload field there: Spark checks it.
    assert not reader._applies_exactly(
        ds.EqualTo(("date",), "1"), schema, [*both, journal("a/other")]
    )


def test_offset_filters_become_a_range() -> None:
    r = reader._offset_range(
        [ds.GreaterThanOrEqual(("_offset",), 100), ds.LessThan(("_offset",), 200)]
    )
    assert (r.overlaps(0, 100), r.overlaps(0, 101), r.overlaps(199, 300), r.overlaps(200, 300)) == (
        False,
        True,
        True,
        False,
    )
    batch = pa.record_batch({"_offset": pa.array([99, 100, 150, 200], pa.int64())})
    assert r.restricts() and not reader._OffsetRange().restricts()
    assert [b.column(0).to_pylist() for b in r.filter([batch])] == [[100, 150]]
    r = reader._offset_range([ds.In(("_offset",), (5, 500))])
    assert (r.overlaps(0, 5), r.overlaps(0, 6), r.overlaps(6, 500), r.overlaps(500, 501)) == (
        False,
        True,
        False,
        True,
    )


def test_hive_segments_of_journal_names() -> None:
    assert reader.hive_segments("events/date=2026-11-23/part=000/x") == [
        ("date", "2026-11-23"),
        ("part", "000"),
    ]
    assert reader.hive_segments("a/=b/c=") == [("c", "")]


def test_rows_of_odd_blocks() -> None:
    journal = reader.Journal(
        "j/k=v", json=True, codec=pb.NONE, stores=(), hive=(("k", "v"),), labels=()
    )
    schema = st.StructType(
        [
            st.StructField("a", st.LongType()),
            st.StructField("_journal", st.StringType()),
            st.StructField("_offset", st.LongType()),
            st.StructField("k", st.StringType()),
        ]
    )
    data = b'{"a": 1}\n\n  \n{"a": 2, "b": "x"}\n{"a": 3}'  # Blank lines, no final newline.
    blocks = list(reader._line_blocks([data[:5], data[5:]], 1000, 4))
    assert [(o, b.size) for o, b in blocks] == [(1000, 32), (1032, 8)]
    rows = []
    for offset, block in blocks:
        for batch in reader.RowBuilder(schema, journal).batches(offset, block):
            rows.extend(batch.to_pylist())
    assert rows == [
        {"a": 1, "_journal": "j/k=v", "_offset": 1000, "k": "v"},
        {"a": 2, "_journal": "j/k=v", "_offset": 1013, "k": "v"},
        {"a": 3, "_journal": "j/k=v", "_offset": 1032, "k": "v"},
    ]
    (one,) = list(reader._line_blocks([data], 1000, 1 << 20))
    batches = list(reader.RowBuilder(schema, journal).batches(*one))
    assert [r["_offset"] for b in batches for r in b.to_pylist()] == [1000, 1013, 1032]

    lines = dataclasses.replace(journal, json=False)
    text = st.StructType([st.StructField("value", st.StringType()), *schema.fields[1:3]])
    (batch,) = reader.RowBuilder(text, lines).batches(0, pa.py_buffer(b"ok\n\n\xff!\n"))
    assert batch.to_pylist() == [
        {"value": "ok", "_journal": "j/k=v", "_offset": 0},
        {"value": "", "_journal": "j/k=v", "_offset": 3},
        {"value": "\ufffd!", "_journal": "j/k=v", "_offset": 4},
    ]


_MIXED = (
    b'{"a": 1}\n'
    b"hello\n"  # Not JSON.
    b"\n"
    b'{"a": "two"}\n'  # Not a BIGINT.
    b'{"a": 3}{"a": 4}\n'  # Two records on one line.
    b"[5]\n"  # Not an object.
    b'{"a": 6}\n'
)


def _mixed_rows(mode: str, with_corrupt: bool = True) -> list[dict[str, Any]]:
    journal = reader.Journal("m/j", json=True, codec=pb.NONE, stores=(), hive=(), labels=())
    fields = [st.StructField("a", st.LongType())]
    if with_corrupt:
        fields.append(st.StructField("_corrupt_record", st.StringType()))
    fields.append(st.StructField("_offset", st.LongType()))
    builder = reader.RowBuilder(st.StructType(fields), journal, mode)
    return [r for b in builder.batches(100, pa.py_buffer(_MIXED)) for r in b.to_pylist()]


def test_malformed_json_records_are_kept_dropped_or_fail_as_the_mode_says() -> None:
    assert _mixed_rows("PERMISSIVE") == [
        {"a": 1, "_corrupt_record": None, "_offset": 100},
        {"a": None, "_corrupt_record": "hello", "_offset": 109},
        {"a": None, "_corrupt_record": '{"a": "two"}', "_offset": 116},
        {"a": None, "_corrupt_record": '{"a": 3}{"a": 4}', "_offset": 129},
        {"a": None, "_corrupt_record": "[5]", "_offset": 146},
        {"a": 6, "_corrupt_record": None, "_offset": 150},
    ]
    # Without the column in the schema, a malformed record is a row of nulls (Spark's).
    assert [r["a"] for r in _mixed_rows("PERMISSIVE", with_corrupt=False)] == [
        1, None, None, None, None, 6,
    ]  # fmt: skip
    assert _mixed_rows("DROPMALFORMED", with_corrupt=False) == [
        {"a": 1, "_offset": 100},
        {"a": 6, "_offset": 150},
    ]
    with pytest.raises(options.ReadError, match=r"m/j at offset 100: .*option mode FAILFAST"):
        _mixed_rows("FAILFAST")
    # Only the corrupt-record column (a sample of nothing but plain lines infers that).
    journal = reader.Journal("m/j", json=True, codec=pb.NONE, stores=(), hive=(), labels=())
    only = st.StructType(
        [
            st.StructField("_corrupt_record", st.StringType()),
            st.StructField("_offset", st.LongType()),
        ]
    )
    builder = reader.RowBuilder(only, journal)
    rows = [
        r
        for b in builder.batches(0, pa.py_buffer(b'hello\n{"a": 1}\nworld\n'))
        for r in b.to_pylist()
    ]
    assert rows == [
        {"_corrupt_record": "hello", "_offset": 0},
        {"_corrupt_record": None, "_offset": 6},
        {"_corrupt_record": "world", "_offset": 15},
    ]


def test_bisecting_a_block_finds_each_malformed_line() -> None:
    lines = [b'{"n": %d}' % i for i in range(1000)]
    for bad in (0, 517, 999):
        lines[bad] = b"oops"
    data = pa.py_buffer(b"\n".join(lines) + b"\n")
    split = reader._split_lines(data)
    calls = 0

    def parse(b: pa.Buffer) -> pa.Table:
        nonlocal calls
        calls += 1
        return jsonlines.read(b)

    got = jsonlines.salvage(data, split, reader._starts(split).to_pylist(), parse)
    assert got.malformed == (0, 517, 999)
    assert sum(t.num_rows for t in got.tables) == 997
    assert calls < 3 * 2 * 11, calls  # ~2 log2(1000) per bad line, not one per line.


def test_options_mode_and_corrupt_column() -> None:
    opts = options.SourceOptions.parse(
        {"mode": "dropMalformed", "columnNameOfCorruptRecord": "bad"}
    )
    assert (opts.mode, opts.corrupt_column) == ("DROPMALFORMED", "bad")
    assert options.SourceOptions.parse({}).mode == "PERMISSIVE"
    with pytest.raises(options.OptionError, match="mode must be one of PERMISSIVE") as info:
        options.SourceOptions.parse({"mode": "lenient"})
    assert info.value.option == "mode"
