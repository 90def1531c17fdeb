"""``examples/spark_daily_counts/job.py``, run as-is by spark-submit, against S3 (moto) over s3a://.

The job runs in its own ``spark-submit --master local[2]`` process (as the
Kubernetes Job runs it, with the S3A jars on its class path and the bucket's
settings as ``--conf``), not in this module's SparkSession: Spark fixes a
JVM's class path when it starts. Its journals live in a moto bucket; it
writes its Parquet to the same bucket over ``s3a://``, which this test reads
back with boto3 and pyarrow, and compares to the records it appended.

The two runs (``--source lake`` and ``--source gazette``) go at once. The S3A
jars (hadoop-aws, the AWS SDK bundle, analyticsaccelerator-s3: ~690 MB) are
fetched once into ``~/.cache/gazette/spark-jars`` by ``spark/jars/fetch.py``;
hence the generous timeout of a first run. Once cached the module takes 1 to
2 minutes (85-125 s on a busy 2-CPU machine), most of it two JVMs starting.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import importlib.util
import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

from gazette.broker import protocol as pb
from gazette.broker.fragment import testing as fragment_testing

if TYPE_CHECKING:
    # Annotations only: several test directories have a conftest module.
    from conftest import Harness

REPO = pathlib.Path(__file__).resolve().parents[2]
JOB = REPO / "examples" / "spark_daily_counts" / "job.py"
FETCH = REPO / "spark" / "jars" / "fetch.py"
#: One spark-submit of the job (JVM start, planning, the job, the Parquet commit).
JOB_TIMEOUT = 240.0

JSON = [(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]
# Hadoop-readable codecs only: the lake run reads these files with Spark's own JSON reader.
JOURNALS = {
    "daily/date=2026-11-23/part=000": ("us", pb.GZIP),
    "daily/date=2026-11-23/part=001": ("us", pb.ZSTANDARD),
    "daily/date=2026-11-23/part=002": ("eu", pb.NONE),
    "daily/date=2026-11-24/part=000": ("eu", pb.GZIP),
}


#: Journal -> its records, as appended.
Records = dict[str, list[dict[str, Any]]]


def _load_fetch() -> types.ModuleType:
    """``spark/jars/fetch.py``, a script rather than a package module (it runs in image builds)."""
    name = "gazette_spark_jars_fetch"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FETCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: dataclasses look their module up while it is being defined.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def s3a_jars() -> list[pathlib.Path]:
    """hadoop-aws, the AWS SDK bundle and analyticsaccelerator-s3, from the cache (downloaded
    on a fresh machine, or a clear failure offline)."""
    fetch = _load_fetch()
    try:
        jars: list[pathlib.Path] = fetch.fetch()
    except fetch.FetchError as e:
        pytest.fail(f"the s3a:// jars are missing and could not be fetched: {e}")
    return jars


def records(journal: str, start: int, n: int) -> bytes:
    """JSON lines whose ``ts`` (ISO, UTC-3) falls on the journal's date or, late, the next UTC day."""
    date = journal.split("/")[1].split("=")[1]
    out = []
    for i in range(start, start + n):
        ts = f"{date}T{(i * 7) % 24:02d}:{i % 60:02d}:00-03:00"
        out.append(json.dumps({"i": i, "ts": ts, "pad": "x" * (i % 11)}).encode() + b"\n")
    return b"".join(out)


def utc_day(ts: str) -> str:
    return datetime.datetime.fromisoformat(ts).astimezone(datetime.UTC).date().isoformat()


