"""Output helpers: aligned tables, byte counts, Go-style JSON and progress lines.

- :func:`table` — the plain tables the listing commands print.
- :func:`human_bytes` — ``12.0 KiB``.
- :func:`go_json` — one compact JSON object as Go's ``encoding/json`` writes it,
  for commands whose Gazette counterpart prints Go structs (``fragments -o json``).
- :class:`Progress` — a status line on stderr (bytes, records, rate) for
  ``append`` and ``read`` runs that last longer than a second; ``--progress``
  (:data:`PROGRESS_MODES`) says when.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = ["PROGRESS_MODES", "Progress", "go_json", "human_bytes", "table"]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain, left-aligned table with a header row (as ``kubectl get`` prints them)."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    return "\n".join(lines) + "\n"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# Go's encoder escapes these even inside strings (its default SetEscapeHTML(true)),
# so that JSON is safe to embed in HTML; signed URLs carry '&'.
_GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_GO_ESCAPE_TABLE = str.maketrans(_GO_ESCAPES)


def go_json(value: Any) -> str:
    """``value`` as Go's ``json.Encoder.Encode`` writes it: compact, UTF-8, HTML-escaped.

    Key order is the caller's (Go's is the struct's field order). No newline.
    The escaped characters can only occur inside strings of the output, so
    translating the whole text is safe.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.translate(_GO_ESCAPE_TABLE)


#: ``--progress`` values: ``auto`` shows progress when stderr is a terminal
#: (and content is not going to that terminal too), ``always`` also into
#: files and pipes (a line each update), ``never`` never.
PROGRESS_MODES = ("auto", "always", "never")


class Progress:
    """A status line on stderr: bytes, records and rate of an ``append`` or ``read``.

    Nothing is shown during the first ``delay`` seconds, so quick commands stay
    silent; after that the line is refreshed at most every ``interval``
    seconds and finished by :meth:`done`. On a terminal the line overwrites
    itself; elsewhere (``--progress always`` into a log) each update is a line.

    ``content_on_terminal`` is for ``read`` to stdout: under ``auto``, a
    status line would garble content written to the same terminal.
    """

    def __init__(
        self,
        verb: str,
        mode: str = "auto",
        *,
        stream: TextIO | None = None,
        content_on_terminal: bool = False,
        clock: Callable[[], float] = time.monotonic,
        delay: float = 1.0,
        interval: float = 0.2,
    ) -> None:
        if mode not in PROGRESS_MODES:
            raise ValueError(f"progress mode must be one of {PROGRESS_MODES}, not {mode!r}")
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        if mode == "auto":
            self.enabled = self.tty and not content_on_terminal
        else:
            self.enabled = mode == "always"
        self.verb = verb
        self.bytes = 0
        self.records = 0
        self._clock = clock
        self._delay = delay
        # A line per update into a file or pipe: fewer of them.
        self._interval = interval if self.tty else max(interval, 1.0)
        self._start = clock()
        self._last: float | None = None

    def add(self, nbytes: int, records: int = 0) -> None:
        self.bytes += nbytes
        self.records += records
        if not self.enabled:
            return
        now = self._clock()
        if now - self._start < self._delay:
            return
        if self._last is None or now - self._last >= self._interval:
            self._show(now)

    def line(self, now: float) -> str:
        """The status text at ``now``: ``appended 1.5 MiB, 3000 records (750.0 KiB/s)``."""
        rate = self.bytes / max(now - self._start, 1e-6)
        records = f", {self.records} records" if self.records else ""
        return f"{self.verb} {human_bytes(self.bytes)}{records} ({human_bytes(rate)}/s)"

    def _show(self, now: float) -> None:
        self._last = now
        if self.tty:
            # Trailing spaces wipe what a longer previous line left behind.
            self.stream.write(f"\r{self.line(now)}   ")
        else:
            self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def done(self) -> None:
        """Show the final figures, if the run lasted long enough to show any."""
        if not self.enabled:
            return
        now = self._clock()
        if self._last is None and now - self._start < self._delay:
            return
        self._show(now)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
