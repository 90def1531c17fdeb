"""Streaming reads of the ``gazette`` data source on real brokers and pyspark local mode."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set
from gazette.keyspace import testing as ks_testing
from gazette.spark import options, reader, stream

if TYPE_CHECKING:
    # Annotations only: several test directories have a conftest module.
    from conftest import Harness

JSON = [(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]
SCHEMA = "i BIGINT, s STRING, _journal STRING, _offset BIGINT"


def records(journal: str, start: int, n: int) -> bytes:
    return b"".join(
        json.dumps({"i": i, "s": f"{journal}-{i}"}).encode() + b"\n"
        for i in range(start, start + n)
    )


def fill(gz: Harness, journal: str, start: int, appends: int, per_append: int = 5) -> int:
    """Appends of records ``start..``; returns the next record number."""
    for a in range(appends):
        gz.append(journal, records(journal, start + a * per_append, per_append))
    return start + appends * per_append


def start_query(spark: Any, gz: Harness, out: Path, trigger: dict[str, Any], **more: str) -> Any:
    df = spark.readStream.format("gazette").options(**gz.options(**more)).schema(SCHEMA).load()
    return (
        df.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(**trigger)
        .start()
    )


def sink_rows(spark: Any, out: Path) -> list[tuple[str, int, int]]:
    rows = spark.read.schema(SCHEMA).parquet(str(out / "data")).collect()
    return sorted((r["_journal"], r["_offset"], r["i"]) for r in rows)


def expected(gz: Harness, *journals: str) -> list[tuple[str, int, int]]:
    out = []
    for j in journals:
        at = 0
        for line in gz.read(j).splitlines(keepends=True):
            out.append((j, at, json.loads(line)["i"]))
            at += len(line)
    return sorted(out)


def opened(path: Path) -> set[str]:
    return {line.split()[0] for line in path.read_text().splitlines()} if path.exists() else set()


@pytest.mark.integration
def test_restart_reads_exactly_the_new_rows_and_new_journals(
    spark: Any, gz: Harness, tmp_path: Path
) -> None:
    a, b, c = "stream/restart/a", "stream/restart/b", "stream/restart/c"
    labels = [*JSON, ("suite", "stream-restart")]
    gz.create(a, labels=labels)
    gz.create(b, labels=labels)
    na = fill(gz, a, 0, appends=30)  # Several fragments (1 KiB each), persisted below.
    nb = fill(gz, b, 0, appends=3)
    gz.wait_persisted(a)
    trace = tmp_path / "opened"
    opts = {"selector": "suite=stream-restart", "trace_opened": str(trace)}

    q = start_query(spark, gz, tmp_path, {"availableNow": True}, **opts)
    q.awaitTermination(60)
    assert q.exception() is None
    assert sink_rows(spark, tmp_path) == expected(gz, a, b)
    assert a in opened(trace)  # Persisted fragments were read from the store.

    # While the query is down: more rows, and a journal that starts to match.
    fill(gz, a, na, appends=4)
    fill(gz, b, nb, appends=2)
    gz.create(c, labels=labels)
    fill(gz, c, 0, appends=2)

    q = start_query(spark, gz, tmp_path, {"availableNow": True}, **opts)
    q.awaitTermination(60)
    assert q.exception() is None
    got = sink_rows(spark, tmp_path)
    assert len(got) == len(set(got))  # Nothing read twice...
    assert got == expected(gz, a, b, c)  # ...nothing skipped.


@pytest.mark.integration
def test_processing_time_trigger_follows_heads_and_the_selector(
    spark: Any, gz: Harness, tmp_path: Path
) -> None:
    x, y = "stream/live/x", "stream/live/y"
    labels = [*JSON, ("suite", "stream-live")]
    gz.create(x, labels=labels)
    nx = fill(gz, x, 0, appends=2)

    q = start_query(
        spark, gz, tmp_path, {"processingTime": "200 milliseconds"}, selector="suite=stream-live"
    )
    try:
        q.processAllAvailable()
        assert sink_rows(spark, tmp_path) == expected(gz, x)

        # Appends still in the broker's spool (no fragment persisted) are read from the head.
        nx = fill(gz, x, nx, appends=1)
        gz.create(y, labels=labels)  # Picked up from offset 0 while the query runs.
        fill(gz, y, 0, appends=2)
        wait_for(lambda: sink_rows(spark, tmp_path) == expected(gz, x, y), q)
        # Triggers without new content run no batch (the offsets compare equal).
        batches = len(list((tmp_path / "checkpoint" / "offsets").glob("[0-9]*")))
        time.sleep(1.0)
        assert len(list((tmp_path / "checkpoint" / "offsets").glob("[0-9]*"))) == batches

        # x stops matching the selector: its later rows are no longer read.
        before = expected(gz, x)
        relabel(gz, x, [*JSON, ("suite", "elsewhere")])
        time.sleep(1.0)  # A trigger or more with x gone.
        fill(gz, x, nx, appends=1)
        fill(gz, y, 10, appends=1)
        wait_for(lambda: sink_rows(spark, tmp_path) == sorted(before + expected(gz, y)), q)
    finally:
        q.stop()


def wait_for(check: Any, q: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert q.exception() is None, q.exception()
        assert time.monotonic() < deadline, "the stream did not catch up"
        time.sleep(0.3)


def relabel(gz: Harness, journal: str, labels: list[tuple[str, str]]) -> None:
    (current,) = gz.client.list(pb.LabelSelector(include=pb.label_set({"name": journal})))
    updated = pb.JournalSpec()
    updated.CopyFrom(current.spec)
    updated.labels.CopyFrom(pb.label_set(labels))
    req = pb.ApplyRequest()
    change = req.changes.add()
    change.expect_mod_revision = current.mod_revision
    change.upsert.CopyFrom(updated)
    assert gz.client.apply(req).status == pb.OK


@pytest.mark.integration
def test_starting_offsets_latest_skips_what_was_there(
    spark: Any, gz: Harness, tmp_path: Path
) -> None:
    journal = "stream/latest/a"
    gz.create(journal, labels=[*JSON, ("suite", "stream-latest")])
    n = fill(gz, journal, 0, appends=3)
    head = len(gz.read(journal))
    gz.create("stream/latest/empty", labels=[*JSON, ("suite", "stream-latest")])
    heads = stream.write_heads(
        options.SourceOptions.parse(gz.options()), [journal, "stream/latest/empty", "nope/x"]
    )
    assert heads == {journal: head, "stream/latest/empty": 0}  # A missing journal: no head.
    opts = {"selector": "suite=stream-latest", "starting_offsets": "latest"}
    q = start_query(spark, gz, tmp_path, {"availableNow": True}, **opts)
    q.awaitTermination(60)
    assert q.exception() is None
    fill(gz, journal, n, appends=2)
    q = start_query(spark, gz, tmp_path, {"availableNow": True}, **opts)
    q.awaitTermination(60)
    assert q.exception() is None
    assert sink_rows(spark, tmp_path) == [r for r in expected(gz, journal) if r[1] >= head]


@pytest.mark.integration
def test_bad_stream_options_are_clear_errors(spark: Any, gz: Harness, tmp_path: Path) -> None:
    gz.create("stream/errors/a", labels=[*JSON, ("suite", "stream-errors")])

    def error(**opts: str) -> str:
        q = start_query(spark, gz, tmp_path / str(len(opts)), {"availableNow": True}, **opts)
        with pytest.raises(Exception) as info:
            q.awaitTermination(60)
        return str(info.value)

    assert "unknown option 'selektor'" in error(selector="suite=stream-errors", selektor="x")
    assert "option starting_offsets must be one of" in error(
        selector="suite=stream-errors", starting_offsets="middle"
    )
    down = f"http://127.0.0.1:{ks_testing.free_port()}"
    assert f"cannot reach the Gazette broker at {down}" in error(
        selector="suite=stream-errors", broker=down
    )


# -- Unit tests (no Spark session, no cluster) ---------------------------------------------


def frag(begin: int, end: int, persisted: bool) -> cover_set.Fragment:
    spec = pb.Fragment(journal="j/a", begin=begin, end=end)
    if persisted:
        spec.backing_store = "file:///"
        spec.mod_time = 1
    return cover_set.Fragment(spec)


def test_plan_range_cuts_at_fragments() -> None:
    cs = cover_set.CoverSet([frag(0, 100, True), frag(100, 250, True), frag(250, 300, False)])

    def plan(begin: int, end: int) -> list[tuple[int, int, bool]]:
        return [
            (p.begin, p.end, p.fragment is not None)
            for p in stream.plan_range(cs, "j/a", begin, end)
        ]

    assert plan(0, 300) == [(0, 100, True), (100, 250, True), (250, 300, False)]
    # A persisted fragment that goes past the batch's end is cut there.
    assert plan(50, 180) == [(50, 100, True), (100, 180, True)]
    # Past the listing (appended since): from the brokers.
    assert plan(280, 400) == [(280, 300, False), (300, 400, False)]
    # Offsets no fragment covers (retention) are skipped.
    gap = cover_set.CoverSet([frag(100, 200, True)])
    assert [(p.begin, p.end) for p in stream.plan_range(gap, "j/a", 0, 200)] == [(100, 200)]


def test_stream_options() -> None:
    opts = stream.StreamOptions.parse({"selector": "topic=logs", "startingOffsets": "LATEST"})
    assert opts.starting_offsets == "latest"
    with pytest.raises(options.OptionError, match="selector is required"):
        stream.StreamOptions.parse({})
    with pytest.raises(options.OptionError, match="tail=false is for batch reads") as info:
        stream.StreamOptions.parse({"selector": "topic=logs", "tail": "false"})
    assert info.value.option == "tail"
    assert reader.Piece(0, 1).fragment is None
