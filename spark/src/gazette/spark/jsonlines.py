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

__all__ = ["JSON_BLOCK", "Salvaged", "nonblank", "read", "salvage"]

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
