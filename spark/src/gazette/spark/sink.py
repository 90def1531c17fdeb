"""The sink of the ``gazette`` data source: ``df.write`` and ``df.writeStream`` as JSON lines.

Each row becomes one JSON line (``{"col": value, ...}``: dates and
timestamps in ISO 8601, decimals as strings, binary as base64, maps as
objects) appended to the journal that the row names:

- option ``journal_column``: a string column holding the journal's name (the
  column itself is not written); or
- option ``journal``: one journal for every row (``events/all``, as the Kafka
  sink's ``topic``), or a template over columns,
  ``events/date={date}/part={part:03d}`` (Python ``str.format`` fields; every
  field must be a column).

Journals are append-only, so the save mode must be ``append``:
``df.write.format("gazette").mode("append")``. Spark refuses its default
mode (``ErrorIfExists``) for the source before any of this package runs;
:func:`gazette.spark.register` turns that refusal into an error naming
``.mode("append")``.

Nothing is created implicitly: every journal a task would write must exist
(and must not have another ``content-type`` than JSON lines) before the task
appends anything, else it fails with :class:`MissingJournalError` naming it.

**Atomicity.** A task spools its rows per journal (in memory, then a temporary
file) and appends each journal's rows as *one* append
(:func:`gazette.broker.client.append`): readers see all of them or none.
Brokers have no maximum append size — an append streams in 128 KiB messages —
so one append per journal per task always fits; a very large one only holds
the journal's append pipeline (other writers wait) while it streams.

**Exactly once per micro-batch** (``writeStream``). Spark may run a task of a
micro-batch more than once: a retried task, a speculative copy, the batch re-run
after the query restarted from its checkpoint. In micro-batch mode a task is
named by ``(partition id, batch id)`` and Spark promises it the same rows each
time. Each append of task ``p`` of batch ``N`` of query ``Q`` therefore
carries the journal register conditions:

- ``check_registers``: exclude ``spark-Q.p = N`` — refused (REGISTER_MISMATCH)
  if this task already committed batch ``N`` to this journal;
- ``union_registers``: ``spark-Q.p = N`` — a union *replaces* the values of
  a name, so the register holds only the last batch (batches only go
  forward: batch ``N-1`` is never re-run once ``N`` started).

A REGISTER_MISMATCH is an earlier attempt's success: the rows are dropped
and the task goes on. The check is atomic with the append on the journal's
primary, so it also covers the client's own retry of an append whose
acknowledgement was lost. One register per (query, write partition) rather than one
per query because tasks of one batch append to the same journal concurrently:
with a single ``spark-Q = N`` the second task's rows would be dropped. A
journal keeps at most one register name per write partition of each query
that wrote it. Registers live with the journal's replicas; losing every
replica at once forgets them (the next attempt is then appended again).

Batch writes (``df.write``) carry no registers: a Spark task retried after
its append succeeded appends its rows again (at least once), and a job that
fails leaves the appends of its finished tasks (journals are append-only).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import decimal
import json
import logging
import string
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

# pyarrow ships no type information (no py.typed); its values are Any here.
import pyarrow as pa  # type: ignore[import-untyped]
from pyspark import TaskContext
from pyspark.sql import datasource as ds
from pyspark.sql import types as st

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.spark import options, reader

__all__ = [
    "REGISTER_PREFIX",
    "SINK_OPTIONS",
    "AppendError",
    "GazetteStreamWriter",
    "GazetteWriter",
    "JournalRouter",
    "MissingJournalError",
    "SinkOptions",
    "TaskAppends",
    "encode_row",
    "register_name",
]

log = logging.getLogger(__name__)

#: Options of the sink (read options such as ``broker`` and ``auth_token`` apply too).
SINK_OPTIONS = ("journal", "journal_column", "append_timeout")
#: Options Spark itself hands a stream sink along with the user's.
SPARK_STREAM_OPTIONS = ("checkpoint_location",)
#: Journal registers of streaming writes are named ``spark-<query id>.<partition>``.
REGISTER_PREFIX = "spark-"
#: Spooled rows of one journal beyond this many bytes move from memory to a temporary file.
SPOOL_MEMORY = 8 << 20
#: Appends of one task in flight at once.
APPEND_CONCURRENCY = 8
#: Spark's task-local properties naming the streaming query and its micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

_APPEND_TIMEOUT = 300.0


class MissingJournalError(options.SparkSourceError):
    """A row names a journal that does not exist (the sink creates none); ``journal`` names it."""

    def __init__(self, journal: str, reason: str = "") -> None:
        self.journal = journal
        why = reason or (
            "the gazette sink creates no journals: create it first "
            "(gazctl journals apply) or fix the journal option"
        )
        super().__init__(f"journal {journal!r} does not exist: {why}")


class AppendError(options.SparkSourceError):
    """An append failed for another reason than a missing journal or an unreachable broker."""

    def __init__(self, journal: str, message: str) -> None:
        self.journal = journal
        super().__init__(f"appending to journal {journal}: {message}")


# -- Options ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class SinkOptions:
    """The parsed options of one ``write`` / ``writeStream`` of ``gazette``."""

    source: options.SourceOptions
    #: Column holding each row's journal name ("" when ``journal`` is given).
    journal_column: str = ""
    #: Every row's journal, or a template of it over columns ("" with ``journal_column``).
    journal: str = ""
    #: Seconds one append may take, retries on an unavailable broker included.
    append_timeout: float = _APPEND_TIMEOUT

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, stream: bool = False) -> SinkOptions:
        extra = SINK_OPTIONS + SPARK_STREAM_OPTIONS if stream else SINK_OPTIONS
        source = options.SourceOptions.parse(raw, extra=extra)
        column = source.extra_option("journal_column").strip()
        template = source.extra_option("journal").strip()
        if bool(column) == bool(template):
            raise options.OptionError(
                "journal",
                "the gazette sink needs exactly one of option journal (one journal such as "
                "'events/all', or a template such as 'events/date={date}') and option "
                "journal_column (a column naming each row's journal)"
                + (", not both" if column else ""),
            )
        text = source.extra_option("append_timeout", str(_APPEND_TIMEOUT))
        try:
            timeout = float(text)
        except ValueError:
            timeout = -1.0
        if not timeout > 0:
            raise options.OptionError(
                "append_timeout", f"option append_timeout must be positive seconds, not {text!r}"
            )
        return cls(source=source, journal_column=column, journal=template, append_timeout=timeout)


# -- Rows to journals and JSON ----------------------------------------------------------


class JournalRouter:
    """Which journal each row goes to, and which columns are written."""

    def __init__(self, opts: SinkOptions, schema: st.StructType) -> None:
        names = list(schema.names)
        self.column = opts.journal_column
        self.template = opts.journal
        self.parts: list[tuple[str, str | None, str | None, str | None]] = []
        if self.column:
            if self.column not in names:
                raise options.OptionError(
                    "journal_column",
                    f"option journal_column: no column {self.column!r} (columns: {', '.join(names)})",
                )
            if not isinstance(schema[self.column].dataType, st.StringType):
                raise options.OptionError(
                    "journal_column",
                    f"option journal_column: column {self.column!r} is "
                    f"{schema[self.column].dataType.simpleString()}, not a string",
                )
            self.columns = [n for n in names if n != self.column]
        else:
            try:
                self.parts = list(string.Formatter().parse(self.template))
            except ValueError as e:
                raise options.OptionError(
                    "journal", f"option journal: bad template {self.template!r}: {e}"
                ) from e
            # No field: one constant journal for every row.
            fields = [f for _, f, _, _ in self.parts if f is not None]
            for f in fields:
                if f not in names:
                    raise options.OptionError(
                        "journal",
                        f"option journal: template {self.template!r} names {{{f}}}, "
                        f"which is no column (columns: {', '.join(names)})",
                    )
            self.columns = names

    def journal(self, row: Mapping[str, Any]) -> str:
        """The journal of ``row`` (a dict of every column)."""
        if self.column:
            name = row[self.column]
            if not isinstance(name, str) or not name:
                raise options.OptionError(
                    "journal_column",
                    f"a row's journal column {self.column!r} is {name!r}, not a journal name",
                )
            return name
        out: list[str] = []
        for literal, field, spec, conversion in self.parts:
            out.append(literal)
            if field is None:
                continue
            value = row[field]
            if value is None:
                raise options.OptionError(
                    "journal",
                    f"a row's column {field!r} is null: template {self.template!r} "
                    "can't name its journal",
                )
            if conversion == "r":
                value = repr(value)
            elif conversion in ("s", "a"):
                value = str(value) if conversion == "s" else ascii(value)
            out.append(format(value, spec or ""))
        return "".join(out)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
        return value.isoformat()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        # A string: exact, and what the gazette source reads decimal columns from.
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.timedelta):
        return str(value)
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def encode_row(row: Mapping[str, Any]) -> bytes:
    """One JSON line (with its newline)."""
    text = json.dumps(row, default=_json_default, separators=(",", ":"), ensure_ascii=False)
    return text.encode() + b"\n"


# -- Appending --------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Spool:
    file: IO[bytes]
    rows: int = 0
    size: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class JournalAppend:
    """What one task did to one journal."""

    journal: str
    rows: int
    size: int
    #: Offsets ``[begin, end)`` of the append; (-1, -1) if skipped as already committed.
    begin: int
    end: int


@dataclasses.dataclass(frozen=True, slots=True)
class TaskAppends(ds.WriterCommitMessage):
    """The commit message of one task: its appends."""

    partition: int
    appends: tuple[JournalAppend, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class _Registers:
    """The register conditions of a streaming task's appends."""

    name: str
    batch: str


