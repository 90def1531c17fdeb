"""The native path: journals' fragment directories as Spark paths, with their Hadoop settings.

Fragment files are plain files named by codec extension (``.raw``, ``.gz``,
``.zst``) under ``<store>/<journal>/[<postfix>/]``, so Spark's own readers
(``spark.read.json`` / ``text``) read a store directly, and discover Hive
partitions from journal names like ``events/date=2026-11-23/part=000/`` and
from ``path_postfix_template`` directories. :func:`lake_paths` asks the
brokers for the journals of a selector and maps each journal's stores:

- ``file:///<path>/`` -> ``file://<file_root>/<path>/<journal>/`` (``file_root``:
  where the brokers' ``--broker.file-root`` is mounted here);
- ``s3://<bucket>/<prefix>/?endpoint=...&region=...&profile=...`` ->
  ``s3a://<bucket>/<prefix><journal>/`` and per-bucket ``fs.s3a.bucket.<bucket>.*``
  settings: ``endpoint`` and path-style access when the URL has an endpoint,
  ``endpoint.region``, and the credentials provider (a named profile, else
  the AWS SDK's default chain: environment, profile files, instance role);
- ``gs://<bucket>/<prefix>/`` -> ``gs://<bucket>/<prefix><journal>/`` (GCS connector).

Partition values are kept as strings (``part=000`` stays ``"000"``) by
``spark.sql.sources.partitionColumnTypeInference.enabled=false`` in
:meth:`LakePaths.spark_conf`.

What Hadoop cannot read is warned about (:class:`UnreadableByHadoopWarning`):
SNAPPY fragments (``.sz``, the Snappy *framing* format, which Hadoop's
``SnappyCodec`` does not speak) and GZIP_OFFLOAD_DECOMPRESSION fragments
(gzip without a ``.gz`` extension). Use the ``gazette`` data source for those
journals. Two more differences to the data source: fragments that overlap
after a broker failover are read twice, and the unpersisted tail is not read.

Usage::

    from gazette import spark as gspark

    lake = gspark.lake_paths("topic=events", broker="http://broker:8080")
    spark = SparkSession.builder.config(map=lake.spark_conf()).getOrCreate()
    df = spark.read.option("basePath", lake.base_path).json(list(lake.paths))
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import urllib.parse
import warnings
from collections.abc import Mapping, Sequence

from gazette.broker import protocol as pb
from gazette.spark import options, reader

__all__ = ["LakePaths", "UnreadableByHadoopWarning", "lake_paths", "store_path"]

#: Hadoop can read these codecs' files by extension.
_HADOOP_CODECS = frozenset({pb.NONE, pb.GZIP, pb.ZSTANDARD})
_DEFAULT_PROVIDER = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
_PROFILE_PROVIDER = "org.apache.hadoop.fs.s3a.ProfileAWSCredentialsProvider"


class UnreadableByHadoopWarning(UserWarning):
    """Some selected journals have fragments Spark's own readers cannot decode."""


@dataclasses.dataclass(frozen=True, slots=True)
class LakePaths:
    """Spark paths of the selected journals' fragment directories, and how to reach them."""

    #: One directory per journal and store, ending in ``/``.
    paths: tuple[str, ...]
    #: The common root of ``paths`` for partition discovery (option ``basePath``),
    #: or "" when they don't share a store.
    base_path: str
    #: Hadoop settings (``fs.s3a.bucket.<bucket>.endpoint`` etc.), without ``spark.hadoop.``.
    hadoop: Mapping[str, str]
    #: The selected journals, by name.
    journals: tuple[str, ...]
    #: Journals whose fragments Hadoop cannot decode (SNAPPY, GZIP_OFFLOAD_DECOMPRESSION).
    unreadable: tuple[str, ...]

    def spark_conf(self) -> dict[str, str]:
        """Session settings: the Hadoop ones as ``spark.hadoop.*``, and string partition values."""
        conf = {f"spark.hadoop.{k}": v for k, v in self.hadoop.items()}
        conf["spark.sql.sources.partitionColumnTypeInference.enabled"] = "false"
        return conf


