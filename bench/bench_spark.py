"""Spark benchmark: the ``gazette`` data source against ``spark.read.json`` on the same files.

On one broker (replication 1, a ``file://`` store), a JSON-lines journal of
``BENCH_SPARK_ROWS`` records of about 200 bytes is written in 16 MiB
fragments, per codec (NONE, then GZIP), and persisted. In one pyspark
``local[2]`` session, with the same payload schema given to both:

* ceiling: ``spark.read.schema(...).json(<the journal's store directory>)``,
  Spark's own JSON reader on the persisted fragment files;
* the data source: ``spark.read.format("gazette")`` on the same journal with
  ``tail=false`` (so exactly the persisted fragments, one partition each).

Each is materialised with the ``noop`` sink (every column of every row is
produced, nothing is written): twice to warm up, then best of three, the runs
of each alternating (with the arrow hand-off below). Figures are rows/s and the data source's ratio to the ceiling
(the aim: >= 1.0). The data source's rows carry ``_journal`` and ``_offset``
too, which ``spark.read.json``'s don't.

Where the time goes is printed under each codec's figures, as CPU time per
row, which a busy machine's neighbours disturb far less than wall time:

* ``cpu/row``: CPU of the JVM (every thread) and of its Python workers
  (the processes under it), per row of the timed runs (Linux ``/proc``);
* ``arrow hand-off``: a Python data source yielding the very batches the
  gazette source yields, made beforehand (memory-mapped Arrow files), so
  what is left is Spark's own cost of taking Python Arrow batches in;
* ``python stages``: the source's work per row in one process, by stage:
  fetching and decoding fragments, splitting lines (and their offsets),
  ``pyarrow.json`` parsing, assembling the output columns.

What it showed (issue 30; 600,000 rows, 2 cores shared with other jobs, load
6-13): the JVM spends 3.0-3.6 us/row in ``spark.read.json`` on NONE (5.4 on
GZIP, which it inflates in Java). Taking the same rows as Arrow batches from
Python costs it 1.4-2.0 us/row, plus 0.5-0.8 us/row in the Python worker to
hand them over: the arrow hand-off alone runs at 1.15-1.4x of
``spark.read.json`` on NONE. The source's own work is 1.3-1.5 us/row of
``pyarrow.json`` parsing (~150-180 MB/s per core, whatever its block size or
threads), 0.15-0.2 us/row of line splitting, ~0.2 us/row fetching a NONE
fragment (~0.5 inflating a GZIP one), and nothing measurable assembling
columns. Both halves are CPU-bound on the same two cores, so the source's
total (~4 us/row on NONE) stays above ``spark.read.json``'s: 0.68x on NONE,
0.85x on GZIP in that run. Reaching 1.0x would need a JSON parser about
three times faster than ``pyarrow.json`` (polars' ndjson reader was no
faster in a quick test here), or Spark taking Python's Arrow batches without converting them to
rows. Each query also plans in Python worker processes (listing journals and
fragments): ~0.25 s that ``spark.read.json``'s listing doesn't pay.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

ROWS = int(os.environ.get("BENCH_SPARK_ROWS", "600000"))
FRAGMENT = 16 << 20
SCHEMA = "id BIGINT, user STRING, score DOUBLE, tags ARRAY<STRING>, ts BIGINT, pad STRING"
RUNS = 3


def _records(n: int, seed: int) -> list[bytes]:
    """JSON lines of about 200 bytes, in appends of about 1 MiB."""
    rnd = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    out: list[bytes] = []
    chunk: list[bytes] = []
    size = 0
    for i in range(n):
        line = json.dumps(
            {
                "id": i,
                "user": rnd.randbytes(6).hex(),
                "score": round(rnd.random() * 1000, 4),
                "tags": [rnd.choice(words), rnd.choice(words)],
                "ts": 1_700_000_000 + rnd.getrandbits(20),
                "pad": "x" * rnd.randint(40, 80),
            }
        ).encode()
        chunk.append(line + b"\n")
        size += len(line) + 1
        if size >= 1 << 20:
            out.append(b"".join(chunk))
            chunk, size = [], 0
    if chunk:
        out.append(b"".join(chunk))
    return out


def _fill(c: Any, cluster: Any, journal: str, codec: int, appends: list[bytes]) -> int:
    """Create and fill ``journal``; wait for its fragments to persist. Returns persisted rows."""
    from gazette.broker import client, testing
    from gazette.broker import protocol as pb

    spec = testing.journal_spec(
        journal,
        stores=[cluster.store_url],
        codec=codec,
        length=FRAGMENT,
        labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES), ("bench", "spark")],
    )
    req = pb.ApplyRequest()
    req.changes.add().upsert.CopyFrom(spec)
    c.apply(req)
    deadline = time.monotonic() + 60
    while True:
        try:
            c.append(journal, b"")
            break
        except client.errors.ClientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    for data in appends:
        c.append(journal, data)
    while True:
        frags = [f.spec for f in c.fragments(journal)]
        if len(frags) > 1 and all(f.backing_store and f.mod_time for f in frags[:-1]):
            break
        if time.monotonic() > deadline + 120:
            raise TimeoutError(f"{journal} not persisted: {frags}")
        time.sleep(0.2)
    persisted_end = frags[-2].end
    return bytes(c.read(journal, 0, end_offset=persisted_end)).count(b"\n")


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far; 0 if it is gone."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = list(pathlib.Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _cpu(jvm: int) -> tuple[float, float]:
    """CPU seconds so far of the JVM and of the (live) Python processes under it."""
    python = 0.0
    stack = _children(jvm)
    while stack:
        pid = stack.pop()
        python += _proc_cpu(pid)
        stack += _children(pid)
    return _proc_cpu(jvm), python


def _best(dfs: dict[str, Any], jvm: int) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Best seconds of RUNS noop writes of each DataFrame, after two to warm up, and the
    mean CPU seconds (JVM, Python workers) of a run.

    Runs alternate between the DataFrames, so a noisy neighbour or the JIT
    warming up weighs on both alike.
    """
    for df in dfs.values():
        for _ in range(2):
            df.write.format("noop").mode("overwrite").save()
    best = dict.fromkeys(dfs, float("inf"))
    cpu = dict.fromkeys(dfs, (0.0, 0.0))
    for _ in range(RUNS):
        for name, df in dfs.items():
            j0, p0 = _cpu(jvm)
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            best[name] = min(best[name], time.perf_counter() - t0)
            j1, p1 = _cpu(jvm)
            cj, cp = cpu[name]
            cpu[name] = (cj + (j1 - j0) / RUNS, cp + max(0.0, p1 - p0) / RUNS)
    return best, cpu