def register_name(query_id: str, partition: int) -> str:
    """The journal register of write partition ``partition`` of streaming query ``query_id``."""
    name = f"{REGISTER_PREFIX}{query_id}.{partition}"
    pb.validate_label(pb.Label(name=name, value="0"))
    return name


def _client_config(opts: options.SourceOptions) -> client.ClientConfig:
    return client.ClientConfig(
        address=opts.broker, auth_token=opts.auth_token, wait_for_ready=False
    )


async def _check_journals(
    opts: SinkOptions, jc: client.JournalClient, journals: Sequence[str]
) -> None:
    """Raise MissingJournalError unless every journal exists and takes JSON lines."""
    for name in journals:
        try:
            pb.validate_journal(name)
        except pb.ValidationError as e:
            raise MissingJournalError(name, f"not a valid journal name ({e})") from e
    selector = pb.LabelSelector()
    for name in journals:
        pb.add_value(selector.include, "name", name)
    try:
        resp = await client.list_journals(jc, selector)
    except client.errors.TransportError as e:
        raise options.BrokerUnavailableError(opts.source.broker, "listing journals", e) from e
    specs = {j.spec.name: j.spec for j in resp.journals}
    for name in journals:
        spec = specs.get(name)
        if spec is None:
            raise MissingJournalError(name)
        content_type = pb.value_of(spec.labels, pb.LABEL_CONTENT_TYPE)
        if content_type and content_type != pb.CONTENT_TYPE_JSON_LINES:
            raise AppendError(
                name,
                f"its content-type is {content_type!r}: the gazette sink writes JSON lines "
                f"({pb.CONTENT_TYPE_JSON_LINES})",
            )


