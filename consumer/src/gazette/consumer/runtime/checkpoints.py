"""Checkpoints: read-through offsets, producer states and ACK intents, in one message.

Gazette's ``consumer/protocol/checkpoint_extensions.go``. A transaction's
Checkpoint is what the sequencer and publisher hold when it closes; the store
commits it with the transaction's state, and a new primary rebuilds the
sequencer from it (:func:`flatten_read_through`, :func:`flatten_producer_states`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gazette import message
from gazette.consumer import protocol as pc

__all__ = ["build_checkpoint", "flatten_producer_states", "flatten_read_through"]


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
