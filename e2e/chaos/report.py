"""What a scenario reports, and the table ``make chaos`` prints."""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib
from collections.abc import Sequence

from chaos.checker import Verdict
from chaos.clusters import Exit

__all__ = ["DiskLoss", "Report", "figures", "save", "side_by_side", "table"]


@dataclasses.dataclass(frozen=True)
class DiskLoss:
    """Every broker lost its disk ``at`` (the workload's clock), when the store held
    ``stored``: per journal, the ``[begin, end)`` of its fragments."""

    at: float
    stored: dict[str, list[tuple[int, int]]]

    def holds(self, journal: str, begin: int, end: int) -> bool:
        """Whether stored fragments covered all of ``[begin, end)`` of ``journal``."""
        for b, e in sorted(self.stored.get(journal, ())):
            if b <= begin < e:
                begin = e
            if begin >= end:
                return True
        return begin >= end


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
    #: Each time every broker lost its disk: appends acknowledged before it and
    #: not yet stored may be lost with the disks, no other.
    disk_losses: list[DiskLoss] = dataclasses.field(default_factory=list)
    #: What a consumer scenario found wrong (None: the scenario ran no consumers).
    consumer_failures: list[str] | None = None

    @property
    def max_gap(self) -> float:
        return max((g for _, g in self.gaps), default=0.0)

    @property
    def lost_beyond_tail(self) -> list[str]:
        """Lost appends that were no unpersisted tail of a disk loss (none may be).

        An append may be lost with the disks only if the first loss after its
        acknowledgement found it not yet wholly in stored fragments; one
        acknowledged after the last loss, or stored before the next, must read.
        """
        if not self.disk_losses:
            return []
        out = []
        for a in self.verdict.lost_acks:
            loss = next((d for d in self.disk_losses if d.at >= a.at), None)
            if loss is None or loss.holds(a.journal, a.begin, a.end):
                out.append(f"{a.journal}@[{a.begin},{a.end}) {a.ids[0]}")
        return out

    def describe(self) -> str:
        """Every figure, and the first few of each kind of failure: the assertion message."""
        v = self.verdict
        lines = [
            f"scenario {self.scenario}: {self.faults} faults in {self.seconds:.0f}s; "
            f"{v.acked} acked appends ({v.acked_bytes} bytes), {v.bytes_verified} bytes "
            f"verified of {v.bytes_read} read; LOST {len(v.lost)}; ACKED TWICE {len(v.twice)}; "
            f"duplicated {v.duplicated} (of appends failed for sure: {len(v.denied_landed)}); "
            f"holes {len(v.holes)}; garbage bytes "
            f"{v.garbage_bytes}; aborted visible {len(v.aborted_visible)}; "
            f"processes exited on their own {len(self.exits)}; "
            f"forced/unclean stops {len(self.forced)}; unwritable {len(self.unwritable)}; "
            f"hung appends {self.hung} of {self.attempts} attempts; "
            f"max write unavailability {self.max_gap:.1f}s",
        ]
        if self.disk_losses:
            beyond = len(self.lost_beyond_tail)
            lines.append(
                f"  disks lost {len(self.disk_losses)} times: {len(v.lost) - beyond} appends lost "
                f"with their unpersisted tails, {beyond} lost beyond them; "
                f"{len(v.unstored_holes)} of the holes over offsets never stored"
            )
        if v.unstored_holes and not self.disk_losses:
            lines.append(
                f"  {len(v.unstored_holes)} of the holes jump offsets no fragment was ever stored"
                " at (the journal resumed past its acknowledgement fence)"
            )
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
            ("acked twice", v.twice),
            ("lost beyond an unpersisted tail", self.lost_beyond_tail),
            ("holes", [str(h) for h in v.holes]),
            ("garbage", v.garbage),
            ("aborted visible", v.aborted_visible),
            ("conflicting fragments", v.conflicts),
            ("exited on their own", [str(e) for e in self.exits]),
            ("forced", self.forced),
            ("unwritable", self.unwritable),
            ("failed for sure, yet in the journal", v.denied_landed),
            ("consumer", self.consumer_failures or []),
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
    ("twice", 5),
    ("dup", 5),
    ("holes", 5),
    ("conflicts", 9),
    ("exited", 6),
    ("forced", 6),
    ("unwritable", 10),
    ("hung", 5),
    ("consumer", 8),
    ("max unavail s", 13),
)


def figures(r: Report) -> dict[str, str]:
    """A scenario's row of the table, by column name (what :func:`save` keeps)."""
    v = r.verdict
    cells = (
        r.scenario,
        r.faults,
        v.acked,
        v.bytes_verified,
        len(v.lost),
        len(v.twice),
        v.duplicated,
        len(v.holes),
        len(v.conflicts) if v.store is not None else "-",
        len(r.exits),
        len(r.forced),
        len(r.unwritable),
        r.hung,
        "-" if r.consumer_failures is None else len(r.consumer_failures),
        f"{r.max_gap:.1f}",
    )
    return {name: str(c) for (name, _), c in zip(_COLUMNS, cells, strict=True)}


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(
        f"{c:>{w}}" if i else f"{c:<{w}}"
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


def table(reports: Sequence[Report]) -> str:
    """One row per scenario: the figures of the brief, and a few more."""
    widths = [w for _, w in _COLUMNS]
    header = _line([name for name, _ in _COLUMNS], widths)
    rows = [header, "-" * len(header)]
    rows += [_line(list(figures(r).values()), widths) for r in reports]
    return "\n".join(rows)


def save(reports: Sequence[Report], path: pathlib.Path) -> None:
    """Keep the table's rows as JSON (``CHAOS_TABLE_OUT``), for :func:`side_by_side`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([figures(r) for r in reports], indent=1) + "\n")


#: What :func:`side_by_side` compares: the verdict's figures and the unavailability.
_COMPARED = ("acked", "lost", "twice", "conflicts", "exited", "unwritable", "hung", "max unavail s")


def side_by_side(ours: Sequence[Report], theirs: Sequence[dict[str, str]], who: str) -> str:
    """Our figures beside another run's (saved by :func:`save`), per scenario both ran."""
    # Go runs name their scenarios with a "-go" suffix (see scenarios._on_net_cluster).
    by_name = {row["scenario"].removesuffix("-go"): row for row in theirs}
    shared = [r for r in ours if r.scenario in by_name]
    if not shared:
        return f"(no scenario ran both here and in the {who} run)"
    widths = [28, *(max(len(c), 6) for c in _COMPARED), 2, *(max(len(c), 6) for c in _COMPARED)]
    header = _line(["scenario", *_COMPARED, "|", *_COMPARED], widths)
    title = _line(
        ["", "ours:", *[""] * (len(_COMPARED) - 1), "|", f"{who}:", *[""] * (len(_COMPARED) - 1)],
        widths,
    )
    rows = [title, header, "-" * len(header)]
    for r in shared:
        mine, other = figures(r), by_name[r.scenario]
        rows.append(
            _line(
                [
                    r.scenario,
                    *(mine[c] for c in _COMPARED),
                    "|",
                    *(other.get(c, "?") for c in _COMPARED),
                ],
                widths,
            )
        )
    return "\n".join(rows)
