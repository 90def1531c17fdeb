"""Prometheus metrics of the message layer, with Gazette's names (`message/interfaces.go`)."""

from __future__ import annotations

import prometheus_client as prom

__all__ = ["SEQUENCER_QUEUED", "SEQUENCER_REPLAY"]

SEQUENCER_QUEUED = prom.Counter(
    "gazette_sequencer_queued",
    "Cumulative number of read-uncommitted messages which were sequenced.",
    ["journal", "flag", "outcome"],
)
SEQUENCER_REPLAY = prom.Counter(
    "gazette_sequencer_replay",
    "Cumulative number of messages re-read from source journal due to insufficient "
    "Sequencer ring-buffer size.",
    ["journal"],
)
