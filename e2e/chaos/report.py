"""What a scenario reports, and the table ``make chaos`` prints."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

from chaos.checker import Verdict
from chaos.clusters import Exit

__all__ = ["Report", "table"]


@dataclasses.dataclass
class Report:
    scenario: str
    faults: int
    verdict: Verdict
    exits: list[Exit]
    #: (fault label, seconds of the longest gap between acks around it).
    gaps: list[tuple[str, float]]
    #: Journals not writable within the bound after a fault (or after healing).
    unwritable: list[str] = dataclasses.field(default_factory=list)
    #: Processes a SIGTERM (or ``make down``) had to escalate to SIGKILL, or that exited non-zero.
    forced: list[str] = dataclasses.field(default_factory=list)
    hung: int = 0
    attempts: int = 0
    errors: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    bad_acks: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def max_gap(self) -> float:
        return max((g for _, g in self.gaps), default=0.0)

    def describe(self) -> str:
        """Every figure, and the first few of each kind of failure: the assertion message."""
        v = self.verdict
        lines = [
            f"scenario {self.scenario}: {self.faults} faults in {self.seconds:.0f}s; "
            f"{v.acked} acked appends ({v.acked_bytes} bytes), {v.bytes_verified} bytes "
            f"verified of {v.bytes_read} read; LOST {len(v.lost)}; duplicated {v.duplicated}; "
            f"holes {len(v.holes)}; garbage bytes {v.garbage_bytes}; aborted visible "
            f"{len(v.aborted_visible)}; brokers exited on their own {len(self.exits)}; "
            f"forced/unclean stops {len(self.forced)}; unwritable {len(self.unwritable)}; "
            f"hung appends {self.hung} of {self.attempts} attempts; "
            f"max write unavailability {self.max_gap:.1f}s",
        ]
        if v.store is not None:
            lines.append(
                f"  stored fragments: {v.store.fragments} checked, {v.store.overlaps} overlapping "
                f"pairs ({v.store.overlap_bytes} bytes compared); CONFLICTS "
                f"{len(v.store.conflicts)}; other files {len(v.store.strays)}"
            )
        lines += [
            "  unavailability per fault: "
            + ", ".join(f"{label} {g:.1f}s" for label, g in self.gaps),
            f"  failed attempts: {dict(self.errors.most_common())}",
        ]
        for title, items in (
            ("lost", v.lost),
            ("holes", [str(h) for h in v.holes]),
            ("garbage", v.garbage),
            ("aborted visible", v.aborted_visible),
            ("conflicting fragments", v.conflicts),
            ("exited on their own", [str(e) for e in self.exits]),
            ("forced", self.forced),
            ("unwritable", self.unwritable),
            ("bad acks", self.bad_acks),
            ("notes", self.notes),
        ):
            if items:
                lines.append(f"  {title} ({len(items)}): " + "; ".join(items[:5]))
        return "\n".join(lines)


_COLUMNS = (
    ("scenario", 28),
    ("faults", 6),
    ("acked", 7),
    ("bytes verified", 14),
    ("lost", 5),
    ("dup", 5),
    ("holes", 5),
    ("conflicts", 9),
    ("exited", 6),
    ("forced", 6),
    ("unwritable", 10),
    ("hung", 5),
    ("max unavail s", 13),
)


def table(reports: Sequence[Report]) -> str:
    """One row per scenario: the figures of the brief, and a few more."""
    header = "  ".join(
        f"{name:>{w}}" if i else f"{name:<{w}}" for i, (name, w) in enumerate(_COLUMNS)
    )
    rows = [header, "-" * len(header)]
    for r in reports:
        v = r.verdict
        cells = (
            r.scenario,
            r.faults,
            v.acked,
            v.bytes_verified,
            len(v.lost),
            v.duplicated,
            len(v.holes),
            len(v.conflicts) if v.store is not None else "-",
            len(r.exits),
            len(r.forced),
            len(r.unwritable),
            r.hung,
            f"{r.max_gap:.1f}",
        )
        rows.append(
            "  ".join(
                f"{c!s:>{w}}" if i else f"{c!s:<{w}}"
                for i, (c, (_, w)) in enumerate(zip(cells, _COLUMNS, strict=True))
            )
        )
    return "\n".join(rows)
