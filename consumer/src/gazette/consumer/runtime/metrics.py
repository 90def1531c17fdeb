"""Prometheus metrics of consumer shards, with Gazette's names (``consumer/interfaces.go``)."""

from __future__ import annotations

import prometheus_client as prom

shard_txn_total = prom.Counter(
    "gazette_shard_transactions", "Total number of consumer transactions.", ["shard"]
)
shard_read_msgs_total = prom.Counter(
    "gazette_shard_read_messages",
    "Total number of messages processed by completed consumer transactions.",
    ["shard"],
)
shard_read_bytes_total = prom.Counter(
    "gazette_shard_read_bytes",
    "Total byte-length of messages processed by completed consumer transactions.",
    ["shard"],
)
shard_read_head = prom.Gauge(
    "gazette_shard_read_head",
    "Next journal byte offset a shard reads, per source journal.",
    ["shard", "journal"],
)
shard_lag_bytes = prom.Gauge(
    "gazette_shard_lag_bytes",
    "Bytes of a source journal written but not yet read through by the shard"
    " (as of the last read response).",
    ["shard", "journal"],
)
shard_up = prom.Gauge(
    "gazette_shard_up",
    "1 for each shard served here, labelled with its replica status.",
    ["shard", "status"],
)
txn_total = prom.Counter("gazette_consumer_tx_count", "Cumulative number of transactions.")
txn_messages_total = prom.Counter("gazette_consumer_tx_messages", "Cumulative number of messages.")
txn_seconds_total = prom.Counter(
    "gazette_consumer_tx_seconds", "Cumulative number of seconds processing transactions."
)
bytes_consumed = prom.Counter(
    "gazette_consumer_consumed_bytes", "Cumulative number of bytes consumed."
)
