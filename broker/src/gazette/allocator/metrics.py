"""Prometheus metrics of the allocator.

The first eight carry the names of Gazette's ``allocator/doc.go`` (prometheus_client
adds the ``_total`` suffix to counters, giving exactly Gazette's names), so
dashboards written for Go brokers read Python ones. They move where Gazette
moves them: the leader's solve (``max_flow_runtime_seconds``), each
successful converge round (``converge``, and the three gauges of the State it
worked on), and each assignment the converge round adds, removes or packs
(moves to a lower slot, promotion included).

The others are ours, prefixed the same way: leader transactions by outcome,
failed rounds, State extractions, whether this member leads, items with fewer
assignments than they want (as the leader last saw them) and lease doubts (a
keep-alive failing: the chart's alerts read these two).
"""

from __future__ import annotations

import prometheus_client as prom

# -- Gazette's -------------------------------------------------------------

assignment_added = prom.Counter(
    "gazette_allocator_assignment_added",
    "Cumulative number of item / member assignments added by the allocator.",
)
assignment_packed = prom.Counter(
    "gazette_allocator_assignment_packed",
    "Cumulative number of item / member assignments packed by the allocator.",
)
assignment_removed = prom.Counter(
    "gazette_allocator_assignment_removed",
    "Cumulative number of item / member assignments removed by the allocator.",
)
converge = prom.Counter(
    "gazette_allocator_converge",
    "Cumulative number of converge iterations.",
)
max_flow_runtime_seconds = prom.Histogram(
    "gazette_allocator_max_flow_runtime_seconds",
    "Duration required to re-solve for maximum assignment.",
)
desired_replication_slots = prom.Gauge(
    "gazette_allocator_desired_replication_slots",
    "Number of desired item replication slots summed across all items.",
)
items = prom.Gauge(
    "gazette_allocator_items",
    "Number of items known to the allocator.",
)
members = prom.Gauge(
    "gazette_allocator_members",
    "Number of members known to the allocator.",
)

# -- ours ------------------------------------------------------------------

TXN_SUCCEEDED = "succeeded"
TXN_FAILED = "failed"  # comparisons did not hold
TXN_ERROR = "error"  # the RPC failed

leader_txns = prom.Counter(
    "gazette_allocator_leader_txns",
    "Checked etcd transactions sent by the allocator leader, by result "
    "(succeeded, failed: comparisons did not hold, error: the RPC failed).",
    ["result"],
)
converge_failed = prom.Counter(
    "gazette_allocator_converge_failed",
    "Cumulative number of converge iterations which failed and will be retried.",
)
state_extractions = prom.Counter(
    "gazette_allocator_state_extractions",
    "Cumulative number of allocator States extracted from the KeySpace.",
)
leader = prom.Gauge(
    "gazette_allocator_leader",
    "1 while this member leads the allocator (its member key is the oldest), else 0.",
)

under_replicated_items = prom.Gauge(
    "gazette_allocator_items_under_replicated",
    "Items (journals of brokers, shards of consumers) with fewer assignments than their desired"
    " replication, in the State of the leader's last converge round (0 on other members).",
)
lease_doubts = prom.Counter(
    "gazette_allocator_lease_doubts",
    "Times this member's etcd lease keep-alive began failing (the member then doubts it still"
    " holds its lease, and stores what it holds).",
)
lease_in_doubt = prom.Gauge(
    "gazette_allocator_lease_in_doubt",
    "1 while this member's lease keep-alives fail, else 0.",
)
