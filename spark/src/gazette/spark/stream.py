"""The stream reader of the ``gazette`` data source: ``spark.readStream.format("gazette")``.

Offsets are ``{journal: byte offset}``, one entry per journal of the selector,
kept sorted by name (Spark compares offsets as JSON text). Each micro-batch:

- :meth:`GazetteStreamReader.latestOffset` lists the journals of the selector
  and asks the brokers for each one's *write head* (a metadata-only read at
  offset -1, as ``gazctl journals reset-head`` does) — never a fragment
  listing, which lags the head by whatever is still in a broker's spool.
  Journals that started to match the selector are read from offset 0;
  journals that stopped matching (or were deleted) leave the offsets. An
  offset never moves backwards, so a journal recreated under the same name is
  read again only from where the old one ended.
- :meth:`GazetteStreamReader.partitions` lists the fragments of each journal
  with new content and cuts ``[start, end)`` at fragment boundaries: a
  persisted fragment's piece is read straight from its store by an executor,
  the rest (the spool, and anything listed after the planning) from the
  brokers. Pieces are not merged, so a batch re-planned after a restart gets
  the same partitions as long as its fragments keep their begin offsets —
  Spark's promise that ``(partition id, batch id)`` names the same rows, on
  which the sink's exactly-once relies.

Write heads are append boundaries (appends are atomic), so every offset of
this source falls between whole records of writers that append whole
records. ``Trigger.AvailableNow`` is supported (the heads at query start are
the target); processing-time triggers poll the heads once per trigger.

A selector that matches no journal yet is no error for a stream given a
schema (``readStream.schema(...)``): journals created later are picked up.
Without a schema, inferring one needs a matching journal.

Options (beyond the read options of :mod:`gazette.spark.options`):
``starting_offsets``: ``earliest`` (default: every journal from offset 0) or
``latest`` (the journals' write heads when the query first starts; a query
restarted from its checkpoint always resumes where it stopped).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

# pyarrow ships no type information (no py.typed); its values are Any here.
import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import datasource as ds
from pyspark.sql import types as st
from pyspark.sql.streaming import datasource as sds

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.fragment import cover_set
from gazette.spark import options, reader

__all__ = [
    "STARTING_OFFSETS",
    "STREAM_OPTIONS",
    "GazetteStreamReader",
    "plan_range",
    "read_piece",
    "write_heads",
]

log = logging.getLogger(__name__)

#: Options of the stream reader, beyond the read options.
STREAM_OPTIONS = ("starting_offsets",)
#: Values of the ``starting_offsets`` option.
STARTING_OFFSETS = ("earliest", "latest")
#: Attempts at a journal's write head while its brokers are being assigned.
HEAD_ATTEMPTS = 20
#: Seconds between those attempts.
HEAD_RETRY_DELAY = 0.25

Offsets = dict[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class StreamOptions:
    """The parsed options of one ``readStream`` of ``gazette``."""

    source: options.SourceOptions
    #: ``earliest`` or ``latest`` (see the module docstring).
    starting_offsets: str = "earliest"

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> StreamOptions:
        source = options.SourceOptions.parse(raw, extra=STREAM_OPTIONS)
        source.require_selector()
        if not source.tail:
            raise options.OptionError(
                "tail",
                "option tail=false is for batch reads: a stream always reads up to the "
                "journals' write heads",
            )
        starting = source.extra_option("starting_offsets", "earliest").strip().lower()
        if starting not in STARTING_OFFSETS:
            raise options.OptionError(
                "starting_offsets",
                f"option starting_offsets must be one of {STARTING_OFFSETS}, not {starting!r}",
            )
        return cls(source=source, starting_offsets=starting)


# Shared with batch reads: the client of a planner and a fresh event loop per call.
_client_config = reader._client_config
_run = reader._run


# -- Write heads ------------------------------------------------------------------------


async def _head(jc: client.JournalClient, journal: str) -> int | None:
    """The write head of ``journal`` (None if it no longer exists)."""
    attempt = 0
    while True:
        rd = client.Reader(jc, pb.ReadRequest(journal=journal, offset=-1, metadata_only=True))
        try:
            await rd.read()
            return int(rd.request.offset)
        except client.errors.OffsetJump as jump:
            # The Reader reports the jump from -1 before the response's status: a
            # missing journal also "jumps" to 0 (found by test_starting_offsets_latest...).
            status = rd.response.status
            if status in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE):
                return jump.to_offset
            if status == pb.JOURNAL_NOT_FOUND:
                return None
            error = client.errors.status_error(status, journal=journal)
            attempt += 1
            if not client.errors.is_transient(error) or attempt >= HEAD_ATTEMPTS:
                raise error from jump
        except client.errors.OffsetNotYetAvailable:
            return int(rd.response.offset)
        except client.errors.JournalNotFound:
            return None
        except client.errors.StatusError as e:
            # Routing statuses while the journal's brokers are (re)assigned.
            attempt += 1
            if not client.errors.is_transient(e) or attempt >= HEAD_ATTEMPTS:
                raise
        finally:
            await rd.close()
        await asyncio.sleep(HEAD_RETRY_DELAY)


def write_heads(opts: options.SourceOptions, journals: Sequence[str]) -> Offsets:
    """Write heads of ``journals`` (those that exist), read from the brokers' metadata."""

    async def go() -> Offsets:
        sem = asyncio.Semaphore(reader.LIST_CONCURRENCY)
        async with client.JournalClient(_client_config(opts)) as jc:

            async def one(name: str) -> int | None:
                async with sem:
                    return await _head(jc, name)

            try:
                heads = await asyncio.gather(*(one(n) for n in journals))
            except client.errors.TransportError as e:
                raise options.BrokerUnavailableError(opts.broker, "reading write heads", e) from e
            except client.errors.StatusError as e:
                raise options.ReadError(e.journal, -1, f"reading its write head: {e}") from e
        return {n: h for n, h in zip(journals, heads, strict=True) if h is not None}

    return _run(go())


