"""FSMHints: which ops of a recovery log a player needs, and their etcd encoding.

Gazette stores hints in etcd as Go ``encoding/json`` of its generated structs:
zero scalars are omitted, lists are written even when empty (``null``), keys
in field order. :func:`hints_to_json` writes exactly that shape and
:func:`hints_from_value` reads it (or protobuf bytes: a value starting with
``{`` is JSON), so Go and Python consumers share hints.
"""

from __future__ import annotations

import json
from typing import Any

from gazette.consumer.recoverylog import errors
from gazette.consumer.recoverylog.recorded_op_pb2 import (
    FnodeSegments,
    FSMHints,
    Property,
    Segment,
)
from gazette.consumer.recoverylog.segments import SegmentSet

__all__ = ["hints_from_value", "hints_to_json", "live_log_segments"]

_SEGMENT_FIELDS = (
    "author",
    "first_seq_no",
    "first_offset",
    "first_checksum",
    "last_seq_no",
    "last_offset",
    "log",
)


def _segment_doc(s: Segment) -> dict[str, Any]:
    return {f: getattr(s, f) for f in _SEGMENT_FIELDS if getattr(s, f)}


def hints_to_json(hints: FSMHints) -> bytes:
    """Hints as Go's encoding/json writes them (what goes to etcd)."""
    doc: dict[str, Any] = {}
    if hints.log:
        doc["log"] = hints.log
    nodes = []
    for n in hints.live_nodes:
        node: dict[str, Any] = {}
        if n.fnode:
            node["fnode"] = n.fnode
        node["segments"] = [_segment_doc(s) for s in n.segments] or None
        nodes.append(node)
    doc["live_nodes"] = nodes or None
    props = []
    for p in hints.properties:
        prop: dict[str, Any] = {}
        if p.path:
            prop["path"] = p.path
        if p.content:
            prop["content"] = p.content
        props.append(prop)
    doc["properties"] = props or None
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    return text.translate(_GO_ESCAPES).encode()


# Go's encoding/json writes non-ASCII as UTF-8 but escapes these (HTML safety, and
# the two JavaScript line terminators); Python's json escapes none of them.
_GO_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def hints_from_value(value: bytes) -> FSMHints:
    """Hints from an etcd value: Go's JSON, or protobuf bytes."""
    if value.lstrip()[:1] != b"{":
        return FSMHints.FromString(value)
    try:
        doc = json.loads(value)
    except json.JSONDecodeError as e:
        raise errors.HintsError(f"hints are not valid JSON: {e}") from e
    hints = FSMHints(log=doc.get("log") or "")
    for node in doc.get("live_nodes") or ():
        out = FnodeSegments(fnode=int(node.get("fnode") or 0))
        for s in node.get("segments") or ():
            out.segments.add(**{f: s[f] for f in _SEGMENT_FIELDS if f in s})
        hints.live_nodes.append(out)
    for p in doc.get("properties") or ():
        hints.properties.append(Property(path=p.get("path", ""), content=p.get("content", "")))
    return hints


def live_log_segments(hints: FSMHints) -> tuple[list[int], SegmentSet]:
    """The hinted live fnodes in order, and the segments of the log that hold them.

    A segment without a log is of ``hints.log``; the last segment must be of
    ``hints.log`` (recording continues there).
    """
    fnodes: list[int] = []
    segments = SegmentSet()
    for node in hints.live_nodes:
        if not node.segments or node.segments[0].first_seq_no != node.fnode:
            raise errors.HintsError(
                f"expected Fnode to match Segment FirstSeqNo (fnode {node.fnode})"
            )
        if fnodes and fnodes[-1] >= node.fnode:
            raise errors.HintsError(
                f"expected monotonic Fnode ordering: {fnodes[-1]} vs {node.fnode}"
            )
        fnodes.append(node.fnode)
        for s in node.segments:
            seg = Segment()
            seg.CopyFrom(s)
            if not seg.log:
                seg.log = hints.log
            segments.add(seg)
    if len(segments) and segments[len(segments) - 1].log != hints.log:
        raise errors.HintsError(
            f"expected hints.Log {hints.log} to equal the last Segment Log"
            f" {segments[len(segments) - 1].log}"
        )
    return fnodes, segments
