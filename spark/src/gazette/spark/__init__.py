"""Gazette journals in PySpark: a data source, a sink, and the stores as a data lake.

A journal is an append-only byte stream whose fragments are plain files in a
blob store. This package (dist ``gazette-spark``; the only one that imports
pyspark) gives Spark three ways in:

- **The ``gazette`` data source** (pyspark's Python ``DataSource`` API),
  registered by :func:`register`. A batch read selects journals by label
  selector; each persisted fragment is a partition read straight from its
  store (``file://``, ``s3://``) by the executors, every codec including
  SNAPPY, and the unpersisted tail is read from the brokers — the same
  offsets, no gap, no overlap. Rows follow the journal's ``content-type``:
  JSON lines parsed to a schema (given, or inferred from a sample), other
  journals one ``value`` per line; with ``_journal``, ``_offset`` and a string
  column per Hive-style name segment (``date=2026-11-23``) and requested
  label. Filters on those columns prune journals and fragments
  (``pushFilters``). Streaming (``readStream``) and the sink (``write`` /
  ``writeStream``) are the same format.
- **The native path**, :func:`lake_paths`: the journals' store directories as
  Spark paths plus the Hadoop ``fs.s3a.*`` settings, for ``spark.read.json``
  with partition discovery (warns about SNAPPY journals, which Hadoop can't
  decode).
- Executors need this package: set ``PYSPARK_PYTHON`` to a Python that has it.

Key types: :class:`GazetteDataSource`, :class:`SourceOptions` (options and
their documented defaults), :class:`LakePaths`; errors in
:mod:`gazette.spark.options` (an unknown option, a malformed selector, a
selector matching nothing, a broker that is down: each says which).

Usage::

    from gazette import spark as gspark

    gspark.register(spark)
    df = (
        spark.read.format("gazette")
        .option("broker", "http://broker:8080")
        .option("selector", "topic=events")
        .option("labels", "region")
        .option("file_root", "/var/lib/gazette")     # for file:// stores
        .load()
    )
    df.where("date = '2026-11-23' AND _offset >= 1048576").groupBy("region").count()

    lake = gspark.lake_paths("topic=events", broker="http://broker:8080")
    spark.read.option("basePath", lake.base_path).json(list(lake.paths))
"""

from __future__ import annotations

from typing import Any

from gazette.spark.datasource import GazetteDataSource, explain_save_modes
from gazette.spark.lake import LakePaths, UnreadableByHadoopWarning, lake_paths
from gazette.spark.options import (
    BrokerUnavailableError,
    NoJournalsError,
    OptionError,
    ReadError,
    SelectorError,
    SourceOptions,
    SparkSourceError,
)

__all__ = [
    "BrokerUnavailableError",
    "GazetteDataSource",
    "LakePaths",
    "NoJournalsError",
    "OptionError",
    "ReadError",
    "SelectorError",
    "SourceOptions",
    "SparkSourceError",
    "UnreadableByHadoopWarning",
    "lake_paths",
    "register",
]

#: The SQL setting without which Spark refuses a Python reader that implements pushFilters.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the ``gazette`` format with ``spark`` (a SparkSession), filter pushdown on.

    Also makes a ``df.write`` of the format without ``.mode("append")`` fail with an
    error saying so (:func:`gazette.spark.datasource.explain_save_modes`).
    """
    spark.dataSource.register(GazetteDataSource)
    explain_save_modes()
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
