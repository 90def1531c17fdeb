"""Small protocol helpers the server needs, delegating to ``gazette.broker.protocol``.

Kept in one module so the server names each helper once.
"""

from __future__ import annotations

import struct

from gazette.broker.protocol import labels as pb_labels
from gazette.broker.protocol import protocol_pb2 as pb2
from gazette.broker.protocol import selector as pb_selector

ZERO_ID = pb2.ProcessSpec.ID()


def route_equivalent(a: pb2.Route, b: pb2.Route) -> bool:
    """Same primary and members in the same order; endpoints don't count (§2.1)."""
    return a.primary == b.primary and list(a.members) == list(b.members)


def copy_labels(labels: pb2.LabelSet) -> pb2.LabelSet:
    out = pb2.LabelSet()
    out.CopyFrom(labels)
    return out


def selector_matches(selector: pb2.LabelSelector, labels: pb2.LabelSet) -> bool:
    return pb_selector.matches(selector, labels)


def union_labels(a: pb2.LabelSet, b: pb2.LabelSet) -> pb2.LabelSet:
    """Names of either; ``a``'s values win."""
    return pb_labels.union(a, b)


def subtract_labels(a: pb2.LabelSet, b: pb2.LabelSet) -> pb2.LabelSet:
    return pb_labels.subtract(a, b)


def may_write(spec: pb2.JournalSpec) -> bool:
    return spec.flags in (
        pb2.JournalSpec.NOT_SPECIFIED,
        pb2.JournalSpec.O_WRONLY,
        pb2.JournalSpec.O_RDWR,
    )


def may_read(spec: pb2.JournalSpec) -> bool:
    return spec.flags in (
        pb2.JournalSpec.NOT_SPECIFIED,
        pb2.JournalSpec.O_RDONLY,
        pb2.JournalSpec.O_RDWR,
    )


def sha1_sum(digest: bytes) -> pb2.SHA1Sum:
    p1, p2, p3 = struct.unpack(">QQI", digest)
    return pb2.SHA1Sum(part1=p1, part2=p2, part3=p3)


def strip_meta(journal: str) -> str:
    return journal.split(";", 1)[0]