def _handoff_source(ddl: str) -> type:
    """A data source yielding the Arrow batches of files written beforehand (option
    ``paths``), memory-mapped: Spark's cost of taking batches from Python, alone.

    Made in a function: cloudpickle sends classes defined here by value, so the
    Python workers need not import the bench package.
    """
    import pyarrow as pa
    from pyspark.sql import datasource as ds

    class Part(ds.InputPartition):
        def __init__(self, path: str) -> None:
            super().__init__(path)
            self.path = path

    class Reader(ds.DataSourceReader):
        def __init__(self, paths: list[str]) -> None:
            self.paths = paths

        def partitions(self) -> list[ds.InputPartition]:
            return [Part(p) for p in self.paths]

        def read(self, partition: ds.InputPartition) -> Iterator[Any]:
            assert isinstance(partition, Part)
            with pa.memory_map(partition.path) as source:
                yield from pa.ipc.open_file(source).read_all().to_batches()

    class Handoff(ds.DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_arrow_handoff"

        def schema(self) -> str:
            return ddl

        def reader(self, schema: Any) -> ds.DataSourceReader:
            return Reader(self.options["paths"].split(","))

    return Handoff


def _profile_source(
    opts: Any, schema: Any, out_dir: pathlib.Path
) -> tuple[list[str], dict[str, float]]:
    """Read every partition of the source in this process: write its batches to Arrow
    files (for the hand-off source) and time its stages, in CPU seconds per row."""
    import pyarrow as pa

    from gazette.spark import jsonlines, reader

    rdr = reader.GazetteReader(opts, schema)
    parts = [p for p in rdr.partitions() if isinstance(p, reader.GazettePartition)]
    paths: list[str] = []
    for i, part in enumerate(parts):
        table = pa.Table.from_batches(list(rdr.read(part)))
        path = out_dir / f"part-{i}.arrow"
        with pa.ipc.new_file(str(path), table.schema) as w:
            w.write_table(table)
        paths.append(str(path))
    clock: Callable[[], float] = time.process_time
    stages = dict.fromkeys(("fetch", "lines", "parse", "columns"), 0.0)
    rows = 0
    for part in parts:  # After the pass above: imports and the store's setup are paid.
        piece = part.piece
        assert piece.fragment is not None
        builder = reader.RowBuilder(schema, part.journal, opts.mode, opts.corrupt_column)
        t0 = clock()
        chunks = list(reader.store_blocks(opts, piece.fragment, piece.begin))
        blocks = list(reader._line_blocks(chunks, piece.begin, opts.batch_bytes))
        stages["fetch"] += clock() - t0
        for offset, data in blocks:
            # Each stage timed on a block already read once, so that none of them pays
            # for first touching its memory.
            rows += sum(b.num_rows for b in builder.batches(offset, data))
            t0 = clock()
            jsonlines.line_starts(jsonlines.split_lines(data))
            t1 = clock()
            jsonlines.read(data, builder.json_schema)
            t2 = clock()
            for _ in builder.batches(offset, data):
                pass
            # batches() splits and parses too: the rest of its time is the columns'.
            stages["columns"] += (clock() - t2) - (t2 - t0)
            stages["lines"] += t1 - t0
            stages["parse"] += t2 - t1
    return paths, {k: max(0.0, v) / max(rows, 1) for k, v in stages.items()}


def _us(seconds_per_row: float) -> str:
    return f"{seconds_per_row * 1e6:.2f} us"


def main() -> None:
    from gazette.broker import client, testing
    from gazette.broker import protocol as pb
    from gazette.keyspace import testing as ks_testing

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from gazette import spark as gspark

    appends = _records(ROWS, seed=7)
    nbytes = sum(len(a) for a in appends)
    cache = pathlib.Path(".cache")
    with (
        tempfile.TemporaryDirectory(
            prefix="bench-spark-", dir=cache if cache.is_dir() else None
        ) as tmp,
        ks_testing.EtcdServer(work_dir=pathlib.Path(tmp) / "etcd") as etcd,
        testing.BrokerCluster(
            etcd.endpoint,
            work_dir=pathlib.Path(tmp) / "brokers",
            brokers=1,
            lease="10s",
            log_level="warn",
        ) as cluster,
        client.sync.Client(cluster[0].endpoint) as c,
    ):
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("bench-spark")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        gspark.register(spark)
        jvm = spark.sparkContext._gateway.proc.pid
        try:
            print(
                f"{ROWS} JSON records, {nbytes / 1e6:.0f} MB, in {FRAGMENT >> 20} MiB fragments"
                " (file:// store); spark local[2]",
                flush=True,
            )
            for name, codec in (("NONE", pb.NONE), ("GZIP", pb.GZIP)):
                journal = f"bench/spark-{name.lower()}"
                rows = _fill(c, cluster, journal, codec, appends)
                file_root = str(cluster.file_root.resolve())
                lake = gspark.lake_paths(
                    f"name={journal}", broker=cluster[0].endpoint, file_root=file_root
                )
                native = spark.read.schema(SCHEMA).json(list(lake.paths))
                source = (
                    spark.read.format("gazette")
                    .option("broker", cluster[0].endpoint)
                    .option("selector", f"name={journal}")
                    .option("file_root", file_root)
                    .option("schema", SCHEMA)
                    .option("tail", "false")
                    .load()
                )
                assert native.count() == rows, (native.count(), rows)
                assert source.count() == rows, (source.count(), rows)
                opts = gspark.SourceOptions.parse(
                    {
                        "broker": cluster[0].endpoint,
                        "selector": f"name={journal}",
                        "file_root": file_root,
                        "schema": SCHEMA,
                        "tail": "false",
                    }
                )
                out_dir = pathlib.Path(tmp) / f"arrow-{name.lower()}"
                out_dir.mkdir()
                paths, stages = _profile_source(opts, source.schema, out_dir)
                ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in source.schema)
                spark.dataSource.register(_handoff_source(ddl))
                handoff = (
                    spark.read.format("bench_arrow_handoff").option("paths", ",".join(paths)).load()
                )
                assert handoff.count() == rows, (handoff.count(), rows)
                best, cpu = _best({"native": native, "source": source, "handoff": handoff}, jvm)
                t_native = best["native"]
                labels = {
                    "native": "spark.read.json",
                    "source": "gazette source",
                    "handoff": "arrow hand-off",
                }
                for key, label in labels.items():
                    ratio = (
                        ""
                        if key == "native"
                        else f"   ({t_native / best[key]:.2f}x of spark.read.json)"
                    )
                    j, p = cpu[key]
                    print(
                        f"  {name:5s} {label:17s} {rows / best[key]:12,.0f} rows/s{ratio}\n"
                        f"  {'':5s} {'':17s} cpu/row: jvm {_us(j / rows)}, python {_us(p / rows)}",
                        flush=True,
                    )
                print(
                    f"  {name:5s} python stages/row: "
                    + ", ".join(f"{k} {_us(v)}" for k, v in stages.items()),
                    flush=True,
                )
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