async def _append_one(
    opts: SinkOptions,
    jc: client.JournalClient,
    name: str,
    spool: _Spool,
    registers: _Registers | None,
) -> JournalAppend:
    request = pb.AppendRequest(journal=name)
    if registers is not None:
        pb.add_value(request.check_registers.exclude, registers.name, registers.batch)
        pb.add_value(request.union_registers, registers.name, registers.batch)
    spool.file.seek(0)
    try:
        async with asyncio.timeout(opts.append_timeout):
            resp = await client.append(jc, request, spool.file)
    except TimeoutError as e:
        raise options.BrokerUnavailableError(
            opts.source.broker,
            f"appending to {name} (no success within append_timeout={opts.append_timeout:g}s)",
            e,
        ) from e
    except client.errors.RegisterMismatch:
        # An earlier attempt of this very task committed this batch to this journal.
        log.info(
            "journal %s already holds batch %s of register %s: skipping %d rows",
            name,
            registers.batch if registers else "?",
            registers.name if registers else "?",
            spool.rows,
        )
        return JournalAppend(name, spool.rows, spool.size, -1, -1)
    except client.errors.JournalNotFound as e:
        raise MissingJournalError(name) from e
    except client.errors.TransportError as e:
        raise options.BrokerUnavailableError(opts.source.broker, f"appending to {name}", e) from e
    except client.errors.ClientError as e:
        raise AppendError(name, str(e)) from e
    return JournalAppend(name, spool.rows, spool.size, resp.commit.begin, resp.commit.end)


def _append_all(
    opts: SinkOptions, spools: Mapping[str, _Spool], registers: _Registers | None
) -> list[JournalAppend]:
    async def go() -> list[JournalAppend]:
        async with client.JournalClient(_client_config(opts.source)) as jc:
            names = sorted(spools)
            await _check_journals(opts, jc, names)
            sem = asyncio.Semaphore(APPEND_CONCURRENCY)

            async def one(name: str) -> JournalAppend:
                async with sem:
                    return await _append_one(opts, jc, name, spools[name], registers)

            return list(await asyncio.gather(*(one(n) for n in names)))

    return reader.run(go())


