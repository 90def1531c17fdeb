"""Daily counts of the records of Gazette journals, written as Parquet: an example PySpark job.

Reads the journals that a label selector matches, counts their records per
day and per the columns you choose, and writes ``day, <columns...>, count``
as Parquet partitioned by ``day``. Two ways to read, one flag apart:

- ``--source gazette`` (default): the ``gazette`` data source. Every
  codec, the unpersisted tail read from the brokers, journal labels as
  columns (``--label``), and filters on name segments and labels
  (``--where "date = '2026-11-23'"``) prune journals before any is read.
- ``--source lake``: the journals' fragment files read by Spark's own JSON
  reader (``gazette.spark.lake_paths``): ``s3a://`` paths with per-bucket
  Hadoop settings, Hive name segments (``date=2026-11-23``) found by partition
  discovery. Persisted fragments only; no labels; no SNAPPY journals.

The day is ``to_date(<--day column>)``: a Hive name segment
(``events/date=2026-11-23/...``, the default ``--day date``) or a JSON field
holding an ISO date or timestamp. Days are UTC unless ``--timezone`` says
otherwise. ``--mode overwrite`` (the default) replaces only the days this
run wrote (dynamic partition overwrite), so a daily run for one day leaves
the others alone.

Run it with spark-submit, locally or on Kubernetes (``k8s/``)::

    spark-submit --master 'local[2]' job.py \\
        --broker http://localhost:8080 --selector 'topic=events' \\
        --label region --output /tmp/daily-counts

    spark-submit --master 'local[2]' \\
        --jars "$(python spark/jars/fetch.py --format comma)" job.py \\
        --source lake --selector 'topic=events' --by part \\
        --output s3a://reports/daily-counts/

Executors import ``gazette.spark`` (the data source runs there): set
``PYSPARK_PYTHON`` to a Python that has it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("spark_daily_counts")

SOURCES = ("gazette", "lake")
MODES = ("overwrite", "append", "errorifexists")
DAY_COLUMN = "day"
COUNT_COLUMN = "count"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="job.py",
        description=(
            "Count the records of the Gazette journals a label selector matches, per day and\n"
            "per chosen columns; write day, <columns...>, count as Parquet partitioned by day."
        ),
        epilog=(
            "Examples:\n"
            "  spark-submit --master 'local[2]' job.py --selector topic=events \\\n"
            "      --label region --output /tmp/daily-counts\n"
            "  spark-submit --master 'local[2]' --jars <hadoop-aws,bundle,...> job.py \\\n"
            "      --source lake --selector topic=events --by part --output s3a://b/counts/\n"
            "Executors import gazette.spark: set PYSPARK_PYTHON to a Python that has it."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--selector",
        required=True,
        help="label selector of the journals, e.g. 'topic=events' or 'topic=events, region in (us, eu)'",
    )
    parser.add_argument(
        "--output",
        required=True,
        help="Parquet directory to write (file://, s3a://, gs://, or a local path)",
    )
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="gazette",
        help=(
            "gazette: the gazette data source (every codec, the unpersisted tail, labels); "
            "lake: spark.read.json on the fragment files (gazette.spark.lake_paths; persisted "
            "fragments only, s3a:// needs hadoop-aws). Default: gazette"
        ),
    )
    parser.add_argument(
        "--broker",
        default=os.environ.get("BROKER_ADDRESS", ""),
        help="a broker's address (default: $BROKER_ADDRESS, else http://localhost:8080)",
    )
    parser.add_argument(
        "--day",
        default="date",
        metavar="COLUMN",
        help=(
            "column the day comes from: a Hive segment of journal names (date=2026-11-23) or a "
            "JSON field with an ISO date or timestamp. Default: date"
        ),
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME",
        help="count per this journal label too (repeatable; --source gazette only)",
    )
    parser.add_argument(
        "--by",
        action="append",
        default=[],
        metavar="COLUMN",
        help="count per this column too: a Hive segment of journal names or a JSON field (repeatable)",
    )
    parser.add_argument(
        "--where",
        default="",
        metavar="SQL",
        help=(
            "keep only the records this SQL condition holds for, e.g. \"date >= '2026-11-01'\" "
            "(with --source gazette, conditions on name segments and labels skip whole journals)"
        ),
    )
    parser.add_argument(
        "--schema",
        default="",
        metavar="DDL",
        help="DDL of the JSON records, e.g. 'user STRING, ts TIMESTAMP' (default: inferred)",
    )
    parser.add_argument(
        "--file-root",
        default="",
        help="where the brokers' --broker.file-root is mounted, for journals in file:// stores",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="overwrite",
        help="overwrite (the days written are replaced, others kept), append or errorifexists",
    )
    parser.add_argument(
        "--timezone", default="UTC", help="time zone of days cut from timestamps (default: UTC)"
    )
    args = parser.parse_args(argv)
    # Executors resolve it too: in local mode from the same directory, elsewhere it's absolute.
    args.file_root = os.path.abspath(args.file_root) if args.file_root else ""
    if args.source == "lake" and args.label:
        parser.error(
            "--label needs --source gazette: fragment files carry no labels "
            "(count per a Hive segment of journal names with --by instead)"
        )
    return args


def read_gazette(spark: Any, args: argparse.Namespace) -> Any:
    """The journals through the ``gazette`` data source, with the requested labels as columns."""
    from gazette import spark as gspark

    gspark.register(spark)
    reader = spark.read.format("gazette").option("selector", args.selector)
    if args.broker:
        reader = reader.option("broker", args.broker)
    if args.label:
        reader = reader.option("labels", ",".join(args.label))
    if args.schema:
        reader = reader.option("schema", args.schema)
    if args.file_root:
        reader = reader.option("file_root", args.file_root)
    return reader.load()


def read_lake(spark: Any, lake: Any, args: argparse.Namespace) -> Any:
    """The journals' fragment files through ``spark.read.json``, with partition discovery."""
    if not lake.base_path:
        sys.exit(
            f"job.py: the journals of {args.selector!r} are in more than one store; "
            "Spark cannot discover partitions across them (use --source gazette)"
        )
    reader = spark.read.option("basePath", lake.base_path)
    if args.schema:
        reader = reader.schema(args.schema)
    return reader.json(list(lake.paths))


