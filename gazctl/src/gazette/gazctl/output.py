"""Output helpers: aligned tables, byte counts, and progress lines on a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

__all__ = ["Progress", "human_bytes", "table"]


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


class Progress:
    """A self-overwriting status line on stderr, only when stderr is a terminal.

    ``quiet`` turns it off (e.g. when content goes to the same terminal).
    """

    def __init__(self, verb: str, *, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.enabled = not quiet and self.stream.isatty()
        self.verb = verb
        self.bytes = 0
        self.items = 0
        self._start = time.monotonic()
        self._last = 0.0

    def add(self, nbytes: int, items: int = 0) -> None:
        self.bytes += nbytes
        self.items += items
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last >= 0.2:
            self._last = now
            self._show(now)

    def _show(self, now: float) -> None:
        rate = self.bytes / max(now - self._start, 1e-6)
        items = f", {self.items} records" if self.items else ""
        self.stream.write(
            f"\r{self.verb} {human_bytes(self.bytes)}{items} ({human_bytes(rate)}/s)   "
        )
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self.bytes:
            self._show(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