def _write(
    opts: SinkOptions,
    router: JournalRouter,
    batches: Iterator[pa.RecordBatch],
    registers: _Registers | None,
    partition: int,
) -> TaskAppends:
    spools: dict[str, _Spool] = {}
    columns = router.columns
    try:
        for batch in batches:
            for row in batch.to_pylist(maps_as_pydicts="strict"):
                name = router.journal(row)
                spool = spools.get(name)
                if spool is None:
                    spool = spools[name] = _Spool(
                        tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115
                    )
                line = encode_row({c: row[c] for c in columns})
                spool.file.write(line)
                spool.rows += 1
                spool.size += len(line)
        appends = _append_all(opts, spools, registers) if spools else []
    finally:
        for spool in spools.values():
            spool.file.close()
    return TaskAppends(partition, tuple(appends))


def _partition_id() -> int:
    tc = TaskContext.get()
    return tc.partitionId() if tc is not None else 0


def _parse_sink(
    raw: Mapping[str, str], schema: st.StructType, overwrite: bool, *, stream: bool
) -> SinkOptions:
    opts = SinkOptions.parse(raw, stream=stream)
    if overwrite:
        raise options.OptionError(
            "mode",
            "journals are append-only: write to the gazette sink with mode 'append' "
            "(and output mode 'append' for a stream)",
        )
    JournalRouter(opts, schema)  # Bad columns fail on the driver, before any task runs.
    return opts


def _summary(messages: Sequence[ds.WriterCommitMessage | None]) -> tuple[int, int, int]:
    rows = size = skipped = 0
    for m in messages:
        if isinstance(m, TaskAppends):
            for a in m.appends:
                if a.begin < 0:
                    skipped += a.rows
                else:
                    rows += a.rows
                    size += a.size
    return rows, size, skipped


class GazetteWriter(ds.DataSourceArrowWriter):
    """``df.write.format("gazette")``: each task appends its rows, one append per journal."""

    def __init__(self, raw_options: Mapping[str, str], schema: st.StructType, overwrite: bool):
        self.opts = _parse_sink(raw_options, schema, overwrite, stream=False)
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskAppends:
        router = JournalRouter(self.opts, self.schema)
        return _write(self.opts, router, iterator, None, _partition_id())

    def commit(self, messages: list[ds.WriterCommitMessage | None]) -> None:
        rows, size, _ = _summary(messages)
        log.info("gazette sink: appended %d rows (%d bytes)", rows, size)

    def abort(self, messages: list[ds.WriterCommitMessage | None]) -> None:
        rows, _, _ = _summary(messages)
        log.warning(
            "gazette sink: write failed; %d rows of tasks that finished stay appended "
            "(journals are append-only)",
            rows,
        )


class GazetteStreamWriter(ds.DataSourceStreamArrowWriter):
    """``df.writeStream.format("gazette")``: appends committed at most once per micro-batch.

    See the module docstring for the journal registers that make a re-run task
    of a micro-batch skip the journals it already appended to.
    """

    def __init__(self, raw_options: Mapping[str, str], schema: st.StructType, overwrite: bool):
        self.opts = _parse_sink(raw_options, schema, overwrite, stream=True)
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskAppends:
        tc = TaskContext.get()
        query = tc.getLocalProperty(QUERY_ID_PROPERTY) if tc is not None else None
        batch = tc.getLocalProperty(BATCH_ID_PROPERTY) if tc is not None else None
        if tc is None or not query or batch is None:
            raise options.SparkSourceError(
                "the gazette stream sink runs in micro-batch mode only: Spark named no "
                f"query ({QUERY_ID_PROPERTY}) or batch ({BATCH_ID_PROPERTY}) for this task"
            )
        partition = tc.partitionId()
        registers = _Registers(register_name(query, partition), batch)
        router = JournalRouter(self.opts, self.schema)
        return _write(self.opts, router, iterator, registers, partition)

    def commit(self, messages: list[ds.WriterCommitMessage | None], batchId: int) -> None:
        rows, size, skipped = _summary(messages)
        log.info(
            "gazette sink: batch %d appended %d rows (%d bytes); %d rows were already committed",
            batchId,
            rows,
            size,
            skipped,
        )

    def abort(self, messages: list[ds.WriterCommitMessage | None], batchId: int) -> None:
        rows, _, _ = _summary(messages)
        log.warning(
            "gazette sink: batch %d failed; %d rows of its finished tasks stay appended and "
            "are skipped when the batch runs again",
            batchId,
            rows,
        )