def daily_counts(df: Any, day: str, keys: Sequence[str], where: str = "") -> Any:
    """``day, <keys...>, count`` of ``df``: its rows per ``to_date(day)`` and ``keys``."""
    from pyspark.sql import functions as F

    missing = [c for c in (day, *keys) if c not in df.columns]
    if missing:
        sys.exit(
            f"job.py: no column {', '.join(missing)} in the journals' records "
            f"(columns: {', '.join(df.columns)})"
        )
    if where:
        df = df.where(where)
    # Through a timestamp: to_date of a string would keep the date as written, ignoring its
    # offset ("2026-11-23T23:30:00-03:00" is 2026-11-24 in UTC).
    day_of = F.to_date(F.col(day).cast("timestamp"))
    return df.groupBy(day_of.alias(DAY_COLUMN), *keys).count()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from pyspark.sql import SparkSession

    from gazette import spark as gspark

    conf = {
        "spark.sql.session.timeZone": args.timezone,
        # --mode overwrite replaces the days of this run's output, not the whole directory.
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
    }
    lake = None
    if args.source == "lake":
        # Before the session: the stores' Hadoop settings (per-bucket s3a endpoint, region,
        # credentials provider) are session settings, fixed once the first S3A client exists.
        try:
            lake = gspark.lake_paths(args.selector, broker=args.broker, file_root=args.file_root)
        except gspark.SparkSourceError as e:
            print(f"job.py: {e}", file=sys.stderr)
            return 2
        conf.update(lake.spark_conf())
        log.info("reading %d journal(s) under %s", len(lake.journals), lake.base_path)
    builder = SparkSession.builder.appName("gazette-daily-counts")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        df = read_gazette(spark, args) if lake is None else read_lake(spark, lake, args)
        counts = daily_counts(df, args.day, [*args.label, *args.by], args.where)
        counts.write.mode(args.mode).partitionBy(DAY_COLUMN).parquet(args.output)
        log.info("wrote daily counts of %r to %s", args.selector, args.output)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