# -- Planning ---------------------------------------------------------------------------


async def _fragments(
    opts: options.SourceOptions, jc: client.JournalClient, journal: str
) -> cover_set.CoverSet:
    cs = cover_set.CoverSet()
    try:
        async for f in client.list_all_fragments(jc, pb.FragmentsRequest(journal=journal)):
            cs.add(cover_set.Fragment(f.spec))
    except client.errors.TransportError as e:
        raise options.BrokerUnavailableError(
            opts.broker, f"listing fragments of {journal}", e
        ) from e
    except client.errors.JournalNotFound:
        log.warning("journal %s was deleted before its new content was read", journal)
    return cs


def plan_range(cs: cover_set.CoverSet, journal: str, begin: int, end: int) -> list[reader.Piece]:
    """Pieces covering ``[begin, end)`` of a journal whose fragments are ``cs``.

    One piece per fragment (clipped to the range): from its store when the
    fragment is persisted, else from the brokers; offsets past the listed
    fragments are read from the brokers. Offsets no fragment covers (removed
    by retention, or lost) are skipped with a warning.
    """
    pieces: list[reader.Piece] = []
    at = begin
    for frag in cs:
        if at >= end:
            break
        if frag.end <= at:
            continue
        lo, hi = max(frag.begin, at), min(frag.end, end)
        if lo >= end:
            break
        if lo > at:
            log.warning(
                "journal %s: offsets [%d, %d) are in no fragment (removed?); skipping them",
                journal,
                at,
                lo,
            )
        persisted = bool(frag.spec.backing_store) and frag.mod_time != 0
        pieces.append(reader.Piece(lo, hi, frag.spec if persisted else None))
        at = hi
    if at < end:
        pieces.append(reader.Piece(at, end))
    return pieces


def _list_by_name(opts: options.SourceOptions, names: Sequence[str]) -> dict[str, reader.Journal]:
    """Journals of ``names`` whatever their labels now (the offsets log already chose them)."""
    selector = pb.LabelSelector()
    for name in names:
        pb.add_value(selector.include, "name", name)

    async def go() -> pb.ListResponse:
        async with client.JournalClient(_client_config(opts)) as jc:
            try:
                return await client.list_journals(jc, selector)
            except client.errors.TransportError as e:
                raise options.BrokerUnavailableError(opts.broker, "listing journals", e) from e

    resp = _run(go())
    found = {j.spec.name: reader._journal(opts, j.spec) for j in resp.journals}
    for name in names:
        if name not in found:
            log.warning("journal %s was deleted before its new content was read", name)
    return found


# -- The reader -------------------------------------------------------------------------


