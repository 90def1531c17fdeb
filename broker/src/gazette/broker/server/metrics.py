"""Prometheus metrics of the broker server, with Gazette's names (``broker/doc.go``).

prometheus_client appends ``_total`` to every counter it exposes, which would
turn Gazette's ``gazette_journal_server_started_totals`` into
``..._totals_total``. Dashboards written for Gazette must find the exact name,
so these two counters are exported by a small collector as *untyped* samples
under the exact name (Prometheus treats them as counters by their use in rate()).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import cast

import prometheus_client as prom
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gazette.broker import protocol as pb

OPERATIONS = (
    "List",
    "Apply",
    "Read",
    "Append",
    "Replicate",
    "ListFragments",
    "FragmentStoreHealth",
)


class ExactCounter(Collector):
    """A labelled monotonic counter exposed under exactly ``name``."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        assert len(labels) == len(self.labelnames)
        with self._lock:
            self._values[labels] = self._values.get(labels, 0.0) + amount

    def value(self, *labels: str) -> float:
        with self._lock:
            return self._values.get(labels, 0.0)

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.name, self.documentation, "unknown")
        with self._lock:
            for labels, value in sorted(self._values.items()):
                metric.add_sample(self.name, dict(zip(self.labelnames, labels, strict=True)), value)
        yield metric


server_started = ExactCounter(
    "gazette_journal_server_started_totals",
    "Total number of started journal RPCs.",
    ("operation",),
)
server_completed = ExactCounter(
    "gazette_journal_server_completed_totals",
    "Total number of completed journal RPCs, by status ('ok', an error, or a Status name).",
    ("operation", "status"),
)
prom.REGISTRY.register(server_started)
prom.REGISTRY.register(server_completed)

write_head = prom.Gauge(
    "gazette_write_head",
    "Current write head of a journal served by this broker as primary.",
    ["journal"],
)

# Not in Gazette, which refuses such journals until an operator resets their head.
JOURNAL_HEAD_RECOVERIES = prom.Counter(
    "gazette_journal_head_recoveries",
    "Journals resumed at the end of their persisted fragments after losing an unpersisted tail.",
)
QUARANTINED_TAILS_STORED = prom.Counter(
    "gazette_spool_quarantined_tails_stored",
    "Quarantined spool tails stored because their journal went on from their end and no"
    " store held them.",
)
JOURNAL_FENCE_SKIPPED_BYTES = prom.Counter(
    "gazette_journal_fence_skipped_bytes",
    "Offsets skipped by journals resuming at their acknowledgement fence, past their persisted"
    " fragments (appends acknowledged there were lost with every broker that held them).",
)


class Outcome:
    """Status label of a completed RPC for ``gazette_journal_server_completed_totals``."""

    def __init__(self) -> None:
        self.status = "ok"

    def set(self, status: int) -> None:
        self.status = (
            "ok" if status == pb.OK else pb.Status.Name(cast("pb.Status.ValueType", status))
        )


class PortCollector(Collector):
    """Connections of the brokers' ports (their native front doors), summed over
    the brokers of this process (one, but for test clusters)."""

    def __init__(self) -> None:
        self._ports: dict[int, Callable[[], Mapping[str, int]]] = {}
        self._lock = threading.Lock()

    def add(self, stats: Callable[[], Mapping[str, int]]) -> int:
        """Count the port whose counters ``stats()`` reads; returns its handle."""
        with self._lock:
            handle = max(self._ports, default=0) + 1
            self._ports[handle] = stats
        return handle

    def remove(self, handle: int) -> None:
        with self._lock:
            self._ports.pop(handle, None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            readers = list(self._ports.values())
        total: dict[str, int] = {}
        for read in readers:
            for key, value in read().items():
                total[key] = total.get(key, 0) + value
        yield GaugeMetricFamily(
            "gazette_broker_connections_open",
            "Connections the broker's port serves now.",
            value=total.get("open", 0),
        )
        for key, name, doc in (
            (
                "refused",
                "gazette_broker_connections_refused",
                "Connections closed as accepted: the port served its most at once.",
            ),
            (
                "silent",
                "gazette_broker_connections_silent",
                "Connections closed for sending nothing, or no TLS handshake, in time.",
            ),
            (
                "accept_errors",
                "gazette_broker_accept_errors",
                "Failures to accept a connection (out of file descriptors, ...).",
            ),
        ):
            yield CounterMetricFamily(name, doc, value=total.get(key, 0))


ports = PortCollector()
prom.REGISTRY.register(ports)