def lake_paths(
    selector: str,
    *,
    broker: str = "",
    file_root: str = "",
    auth_token: str = "",
) -> LakePaths:
    """Spark paths and settings of the stores of the journals ``selector`` matches.

    ``broker`` defaults to ``$BROKER_ADDRESS`` (else ``http://localhost:8080``);
    ``file_root`` is required when a journal uses a ``file://`` store. Raises
    the data source's errors (:mod:`gazette.spark.options`) for a malformed
    selector, a selector matching nothing, or a broker that is down.
    """
    opts = options.SourceOptions.parse(
        {"selector": selector, "broker": broker, "file_root": file_root, "auth_token": auth_token}
    )
    journals = reader.list_journals(opts)
    paths: list[str] = []
    hadoop: dict[str, str] = {}
    roots: set[str] = set()
    for journal in journals:
        for store in journal.stores:
            root, path, settings = store_path(store, journal.name, file_root=file_root)
            roots.add(root)
            if path not in paths:
                paths.append(path)
            hadoop.update(settings)
    unreadable = tuple(j.name for j in journals if j.codec not in _HADOOP_CODECS)
    if unreadable:
        warnings.warn(
            f"{len(unreadable)} selected journal(s) use a codec Hadoop cannot read "
            f"(SNAPPY framing or GZIP_OFFLOAD_DECOMPRESSION): {', '.join(unreadable[:5])}"
            f"{', ...' if len(unreadable) > 5 else ''}; read them with the gazette data source",
            UnreadableByHadoopWarning,
            stacklevel=2,
        )
    return LakePaths(
        paths=tuple(paths),
        base_path=_base_path(roots, paths),
        hadoop=hadoop,
        journals=tuple(j.name for j in journals),
        unreadable=unreadable,
    )


def store_path(store: str, journal: str, *, file_root: str = "") -> tuple[str, str, dict[str, str]]:
    """(store root, journal directory, Hadoop settings) of ``journal`` in ``store``, as Spark paths."""
    parts = urllib.parse.urlsplit(store)
    args = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    args = {k.lower(): v for k, v in args.items()}
    rel = _rewrite(journal + "/", args)
    if parts.scheme == "file":
        if not file_root:
            raise options.OptionError(
                "file_root",
                f"journal {journal} is stored in {store}: pass file_root, the directory "
                "that roots file:// stores (the brokers' --broker.file-root)",
            )
        local = posixpath.normpath(os.path.abspath(file_root) + "/" + parts.path)
        root = "file://" + local.rstrip("/") + "/"
        return root, root + rel, {}
    if parts.scheme == "s3":
        bucket = parts.netloc
        root = f"s3a://{bucket}{parts.path}"
        return root, root + rel, _s3a_settings(bucket, args)
    if parts.scheme == "gs":
        root = f"gs://{parts.netloc}{parts.path}"
        return root, root + rel, {}
    raise options.OptionError(
        "selector",
        f"journal {journal} is stored in {store}: no Spark path is known for {parts.scheme}:// stores",
    )


def _rewrite(rel: str, args: Mapping[str, str]) -> str:
    # The store's find/replace rewrite of relative paths (stores.base.Rewriter).
    find = args.get("find", "")
    return rel.replace(find, args.get("replace", ""), 1) if find else rel


def _s3a_settings(bucket: str, args: Mapping[str, str]) -> dict[str, str]:
    # Per-bucket keys: stores of one job may sit behind different endpoints.
    key = f"fs.s3a.bucket.{bucket}."
    out: dict[str, str] = {}
    endpoint = args.get("endpoint", "")
    if endpoint:
        out[key + "endpoint"] = endpoint
        # An explicit endpoint (MinIO, moto) serves buckets by path, as the broker's store uses it.
        out[key + "path.style.access"] = "true"
        out[key + "connection.ssl.enabled"] = "false" if endpoint.startswith("http://") else "true"
    if args.get("region"):
        out[key + "endpoint.region"] = args["region"]
    if args.get("profile"):
        out[key + "aws.credentials.provider"] = _PROFILE_PROVIDER
        out[key + "auth.profile.name"] = args["profile"]
    else:
        out[key + "aws.credentials.provider"] = _DEFAULT_PROVIDER
    return out


def _base_path(roots: set[str], paths: Sequence[str]) -> str:
    """The deepest directory above every path that holds no ``key=value`` segment."""
    if len(roots) != 1 or not paths:
        return ""
    (root,) = roots
    rels = [p[len(root) :].rstrip("/").split("/") for p in paths]
    common: list[str] = []
    for segments in zip(*rels, strict=False):
        if len(set(segments)) != 1 or "=" in segments[0]:
            break
        common.append(segments[0])
    # A single journal directory is itself a leaf: partition discovery starts above it.
    shortest = min(len(r) for r in rels)
    if len(common) == shortest:
        common = common[:-1]
        while common and "=" in common[-1]:
            common.pop()
    return root + "".join(s + "/" for s in common)