def persist_everything(gz: Harness, journal: str, within: float = 30.0) -> bytes:
    """Roll the journal's spool into the store and wait until all its content is persisted.

    The lake run reads persisted fragments only. The spool is longer than the
    spec's fragment length, so an empty append rolls it: its content goes to
    the persister and the new spool holds nothing.
    """
    gz.append(journal, b"")
    content = gz.read(journal)
    deadline = time.monotonic() + within
    while True:
        frags = gz.fragments(journal)
        persisted = max((f.end for f in frags if f.backing_store and f.mod_time), default=0)
        if persisted == len(content):
            return content
        if time.monotonic() > deadline:
            raise TimeoutError(f"{journal}: {persisted} of {len(content)} bytes persisted: {frags}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def appended(gz: Harness, s3_server: fragment_testing.S3Server) -> Iterator[tuple[str, Records]]:
    """The journals, in a bucket of their own, and their records (parsed back from the brokers)."""
    with fragment_testing.make_bucket(s3_server) as bucket:
        store = bucket.store_url("fragments/")
        contents: Records = {}
        for journal, (region, codec) in JOURNALS.items():
            gz.create(
                journal,
                codec=codec,
                labels=[*JSON, ("suite", "daily-counts"), ("region", region)],
                stores=[store],
            )
            # Each append (20 records, ~1.2 KiB) outgrows the 1 KiB fragment length, so the
            # next append, an empty one included, rolls the spool (persist_everything).
            for a in range(5):
                gz.append(journal, records(journal, a * 20, 20))
        for journal in JOURNALS:
            content = persist_everything(gz, journal)
            contents[journal] = [json.loads(line) for line in content.splitlines()]
        assert any(k.endswith(".zst") for k in bucket.object_keys())
        yield bucket.name, contents


def spark_submit(
    jars: Sequence[pathlib.Path],
    s3: fragment_testing.S3Server,
    runs: Mapping[str, Sequence[str]],
    work: pathlib.Path,
) -> None:
    """Run job.py once per ``runs`` entry (name -> arguments), concurrently, each under
    ``spark-submit --master local[2]``; fail with the log's tail of any that fails."""
    s3a = {
        # What the Kubernetes Job's ConfigMap gives: where the output bucket is.
        "spark.hadoop.fs.s3a.endpoint": s3.endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": fragment_testing.REGION,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
        ),
    }
    conf = {
        **s3a,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "1g",
        # A short job on a small machine: C1 alone compiles enough, and spends far less CPU.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    }
    submit = [
        str(pathlib.Path(sys.executable).parent / "spark-submit"),
        "--master",
        "local[2]",
        # Local mode runs executors in the driver's JVM: its class path is enough, and saves
        # copying the 690 MB bundle into every run's scratch directory, as --jars would.
        "--driver-class-path",
        os.pathsep.join(str(j) for j in jars),
        *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")),
        str(JOB),
    ]
    env = {
        **os.environ,
        **s3.env,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    failed: list[str] = []
    try:
        for name, args in runs.items():
            with (work / f"{name}.log").open("wb") as log:
                # A session of its own: the JVM and its Python workers are killed together.
                procs[name] = subprocess.Popen(
                    [*submit, *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=work,
                    start_new_session=True,
                )
        deadline = time.monotonic() + JOB_TIMEOUT
        for name, proc in procs.items():
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            if rc != 0:
                tail = (work / f"{name}.log").read_text(errors="replace")[-6000:]
                failed.append(f"spark-submit job.py {' '.join(runs[name])} exited {rc}:\n{tail}")
    finally:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    if failed:
        pytest.fail("\n\n".join(failed))


def read_counts(
    s3: fragment_testing.S3Server, bucket: str, prefix: str, keys: Sequence[str]
) -> dict[tuple[str, ...], int]:
    """(day, *keys) -> count of the job's Parquet output (``day=`` directories)."""
    client = s3.client()
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    names = [o["Key"] for o in listed.get("Contents", ())]
    # No _SUCCESS marker: dynamic partition overwrite commits through a staging directory.
    assert any(n.endswith(".parquet") for n in names), names
    out: dict[tuple[str, ...], int] = {}
    for name in names:
        if not name.endswith(".parquet"):
            continue
        day = name[len(prefix) :].split("/")[0]
        assert day.startswith("day="), name
        body = client.get_object(Bucket=bucket, Key=name)["Body"].read()
        table = pq.read_table(io.BytesIO(body))
        assert table.column_names == [*keys, "count"]
        for row in table.to_pylist():
            key = (day.removeprefix("day="), *(row[k] for k in keys))
            assert key not in out, key
            out[key] = row["count"]
    return out


@pytest.mark.integration
@pytest.mark.timeout(900)  # A fresh machine downloads the S3A jars first.
def test_daily_counts_job_over_s3a(
    s3a_jars: list[pathlib.Path],
    s3_server: fragment_testing.S3Server,
    appended: tuple[str, Records],
    gz: Harness,
    tmp_path: pathlib.Path,
) -> None:
    bucket, contents = appended
    common = ["--broker", gz.broker, "--selector", "suite=daily-counts"]
    lake_out, source_out = "counts/lake/", "counts/source/"
    # Both at once: most of a run is a JVM starting and Python workers importing.
    spark_submit(
        s3a_jars,
        s3_server,
        {
            # The lake: fragment files over s3a://, days from the date= segment, per part=.
            "lake": [
                *common,
                "--source",
                "lake",
                "--by",
                "part",
                "--output",
                f"s3a://{bucket}/{lake_out}",
            ],
            # The gazette data source: UTC days of the records' ts field, per region label.
            "source": [
                *common,
                "--day",
                "ts",
                "--schema",
                "i BIGINT, ts STRING, pad STRING",
                "--label",
                "region",
                "--output",
                f"s3a://{bucket}/{source_out}",
            ],
        },
        tmp_path,
    )

    by_part = collections.Counter(
        {
            (j.split("/")[1].removeprefix("date="), j.split("/")[2].removeprefix("part=")): len(
                recs
            )
            for j, recs in contents.items()
        }
    )
    assert read_counts(s3_server, bucket, lake_out, ["part"]) == by_part

    by_region = collections.Counter(
        (utc_day(r["ts"]), JOURNALS[j][0]) for j, recs in contents.items() for r in recs
    )
    got = read_counts(s3_server, bucket, source_out, ["region"])
    assert got == by_region
    assert len({day for day, _ in got}) == 3  # Late records spill into the next UTC day.


def test_help_and_argument_errors() -> None:
    run = [sys.executable, str(JOB)]
    out = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60, check=True)
    for flag in ("--selector", "--output", "--source", "--day", "--label", "--by", "--where"):
        assert flag in out.stdout
    assert "PYSPARK_PYTHON" in out.stdout
    bad = subprocess.run(
        [*run, "--selector", "a=b", "--output", "/x", "--source", "lake", "--label", "region"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    assert "--label needs --source gazette" in bad.stderr
