"""Checkpoints: read-through offsets, producer states and ACK intents, in one message.

Gazette's ``consumer/protocol/checkpoint_extensions.go``. A transaction's
Checkpoint is what the sequencer and publisher hold when it closes; the store
commits it with the transaction's state, and a new primary rebuilds the
sequencer from it (:func:`flatten_read_through`, :func:`flatten_producer_states`).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from gazette import message
from gazette.consumer import protocol as pc

__all__ = [
    "build_checkpoint",
    "flatten_producer_states",
    "flatten_read_through",
    "from_go_json",
    "to_go_json",
]


def build_checkpoint(
    read_through: Mapping[str, int],
    states: Iterable[message.ProducerState],
    ack_intents: Iterable[message.AckIntent],
) -> pc.Checkpoint:
    """One source per journal read (or with producers), and the ACK intents by journal."""
    cp = pc.Checkpoint()
    for journal, offset in read_through.items():
        cp.sources[journal].read_through = offset
    for st in states:
        entry = cp.sources[st.journal].producers.add()
        entry.id = st.producer
        entry.state.last_ack = st.last_ack
        entry.state.begin = st.begin
    for intent in ack_intents:
        cp.ack_intents[intent.journal] = intent.content
    return cp


def flatten_read_through(cp: pc.Checkpoint) -> dict[str, int]:
    """Journal → read-through offset (journals read through 0 left out, as Gazette does)."""
    return {j: src.read_through for j, src in cp.sources.items() if src.read_through}


def flatten_producer_states(cp: pc.Checkpoint) -> list[message.ProducerState]:
    return [
        message.ProducerState(j, bytes(p.id), p.state.last_ack, p.state.begin)
        for j, src in cp.sources.items()
        for p in src.producers
    ]


def to_go_json(cp: pc.Checkpoint) -> dict[str, Any]:
    """The Checkpoint as Go's encoding/json writes it (Gazette's struct tags).

    Bytes are base64; ``read_through``, ``last_ack``, ``begin``, ``id`` and
    ``ack_intents`` are left out when zero or empty, as Go's ``omitempty`` does.
    """
    sources: dict[str, Any] = {}
    for journal, src in cp.sources.items():
        out: dict[str, Any] = {}
        if src.read_through:
            out["read_through"] = src.read_through
        producers = []
        for p in src.producers:
            entry: dict[str, Any] = {}
            if p.id:
                entry["id"] = base64.b64encode(p.id).decode()
            state: dict[str, Any] = {}
            if p.state.last_ack:
                state["last_ack"] = p.state.last_ack
            if p.state.begin:
                state["begin"] = p.state.begin
            entry["state"] = state
            producers.append(entry)
        out["producers"] = producers or None
        sources[journal] = out
    doc: dict[str, Any] = {"sources": sources or None}
    if cp.ack_intents:
        doc["ack_intents"] = {j: base64.b64encode(v).decode() for j, v in cp.ack_intents.items()}
    return doc


def from_go_json(doc: Mapping[str, Any] | None) -> pc.Checkpoint:
    """The inverse of :func:`to_go_json` (tolerant of Go's nulls and missing fields)."""
    cp = pc.Checkpoint()
    for journal, src in ((doc or {}).get("sources") or {}).items():
        out = cp.sources[journal]
        out.read_through = int(src.get("read_through") or 0)
        for p in src.get("producers") or ():
            entry = out.producers.add()
            entry.id = base64.b64decode(p.get("id") or "")
            state = p.get("state") or {}
            entry.state.last_ack = int(state.get("last_ack") or 0)
            entry.state.begin = int(state.get("begin") or 0)
    for journal, value in ((doc or {}).get("ack_intents") or {}).items():
        cp.ack_intents[journal] = base64.b64decode(value)
    return cp
