"""The batch reader of the ``gazette`` data source: planning on the driver, reading on executors.

Planning (:class:`GazetteReader`, in the Python worker Spark starts to plan a
scan) lists the journals of the selector (``List``), drops those that pushed
filters rule out, and lists each remaining journal's fragments
(``ListFragments``). The listing is a CoverSet snapshot of the journal: every
*persisted* fragment becomes one partition, read straight from its store
(``file://``, ``s3://``) by an executor through the broker's own store and
codec code; the offsets no persisted fragment covers — fragments still in a
broker's spool, up to the write head as of the listing — become one
partition read from the brokers. Fragments overlapping after a failover are
read once: each is read from where the previous one ended. Pushed ``_offset``
ranges prune fragments before any is opened.

Reading turns decoded bytes into Arrow record batches without a Python loop
per record: blocks of about ``batch_bytes`` are cut at a newline, split into
lines by ``pyarrow.compute`` (which also yields each line's offset), and JSON
journals are parsed by ``pyarrow.json``. Columns:

- the payload: the JSON fields (given by ``schema``, else inferred from a
  sample), or for raw-lines journals one ``value`` string per line;
- ``_journal`` and ``_offset`` (the offset of the record's first byte);
- one string column per Hive-style segment of journal names
  (``events/date=2026-11-23/part=000`` gives ``date`` and ``part``) and per
  label named by the ``labels`` option (its first value).

A record must not span two fragments (Gazette writers append whole
messages, and fragments roll between appends). A journal's last line without
a newline is read as a record.

The stream reader reuses :func:`list_journals`, :class:`RowBuilder` and
:func:`broker_blocks` for its own offset ranges.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, TypeVar

# pyarrow ships no type information (no py.typed); its values are Any here.
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql import datasource as ds
from pyspark.sql import types as st
from pyspark.sql.pandas import types as spark_arrow

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set
from gazette.spark import jsonlines, options

__all__ = [
    "JOURNAL_COLUMN",
    "OFFSET_COLUMN",
    "VALUE_COLUMN",
    "GazettePartition",
    "GazetteReader",
    "Journal",
    "Piece",
    "RowBuilder",
    "broker_blocks",
    "hive_segments",
    "infer_schema",
    "list_journals",
    "plan_journal",
    "run",
    "store_blocks",
]

log = logging.getLogger(__name__)

JOURNAL_COLUMN = "_journal"
OFFSET_COLUMN = "_offset"
VALUE_COLUMN = "value"

#: Bytes a store read asks for at a time.
STORE_READ_BLOCK = 4 << 20
#: ListFragments calls in flight while planning.
LIST_CONCURRENCY = 16

_T = TypeVar("_T")


# -- Journals ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Journal:
    """What reading one journal needs: its framing and its constant columns."""

    name: str
    #: JSON lines (else raw lines as ``value``).
    json: bool
    codec: int
    stores: tuple[str, ...]
    #: Hive-style ``key=value`` segments of the name, in order.
    hive: tuple[tuple[str, str], ...]
    #: Values of the requested labels (None when the journal lacks the label).
    labels: tuple[tuple[str, str | None], ...]

    def constants(self) -> dict[str, str | None]:
        """Column name -> value of every column that is constant for this journal."""
        out: dict[str, str | None] = {JOURNAL_COLUMN: self.name}
        out.update(self.hive)
        out.update(self.labels)
        return out


def hive_segments(name: str) -> list[tuple[str, str]]:
    """``key=value`` segments of a journal name (``a/date=2026-11-23/part=000`` -> 2)."""
    out: list[tuple[str, str]] = []
    for segment in name.split("/"):
        key, eq, value = segment.partition("=")
        if eq and key:
            out.append((key, value))
    return out


def _client_config(opts: options.SourceOptions) -> client.ClientConfig:
    # wait_for_ready=False: a broker that is down is an error now, not a hang.
    return client.ClientConfig(
        address=opts.broker, auth_token=opts.auth_token, wait_for_ready=False
    )


_THREAD = threading.local()


def _loop() -> asyncio.AbstractEventLoop:
    """This thread's event loop for the source's gRPC calls: made once, never closed.

    grpc.aio has one poller thread per process, and whichever loop polls first
    takes every loop's events, passing each to its call's own loop with
    ``call_soon_threadsafe``: a call whose loop is closed before its last event
    (a cancelled read's) arrives makes the loop that took it log "RuntimeError:
    Event loop is closed". A loop per read, closed after it as ``asyncio.run``
    does, would be one such loop per read; a loop per thread that lives as long
    as the process (Spark reuses its Python workers across tasks) is none. Other
    loops of the process close their calls first (``client.sync.Client.close``).
    """
    loop: asyncio.AbstractEventLoop | None = getattr(_THREAD, "loop", None)
    if loop is None or loop.is_closed():
        loop = _THREAD.loop = asyncio.new_event_loop()
        _THREAD.closing = []
    closing: list[AsyncIterator[bytes]] = _THREAD.closing
    while closing and not loop.is_running():
        _aclose(loop, closing.pop())
    return loop


def _aclose(loop: asyncio.AbstractEventLoop, agen: AsyncIterator[bytes]) -> None:
    aclose = getattr(agen, "aclose", None)
    if aclose is not None:
        loop.run_until_complete(aclose())


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to its end on this thread's loop (planning on the driver's
    Python worker, appends of the sink's tasks)."""
    return _loop().run_until_complete(coro)


_run = run


def list_journals(opts: options.SourceOptions, *, names: Sequence[str] = ()) -> list[Journal]:
    """Journals of ``opts.selector`` (narrowed to ``names`` when given), sorted by name.

    Raises NoJournalsError when the selector matches no journal (narrowed or
    not), BrokerUnavailableError when no broker answers.
    """
    selector_text = opts.require_selector()
    selector = pb.parse_selector(selector_text)
    narrowed = pb.LabelSelector()
    narrowed.CopyFrom(selector)
    # Only when the selector names no journal itself: more values of one label widen it.
    narrow = bool(names) and not pb.values_of(selector.include, "name")
    if narrow:
        for name in names:
            pb.add_value(narrowed.include, "name", name)

    async def go() -> tuple[pb.ListResponse, bool]:
        async with client.JournalClient(_client_config(opts)) as jc:
            try:
                resp = await client.list_journals(jc, narrowed)
                matched = bool(resp.journals)
                if not matched and narrow:
                    matched = bool((await client.list_journals(jc, selector)).journals)
            except client.errors.TransportError as e:
                raise options.BrokerUnavailableError(opts.broker, "listing journals", e) from e
            return resp, matched

    resp, matched = _run(go())
    if not matched:
        raise options.NoJournalsError(selector_text, opts.broker)
    journals = [_journal(opts, j.spec) for j in resp.journals]
    journals.sort(key=lambda j: j.name)
    return journals


def _journal(opts: options.SourceOptions, spec: pb.JournalSpec) -> Journal:
    content_type = pb.value_of(spec.labels, pb.LABEL_CONTENT_TYPE)
    if opts.format == "auto":
        is_json = content_type == pb.CONTENT_TYPE_JSON_LINES
    else:
        is_json = opts.format == "json"
    return Journal(
        name=spec.name,
        json=is_json,
        codec=spec.fragment.compression_codec,
        stores=tuple(spec.fragment.stores),
        hive=tuple(hive_segments(spec.name)),
        labels=tuple(
            (label, pb.value_of(spec.labels, label) if pb.values_of(spec.labels, label) else None)
            for label in opts.labels
        ),
    )


# -- Schemas ----------------------------------------------------------------------------


def _constant_fields(opts: options.SourceOptions, journals: Sequence[Journal]) -> list[str]:
    """Names of the metadata columns, in output order."""
    names = [JOURNAL_COLUMN, OFFSET_COLUMN]
    for j in journals:
        for key, _ in j.hive:
            if key not in names:
                names.append(key)
    for label in opts.labels:
        if label not in names:
            names.append(label)
    return names


def infer_schema(opts: options.SourceOptions) -> st.StructType | str:
    """The output schema: payload columns, then ``_journal``, ``_offset``, Hive and label columns.

    A DDL string when the payload's DDL was given (Spark parses it), else a
    StructType with the JSON payload inferred from a sample of the journals.
    """
    journals = list_journals(opts)
    meta = _constant_fields(opts, journals)
    lines = any(not j.json for j in journals)
    has_json = any(j.json for j in journals)
    meta_fields = [
        st.StructField(name, st.LongType() if name == OFFSET_COLUMN else st.StringType())
        for name in meta
    ]
    value_field = (
        [st.StructField(VALUE_COLUMN, st.StringType())]
        if lines and VALUE_COLUMN not in meta
        else []
    )
    if opts.schema and has_json:
        tail = ", ".join(
            f"`{f.name}` {f.dataType.simpleString()}" for f in value_field + meta_fields
        )
        return f"{opts.schema}, {tail}"
    payload: list[st.StructField] = []
    if has_json:
        reserved = {*meta, *(f.name for f in value_field)}
        inferred = _infer_payload(opts, [j for j in journals if j.json])
        payload = [f for f in inferred.fields if f.name not in reserved]
    return st.StructType(payload + value_field + meta_fields)


def _infer_payload(opts: options.SourceOptions, journals: Sequence[Journal]) -> st.StructType:
    sample = bytearray()
    for journal in journals[: opts.sample_journals]:
        data = _sample(opts, journal)
        if data:
            sample += data if data.endswith(b"\n") else data + b"\n"
    if not sample:
        return st.StructType([])
    data = pa.py_buffer(bytes(sample))
    malformed = 0
    try:
        try:
            table = jsonlines.read(data, threads=True)
        except pa.ArrowInvalid:
            if opts.mode == "FAILFAST":
                raise
            # Infer from the well-formed lines; malformed ones become corrupt records.
            lines = _split_lines(data)
            got = jsonlines.salvage(data, lines, _starts(lines).to_pylist(), jsonlines.read)
            malformed = len(got.malformed)
            good = b"".join(
                bytes(b) if bytes(b[-1:]) == b"\n" else bytes(b) + b"\n" for b in got.parsed
            )
            table = jsonlines.read(pa.py_buffer(good), threads=True) if good else pa.table({})
    except pa.ArrowInvalid as e:
        raise options.OptionError(
            "schema",
            f"cannot infer a JSON schema from {len(sample)} sampled bytes ({e}; option mode "
            f"{opts.mode}); give the payload's DDL as option schema",
        ) from e
    schema = pa.schema([pa.field(f.name, _inferable(f.type)) for f in table.schema])
    inferred: st.StructType = spark_arrow.from_arrow_schema(schema, prefer_timestamp_ntz=False)
    if malformed and opts.mode == "PERMISSIVE" and opts.corrupt_column not in inferred.names:
        # As Spark's JSON inference: a sample with malformed records adds the column.
        inferred = inferred.add(opts.corrupt_column, st.StringType())
    return inferred


def _inferable(t: pa.DataType) -> pa.DataType:
    """Inferred Arrow types as Spark's JSON inference types them: times and nulls as strings."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _inferable(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_inferable(t.value_type))
    if (
        pa.types.is_null(t)
        or pa.types.is_temporal(t)
        or pa.types.is_dictionary(t)
        or pa.types.is_large_string(t)
    ):
        return pa.string()
    return t


def _sample(opts: options.SourceOptions, journal: Journal) -> bytes:
    """Up to ``sample_bytes`` of ``journal``'s first whole lines."""
    pieces = _run(_list_pieces(opts, journal))
    out = bytearray()
    for piece in pieces:
        if piece.fragment is None and not opts.tail:
            continue
        piece = readable(opts, journal, piece)
        blocks = (
            store_blocks(opts, piece.fragment, piece.begin)
            if piece.fragment is not None
            else broker_blocks(opts, journal.name, piece.begin, piece.end)
        )
        try:
            for block in blocks:
                out += block
                if len(out) >= opts.sample_bytes:
                    # Whole lines only (a cut record would not parse); at least one.
                    cut = out.rfind(b"\n", 0, opts.sample_bytes)
                    if cut < 0:
                        cut = out.find(b"\n")
                    if cut >= 0:
                        return bytes(out[: cut + 1])
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()
    return bytes(out)


# -- Planning ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Piece:
    """Offsets ``[begin, end)`` of a journal: from a persisted ``fragment``, or brokers (None)."""

    begin: int
    end: int
    fragment: pb.Fragment | None = None


class GazettePartition(ds.InputPartition):
    """One persisted fragment, or a journal's unpersisted offsets (read from brokers)."""

    def __init__(self, journal: Journal, piece: Piece) -> None:
        super().__init__(None)
        self.journal = journal
        self.piece = piece

    def __repr__(self) -> str:
        where = "store" if self.piece.fragment is not None else "brokers"
        return (
            f"GazettePartition({self.journal.name}:[{self.piece.begin}, {self.piece.end}) {where})"
        )


async def _list_pieces(
    opts: options.SourceOptions,
    journal: Journal,
    jc: client.JournalClient | None = None,
) -> list[Piece]:
    """The journal's offsets as pieces: persisted fragments, and merged runs of the others."""
    if jc is None:
        async with client.JournalClient(_client_config(opts)) as own:
            return await _list_pieces(opts, journal, own)
    cs = cover_set.CoverSet()
    try:
        async for f in client.list_all_fragments(jc, pb.FragmentsRequest(journal=journal.name)):
            cs.add(cover_set.Fragment(f.spec))
    except client.errors.TransportError as e:
        raise options.BrokerUnavailableError(
            opts.broker, f"listing fragments of {journal.name}", e
        ) from e
    except client.errors.JournalNotFound:
        log.warning("journal %s was deleted while planning a read of it", journal.name)
        return []
    pieces: list[Piece] = []
    at = 0  # Offsets below were read from an earlier fragment (CoverSet ends increase).
    for frag in cs:
        begin = max(frag.begin, at)
        at = frag.end
        if frag.spec.backing_store and frag.mod_time != 0:
            pieces.append(Piece(begin, frag.end, frag.spec))
        elif pieces and pieces[-1].fragment is None and pieces[-1].end == begin:
            pieces[-1] = Piece(pieces[-1].begin, frag.end)
        else:
            pieces.append(Piece(begin, frag.end))
    return pieces


def plan_journal(opts: options.SourceOptions, journal: Journal) -> list[Piece]:
    """The pieces of one journal (blocking; for callers outside an event loop)."""
    return _run(_list_pieces(opts, journal))


@dataclasses.dataclass(frozen=True, slots=True)
class _OffsetRange:
    """Offsets a pushed ``_offset`` filter allows: ``[lo, hi]``, and a set if ``IN``."""

    lo: int = 0
    hi: int = (1 << 63) - 1
    values: frozenset[int] | None = None

    def overlaps(self, begin: int, end: int) -> bool:
        """Whether a record starting in ``[begin, end)`` may pass."""
        if end - 1 < self.lo or begin > self.hi or end <= begin:
            return False
        if self.values is not None:
            return any(begin <= v < end for v in self.values)
        return True

    def restricts(self) -> bool:
        """Whether some offset fails the range."""
        return self.lo > 0 or self.hi < (1 << 63) - 1 or self.values is not None

    def filter(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The rows of ``batches`` whose ``_offset`` is in the range (vectorised)."""
        allowed = None if self.values is None else pa.array(sorted(self.values), pa.int64())
        for batch in batches:
            offset = batch.column(OFFSET_COLUMN)
            mask = pc.and_(pc.greater_equal(offset, self.lo), pc.less_equal(offset, self.hi))
            if allowed is not None:
                mask = pc.and_(mask, pc.is_in(offset, value_set=allowed))
            kept = batch.filter(mask)
            if kept.num_rows:
                yield kept


def _offset_range(filters: Iterable[ds.Filter]) -> _OffsetRange:
    lo, hi, values = 0, (1 << 63) - 1, None

    def ints(vs: Iterable[Any]) -> frozenset[int] | None:
        out = frozenset(v for v in vs if isinstance(v, int) and not isinstance(v, bool))
        return None if len(out) != len(tuple(vs)) else out

    for f in filters:
        v = getattr(f, "value", None)
        if isinstance(f, ds.In):
            vs = ints(f.value)
            if vs is not None:
                values = vs if values is None else values & vs
            continue
        if not isinstance(v, int) or isinstance(v, bool):
            continue
        if isinstance(f, ds.EqualTo | ds.EqualNullSafe):
            lo, hi = max(lo, v), min(hi, v)
        elif isinstance(f, ds.GreaterThan):
            lo = max(lo, v + 1)
        elif isinstance(f, ds.GreaterThanOrEqual):
            lo = max(lo, v)
        elif isinstance(f, ds.LessThan):
            hi = min(hi, v - 1)
        elif isinstance(f, ds.LessThanOrEqual):
            hi = min(hi, v)
    return _OffsetRange(lo, hi, values)


def _eval(f: ds.Filter, row: dict[str, str | None]) -> bool | None:
    """Whether ``f`` holds for a journal's constant columns; None when it can't be told.

    Only a definite False prunes a journal, and Spark evaluates every filter
    again on the rows, so "can't tell" is always safe.
    """
    if isinstance(f, ds.Not):
        inner = _eval(f.child, row)
        return False if inner is True else None
    attr: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attr) != 1 or attr[0] not in row:
        return None
    col = row[attr[0]]
    if isinstance(f, ds.IsNull):
        return col is None
    if isinstance(f, ds.IsNotNull):
        return col is not None
    if isinstance(f, ds.In):
        if not all(isinstance(v, str) for v in f.value):
            return None
        return col is not None and col in f.value
    v = getattr(f, "value", None)
    if not isinstance(v, str):
        return None
    if isinstance(f, ds.EqualNullSafe):
        return col == v
    if col is None:
        return False
    checks: dict[type[ds.Filter], Callable[[str, str], bool]] = {
        ds.EqualTo: lambda c, x: c == x,
        ds.GreaterThan: lambda c, x: c > x,
        ds.GreaterThanOrEqual: lambda c, x: c >= x,
        ds.LessThan: lambda c, x: c < x,
        ds.LessThanOrEqual: lambda c, x: c <= x,
        ds.StringStartsWith: lambda c, x: c.startswith(x),
        ds.StringEndsWith: lambda c, x: c.endswith(x),
        ds.StringContains: lambda c, x: x in c,
    }
    check = checks.get(type(f))
    return None if check is None else check(col, v)


def _pushed_names(filters: Iterable[ds.Filter]) -> list[str]:
    """Journal names that ``_journal`` equality filters allow (empty: no such filter)."""
    for f in filters:
        attr = getattr(f, "attribute", ())
        if attr != (JOURNAL_COLUMN,):
            continue
        if isinstance(f, ds.EqualTo) and isinstance(f.value, str):
            return [f.value]
        if isinstance(f, ds.In) and all(isinstance(v, str) for v in f.value):
            return sorted(set(f.value))
    return []


#: Filters applied exactly to a journal's constant (string) columns.
_CONSTANT_FILTERS = (
    ds.EqualTo,
    ds.EqualNullSafe,
    ds.GreaterThan,
    ds.GreaterThanOrEqual,
    ds.LessThan,
    ds.LessThanOrEqual,
    ds.StringStartsWith,
    ds.StringEndsWith,
    ds.StringContains,
)
#: Filters applied exactly to ``_offset`` (an integer bound or set).
_OFFSET_FILTERS = (
    ds.EqualTo,
    ds.EqualNullSafe,
    ds.GreaterThan,
    ds.GreaterThanOrEqual,
    ds.LessThan,
    ds.LessThanOrEqual,
)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _applies_exactly(f: ds.Filter, schema: st.StructType, journals: Sequence[Journal]) -> bool:
    """Whether the reader applies ``f`` itself, so Spark need not check it again.

    Two kinds: a comparison of a string column that is constant in every
    journal read (``_journal``, a Hive segment every name has, a requested
    label), decided per journal by :func:`_eval` (which answers these exactly,
    SQL nulls included); and an integer bound or set on ``_offset``, whose rows
    :class:`_OffsetRange` filters. Anything else goes back to Spark.
    """
    attr: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attr) != 1 or attr[0] not in schema.names:
        return False
    name = attr[0]
    if name == OFFSET_COLUMN:
        if isinstance(f, ds.In):
            return bool(f.value) and all(_is_int(v) for v in f.value)
        return isinstance(f, _OFFSET_FILTERS) and _is_int(getattr(f, "value", None))
    if not isinstance(schema[name].dataType, st.StringType):
        return False
    if not all(name in j.constants() for j in journals):
        return False
    if isinstance(f, ds.IsNull | ds.IsNotNull):
        return True
    if isinstance(f, ds.In):
        return all(isinstance(v, str) for v in f.value)
    return isinstance(f, _CONSTANT_FILTERS) and isinstance(getattr(f, "value", None), str)


class GazetteReader(ds.DataSourceReader):
    """Plans a batch read (one partition per fragment) and reads partitions as Arrow batches."""

    def __init__(self, opts: options.SourceOptions, schema: st.StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.filters: list[ds.Filter] = []
        #: Rows of a partition pass this ``_offset`` range (from filters Spark won't re-check).
        self.offsets = _OffsetRange()
        self._journals: list[Journal] | None = None

    def pushFilters(self, filters: list[ds.Filter]) -> Iterable[ds.Filter]:
        """Prune with every filter; return those not applied exactly, for Spark to check.

        The ones kept show in ``df.explain()`` as ``PushedFilters``. Journals are
        listed here, once, as whether a column is constant depends on them.
        """
        self.filters = list(filters)
        self._journals = list_journals(self.opts, names=_pushed_names(self.filters))
        exact = [f for f in filters if _applies_exactly(f, self.schema, self._journals)]
        self.offsets = _offset_range(
            f for f in exact if getattr(f, "attribute", ()) == (OFFSET_COLUMN,)
        )
        return [f for f in filters if not any(f is e for e in exact)]

    def partitions(self) -> list[ds.InputPartition]:
        opts = self.opts
        journals = self._journals
        if journals is None:
            journals = list_journals(opts, names=_pushed_names(self.filters))
        journals = [
            j for j in journals if not any(_eval(f, j.constants()) is False for f in self.filters)
        ]
        offset_range = _offset_range(
            f for f in self.filters if getattr(f, "attribute", ()) == (OFFSET_COLUMN,)
        )

        async def plan_all() -> list[list[Piece]]:
            sem = asyncio.Semaphore(LIST_CONCURRENCY)
            async with client.JournalClient(_client_config(opts)) as jc:

                async def one(j: Journal) -> list[Piece]:
                    async with sem:
                        return await _list_pieces(opts, j, jc)

                return list(await asyncio.gather(*(one(j) for j in journals)))

        out: list[ds.InputPartition] = []
        for journal, pieces in zip(journals, _run(plan_all()), strict=True):
            for piece in pieces:
                if piece.fragment is None and not opts.tail:
                    continue
                if not offset_range.overlaps(piece.begin, piece.end):
                    continue
                out.append(GazettePartition(journal, readable(opts, journal, piece)))
        return out

    def read(self, partition: ds.InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, GazettePartition):
            return iter(())  # Spark's single empty partition, when nothing matched.
        batches = _read_partition(self.opts, self.schema, partition)
        return self.offsets.filter(batches) if self.offsets.restricts() else batches


def readable(opts: options.SourceOptions, journal: Journal, piece: Piece) -> Piece:
    """``piece``, or its offsets read through the brokers when its fragment is in a
    ``file://`` store and option ``file_root`` does not say where that is mounted
    here: the brokers read their own store, as ``gazctl journals read`` does (slower
    than a direct read; set ``file_root`` to read the files themselves)."""
    if piece.fragment is None or opts.file_root:
        return piece
    if not piece.fragment.backing_store.startswith("file:"):
        return piece
    if journal.name not in _WARNED_FILE_ROOT:
        _WARNED_FILE_ROOT.add(journal.name)
        log.warning(
            "journal %s has fragments in %s: reading them through the brokers "
            "(option file_root, the directory rooting file:// stores, reads them directly)",
            journal.name,
            piece.fragment.backing_store,
        )
    return Piece(piece.begin, piece.end)


#: Journals whose file:// fragments were said to be read through the brokers.
_WARNED_FILE_ROOT: set[str] = set()


# -- Reading ----------------------------------------------------------------------------


def _drive(agen: AsyncIterator[bytes]) -> Iterator[bytes]:
    """Iterate an async generator from synchronous code, on this thread's loop.

    Not an ``asyncio.Runner`` per read: on the main thread (Spark's Python worker)
    each ``Runner.run`` inspects the SIGINT handler the previous one installed, whose
    repr holds the previous task and its result, a multi-megabyte chunk, repr'd in
    full: 60% of a fragment's read time (found by bench_spark). Nor a loop of its
    own: see :func:`_loop`.
    """
    loop = _loop()
    closing: list[AsyncIterator[bytes]] = _THREAD.closing  # This loop's thread's.

    async def step() -> bytes | None:
        try:
            return await anext(agen)
        except StopAsyncIteration:
            return None

    try:
        while (chunk := loop.run_until_complete(step())) is not None:
            yield chunk
    finally:
        if loop.is_running():
            # Collected while another read runs on the loop: closed (its RPC ended, on
            # this loop) by the next use of the loop, once that read is done.
            closing.append(agen)
        else:
            _aclose(loop, agen)


def store_blocks(
    opts: options.SourceOptions, fragment: pb.Fragment, offset: int
) -> Iterator[bytes]:
    """Decoded content of a persisted fragment from ``offset``, read from its store."""
    # Imported here: the store modules import boto3 (a second), which only readers need.
    from gazette.broker.fragment import errors as fragment_errors
    from gazette.broker.fragment import reader as fragment_reader
    from gazette.broker.fragment import stores

    if opts.trace_opened:
        _trace(opts.trace_opened, fragment)
    config = stores.StoresConfig(file_root=opts.file_root or stores.UNCONFIGURED_FILE_ROOT)

    async def blocks() -> AsyncIterator[bytes]:
        registry = stores.StoreRegistry(config)
        try:
            async for chunk in fragment_reader.read_fragment(
                registry, fragment, offset, block_size=STORE_READ_BLOCK
            ):
                yield chunk
        except fragment_errors.FragmentError as e:
            raise options.ReadError(
                fragment.journal, offset, f"fragment {pb.fragment_path(fragment)}: {e}"
            ) from e

    return _drive(blocks())


def _trace(path: str, fragment: pb.Fragment) -> None:
    line = f"{fragment.journal} {fragment.begin} {fragment.end}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # One O_APPEND write: lines of concurrent tasks never interleave.
    finally:
        os.close(fd)


def broker_blocks(
    opts: options.SourceOptions, journal: str, begin: int, end: int
) -> Iterator[bytes]:
    """Content of ``journal`` in ``[begin, end)``, read through the brokers."""

    async def blocks() -> AsyncIterator[bytes]:
        at = begin
        async with client.JournalClient(_client_config(opts)) as jc:
            req = pb.ReadRequest(journal=journal, offset=begin, end_offset=end, block=False)
            try:
                async with client.RetryReader(jc, req) as rr:
                    async for chunk in rr:
                        at += len(chunk)
                        yield chunk
                        if at >= end:
                            break
            except client.errors.TransportError as e:
                raise options.BrokerUnavailableError(opts.broker, f"reading {journal}", e) from e
            except client.errors.ClientError as e:
                raise options.ReadError(journal, at, str(e)) from e
        if at != end:
            raise options.ReadError(
                journal, at, f"the brokers' content ended at {at}, before {end}"
            )

    return _drive(blocks())


def _line_blocks(blocks: Iterable[bytes], begin: int, size: int) -> Iterator[tuple[int, pa.Buffer]]:
    """(offset, buffer) blocks of about ``size`` bytes, each ending after a newline (but the last).

    Buffers are zero-copy slices of the joined chunks: a block is copied once.
    """
    parts: list[bytes] = []
    pending = 0
    offset = begin
    for chunk in blocks:
        parts.append(chunk)
        pending += len(chunk)
        if pending < size:
            continue
        data = b"".join(parts) if len(parts) > 1 else parts[0]
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            parts, pending = [data], len(data)
            continue
        yield offset, pa.py_buffer(data).slice(0, cut)
        offset += cut
        rest = data[cut:]
        parts, pending = ([rest] if rest else []), len(rest)
    if pending:
        yield offset, pa.py_buffer(b"".join(parts))


_split_lines = jsonlines.split_lines
_starts = jsonlines.line_starts


class RowBuilder:
    """Turns a journal's line-aligned blocks into record batches of the output ``schema``.

    ``mode`` and ``corrupt_column`` are the source's options of those names: what a
    malformed JSON record does (:mod:`gazette.spark.jsonlines`).
    """

    def __init__(
        self,
        schema: st.StructType,
        journal: Journal,
        mode: str = "PERMISSIVE",
        corrupt_column: str = options.CORRUPT_RECORD_COLUMN,
    ) -> None:
        self.journal = journal
        self.mode = mode
        # Exactly the Arrow schema Spark's worker checks batches against.
        self.arrow_schema: pa.Schema = spark_arrow.to_arrow_schema(schema, timezone="UTC")
        self.constants = {
            k: v for k, v in journal.constants().items() if k in self.arrow_schema.names
        }
        reserved = {*self.constants, OFFSET_COLUMN}
        if not journal.json:
            reserved.add(VALUE_COLUMN)
        #: The column of malformed records' text, when the schema has it (PERMISSIVE).
        self.corrupt: str | None = None
        if (
            journal.json
            and mode == "PERMISSIVE"
            and corrupt_column in self.arrow_schema.names
            and corrupt_column not in reserved
        ):
            self.corrupt = corrupt_column
            reserved.add(corrupt_column)
        self.payload = [f for f in self.arrow_schema if f.name not in reserved]
        self.json_schema = pa.schema(
            [pa.field(f.name, _json_read_type(f.type), nullable=True) for f in self.payload]
        )
        self.parser = jsonlines.Parser(
            self.json_schema,
            mode,
            corrupt=self.corrupt is not None,
            count_only=not self.payload and self.corrupt is None,
        )

    def batches(self, offset: int, data: pa.Buffer) -> Iterator[pa.RecordBatch]:
        """Batches of the records of ``data``, whose first byte is at ``offset``."""
        lines = _split_lines(data)
        starts = _starts(lines)
        columns: dict[str, pa.Array | pa.ChunkedArray] = {}
        if self.journal.json:
            try:
                table, keep, corrupt = self.parser.parse(data, lines)
            except jsonlines.MalformedError as e:
                raise options.ReadError(self.journal.name, offset, str(e)) from e
            if keep is not None:
                starts = starts.filter(keep)
            for f in self.payload:
                col = table.column(f.name)
                columns[f.name] = col if col.type == f.type else _cast(col, f, offset, self)
            n = len(starts)
            if self.corrupt is not None:
                columns[self.corrupt] = corrupt if corrupt is not None else pa.nulls(n, pa.string())
        else:
            n = len(lines)
            if VALUE_COLUMN in self.arrow_schema.names:
                field = self.arrow_schema.field(VALUE_COLUMN)
                columns[VALUE_COLUMN] = _text(lines, field.type)
            for f in self.payload:
                columns[f.name] = pa.nulls(n, f.type)
        if n == 0:
            return
        columns[OFFSET_COLUMN] = pc.add(starts, offset)
        for name, value in self.constants.items():
            field = self.arrow_schema.field(name)
            columns[name] = _constant(value, field.type, n, self.journal.name, name)
        arrays = []
        for f in self.arrow_schema:
            col = columns[f.name]
            if col.type != f.type:
                col = _cast(col, f, offset, self)
            arrays.append(col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col]))
        # One batch per block: Spark ingests a few large batches much faster than many
        # small ones (pyarrow.json's chunks hold ~5,000 rows), for the cost of a copy.
        table = pa.Table.from_arrays(arrays, schema=self.arrow_schema)
        yield from table.combine_chunks().to_batches()


def _json_read_type(t: pa.DataType) -> pa.DataType:
    """The type pyarrow.json reads a field as (cast to ``t`` afterwards)."""
    if pa.types.is_date(t) or pa.types.is_decimal(t) or pa.types.is_binary(t):
        return pa.string()
    return t


def _text(lines: pa.Array, t: pa.DataType) -> pa.Array:
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return lines.cast(t)
    try:
        return lines.cast(pa.large_string()).cast(t)
    except pa.ArrowInvalid:
        # Not UTF-8: decode line by line, replacing bad bytes (rare, so slow is fine).
        return pa.array([b.decode("utf-8", "replace") for b in lines.to_pylist()], t)


def _constant(value: str | None, t: pa.DataType, n: int, journal: str, name: str) -> pa.Array:
    if value is None:
        return pa.nulls(n, t)
    try:
        scalar = pa.scalar(value, pa.string()).cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise options.ReadError(
            journal, 0, f"column {name} = {value!r} is not a {t} as the schema says: {e}"
        ) from e
    return pa.repeat(scalar, n)


def _cast(
    col: pa.Array | pa.ChunkedArray, field: pa.Field, offset: int, rb: RowBuilder
) -> pa.Array | pa.ChunkedArray:
    try:
        return col.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise options.ReadError(
            rb.journal.name,
            offset,
            f"column {field.name}: cannot convert {col.type} to {field.type}: {e}",
        ) from e


def _read_partition(
    opts: options.SourceOptions, schema: st.StructType, partition: GazettePartition
) -> Iterator[pa.RecordBatch]:
    journal, piece = partition.journal, partition.piece
    builder = RowBuilder(schema, journal, opts.mode, opts.corrupt_column)
    blocks = (
        store_blocks(opts, piece.fragment, piece.begin)
        if piece.fragment is not None
        else broker_blocks(opts, journal.name, piece.begin, piece.end)
    )
    for offset, data in _line_blocks(blocks, piece.begin, opts.batch_bytes):
        yield from builder.batches(offset, data)