class GazetteStreamReader(ds.DataSourceStreamReader, sds.SupportsTriggerAvailableNow):
    """Micro-batches of the journals of a selector, by byte offsets (see the module docstring).

    One instance lives in a Python process of the driver for the whole query:
    it keeps the ``Trigger.AvailableNow`` target and the last heads it saw.
    """

    def __init__(self, raw_options: Mapping[str, str], schema: st.StructType) -> None:
        self.stream_opts = StreamOptions.parse(raw_options)
        self.opts = self.stream_opts.source
        self.schema = schema
        self._target: Offsets | None = None
        self._latest: Offsets | None = None

    def _names(self) -> list[str]:
        try:
            return [j.name for j in reader.list_journals(self.opts)]
        except options.NoJournalsError:
            # Not an error for a stream: matching journals may be created later.
            log.info("selector %r matches no journal yet", self.opts.selector)
            return []

    def _heads(self) -> Offsets:
        heads = write_heads(self.opts, self._names())
        return dict(sorted(heads.items()))

    def initialOffset(self) -> dict[str, int]:
        if self.stream_opts.starting_offsets == "latest":
            return self._heads()
        return dict.fromkeys(sorted(self._names()), 0)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._heads()

    def latestOffset(self, start: dict[str, Any], limit: sds.ReadLimit) -> dict[str, int]:
        # A read limit other than ReadAllAvailable is never asked for: getDefaultReadLimit
        # is the default (ReadAllAvailable), and offsets can't be cut mid-record anyway.
        del limit
        heads = self._target if self._target is not None else self._heads()
        out: Offsets = {}
        for name, head in heads.items():
            was = int(start.get(name, 0))
            if head < was:
                log.warning(
                    "journal %s: write head %d is behind the offset read so far (%d): "
                    "was it deleted and recreated? Reading on from %d",
                    name,
                    head,
                    was,
                    was,
                )
            out[name] = max(head, was)
        for name in start:
            if name not in out:
                log.info("journal %s no longer matches the selector: no longer read", name)
        self._latest = out
        return out

    def reportLatestOffset(self) -> dict[str, int] | None:
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ds.InputPartition]:
        ranges = {
            name: (int(start.get(name, 0)), int(e))
            for name, e in sorted(end.items())
            if int(e) > int(start.get(name, 0))
        }
        if not ranges:
            return []
        opts = self.opts
        journals = _list_by_name(opts, list(ranges))

        async def plan_all() -> dict[str, cover_set.CoverSet]:
            sem = asyncio.Semaphore(reader.LIST_CONCURRENCY)
            async with client.JournalClient(_client_config(opts)) as jc:

                async def one(name: str) -> cover_set.CoverSet:
                    async with sem:
                        return await _fragments(opts, jc, name)

                names = list(journals)
                sets = await asyncio.gather(*(one(n) for n in names))
                return dict(zip(names, sets, strict=True))

        covers = _run(plan_all())
        out: list[ds.InputPartition] = []
        for name, (begin, end_offset) in ranges.items():
            if name not in journals:
                continue
            journal = journals[name]
            out.extend(
                reader.GazettePartition(journal, reader.readable(opts, journal, piece))
                for piece in plan_range(covers[name], name, begin, end_offset)
            )
        return out

    def read(self, partition: ds.InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, reader.GazettePartition), partition
        return read_piece(self.opts, self.schema, partition.journal, partition.piece)

    def commit(self, end: dict[str, Any]) -> None:
        del end  # Nothing to release: journals keep their content for other readers.

    def stop(self) -> None:
        self._target = None


def _clip(blocks: Iterator[bytes], begin: int, end: int) -> Iterator[bytes]:
    """The content of ``blocks`` (starting at ``begin``) up to ``end``."""
    at = begin
    try:
        for block in blocks:
            if at + len(block) >= end:
                yield block[: end - at]
                return
            at += len(block)
            yield block
    finally:
        close = getattr(blocks, "close", None)
        if close is not None:
            close()


def read_piece(
    opts: options.SourceOptions,
    schema: st.StructType,
    journal: reader.Journal,
    piece: reader.Piece,
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``journal``'s offsets ``[piece.begin, piece.end)``.

    A persisted fragment is read from its store and cut at ``piece.end`` (it
    may have been persisted after the batch's end was chosen, with more).
    """
    if piece.fragment is not None:
        blocks = _clip(
            reader.store_blocks(opts, piece.fragment, piece.begin), piece.begin, piece.end
        )
    else:
        blocks = reader.broker_blocks(opts, journal.name, piece.begin, piece.end)
    builder = reader.RowBuilder(schema, journal, opts.mode, opts.corrupt_column)
    for offset, data in reader._line_blocks(blocks, piece.begin, opts.batch_bytes):
        yield from builder.batches(offset, data)
