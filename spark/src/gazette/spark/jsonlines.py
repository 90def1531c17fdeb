"""JSON lines into Arrow tables, and what is left of a block that has malformed records.

``pyarrow.json`` parses a block of lines at once, in native code, and fails the
whole block on its first malformed line. Spark's JSON reader instead keeps going
(its ``mode`` option): ``PERMISSIVE`` turns a malformed record into a row of
nulls and keeps its text, ``DROPMALFORMED`` skips it, ``FAILFAST`` fails. To do
the same without parsing every line on its own, :func:`salvage` bisects a block
that failed: each half that parses is kept whole, each that fails is split
again, down to single lines, which are the malformed ones. One bad line in a
block of *n* costs about 2 log2(n) parses of shrinking ranges; a block of
nothing but bad lines, about 2n small ones. Blocks that parse pay nothing.

A line is malformed when it is not one JSON object: not JSON at all, a scalar or
array, or two objects on one line (fewer or more records than lines). Blank lines
are no records, as for ``pyarrow.json``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

# pyarrow ships no type information (no py.typed); its values are Any here.
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.json as pajson  # type: ignore[import-untyped]

__all__ = [
    "JSON_BLOCK",
    "MalformedError",
    "Parser",
    "Salvaged",
    "line_starts",
    "nonblank",
    "read",
    "salvage",
    "split_lines",
]

#: Smallest pyarrow.json block (a block is parsed whole).
JSON_BLOCK = 1 << 20


def read(data: pa.Buffer, schema: pa.Schema | None = None, *, threads: bool = False) -> pa.Table:
    """The records of JSON lines ``data``, typed by ``schema`` (fields it lacks are
    ignored) or inferred; raises ``pa.ArrowInvalid`` on a malformed record."""
    parse = (
        pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        if schema is not None
        else pajson.ParseOptions()
    )
    return pajson.read_json(
        pa.BufferReader(data),
        read_options=pajson.ReadOptions(
            block_size=max(JSON_BLOCK, data.size + 1), use_threads=threads
        ),
        parse_options=parse,
    )


def split_lines(data: pa.Buffer) -> pa.Array:
    """The lines of ``data`` (newlines dropped; no empty last line after a final newline)."""
    offsets = pa.array([0, data.size], pa.int64())
    whole = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets.buffers()[1], data])
    lines = pc.split_pattern(whole, pattern="\n").flatten()
    if data.size and memoryview(data)[-1] == ord("\n"):
        lines = lines.slice(0, len(lines) - 1)
    return lines


def line_starts(lines: pa.Array) -> pa.Array:
    """Offset of each line's first byte relative to the first line (int64)."""
    step = pc.add(pc.binary_length(lines).cast(pa.int64()), 1)
    return pc.subtract(pc.cumulative_sum(step), step)


def nonblank(lines: pa.Array) -> pa.Array:
    """Whether each line holds more than ASCII whitespace (a boolean array)."""
    text = lines.view(pa.large_string())  # Only ASCII whitespace is looked at.
    return pc.greater(pc.binary_length(pc.ascii_trim_whitespace(text)), 0)


@dataclasses.dataclass(frozen=True)
class Salvaged:
    """What parses of a block that did not parse whole."""

    #: Records of the well-formed lines, in line order (empty: no well-formed line).
    tables: tuple[pa.Table, ...]
    #: Raw bytes of the ranges those tables came from, in order (for re-reading).
    parsed: tuple[pa.Buffer, ...]
    #: Indexes of the malformed lines, ascending.
    malformed: tuple[int, ...]


def salvage(
    data: pa.Buffer,
    lines: pa.Array,
    starts: list[int],
    parse: Callable[[pa.Buffer], pa.Table],
) -> Salvaged:
    """Bisect ``data`` (its ``lines``, starting at byte ``starts``) into the ranges
    ``parse`` reads, one record a non-blank line, and the lines it does not."""
    records = list(itertools.accumulate((int(b) for b in nonblank(lines).to_pylist()), initial=0))
    ends = [*starts[1:], data.size]
    tables: list[pa.Table] = []
    parsed: list[pa.Buffer] = []
    malformed: list[int] = []
    # Ranges [lo, hi) of lines, depth first and leftmost first: results come in order.
    pending = [(0, len(starts))]
    while pending:
        lo, hi = pending.pop()
        want = records[hi] - records[lo]
        if want == 0:
            continue
        segment = data.slice(starts[lo], ends[hi - 1] - starts[lo])
        try:
            table = parse(segment)
        except pa.ArrowInvalid:
            table = None
        if table is not None and table.num_rows == want:
            tables.append(table)
            parsed.append(segment)
        elif hi - lo == 1:
            malformed.append(lo)
        else:
            mid = (lo + hi) // 2
            pending += [(mid, hi), (lo, mid)]
    return Salvaged(tuple(tables), tuple(parsed), tuple(malformed))


class MalformedError(ValueError):
    """A block has a malformed record and the mode is FAILFAST (the message says which)."""


class Parser:
    """Parses blocks of JSON lines into ``schema``'s columns, as ``mode`` says.

    ``corrupt``: keep the text of PERMISSIVE's malformed records (the schema has the
    column); ``count_only``: the schema has no payload column, so records are
    counted, not parsed.
    """

    def __init__(
        self, schema: pa.Schema, mode: str, *, corrupt: bool = False, count_only: bool = False
    ) -> None:
        self.schema = schema
        self.mode = mode
        self.corrupt = corrupt
        self.count_only = count_only

    def parse(
        self, data: pa.Buffer, lines: pa.Array
    ) -> tuple[pa.Table, pa.Array | None, pa.Array | None]:
        """The records of ``data`` (split into ``lines``): their payload table, a mask of
        the lines they came from (None: every line), and per record the text of the
        malformed ones (None: no such column)."""
        nonempty = pc.greater(pc.binary_length(lines), 0)
        expected = pc.sum(nonempty).as_py() or 0
        if self.count_only:
            return pa.table({}), nonblank(lines), None
        # One block, one thread: a Spark task has a core to itself, and threads would
        # only add contention and leave many small chunks to combine (bench_spark).
        try:
            table = read(data, self.schema)
        except pa.ArrowInvalid as e:
            if self.mode == "FAILFAST":
                raise MalformedError(f"parsing JSON lines: {e} (option mode FAILFAST)") from e
            return self._salvage(data, lines)
        if table.num_rows == expected:
            return table, (None if expected == len(lines) else nonempty), None
        keep = nonblank(lines)  # Whitespace-only lines, which pyarrow skips too.
        if table.num_rows == (pc.sum(keep).as_py() or 0):
            return table, keep, None
        if self.mode == "FAILFAST":
            raise MalformedError(
                f"{table.num_rows} JSON records in {len(lines)} lines: records must be one "
                "per line (option mode FAILFAST)"
            )
        return self._salvage(data, lines)

    def _salvage(
        self, data: pa.Buffer, lines: pa.Array
    ) -> tuple[pa.Table, pa.Array, pa.Array | None]:
        """A block with malformed records, as PERMISSIVE or DROPMALFORMED read it.

        Runs only for blocks that failed to parse whole; its loops go over their
        lines, once each.
        """
        got = salvage(data, lines, line_starts(lines).to_pylist(), lambda b: read(b, self.schema))
        good = pa.concat_tables(got.tables) if got.tables else self.schema.empty_table()
        bad = set(got.malformed)
        lines_kept = nonblank(lines).to_pylist()
        if self.mode == "DROPMALFORMED":
            keep = [ok and i not in bad for i, ok in enumerate(lines_kept)]
            return good, pa.array(keep, pa.bool_()), None
        positions: list[int | None] = []  # Per record: its row of `good`, None if malformed.
        texts: list[str | None] = []
        parsed = 0
        for i, ok in enumerate(lines_kept):
            if not ok:
                continue
            if i in bad:
                positions.append(None)
                texts.append(lines[i].as_py().decode("utf-8", "replace"))
            else:
                positions.append(parsed)
                texts.append(None)
                parsed += 1
        table = good.take(pa.array(positions, pa.int64()))
        corrupt = pa.array(texts, pa.string()) if self.corrupt else None
        return table, pa.array(lines_kept, pa.bool_()), corrupt
