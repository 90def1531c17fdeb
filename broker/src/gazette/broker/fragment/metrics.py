"""Prometheus metrics of spools, with Gazette's names where Gazette has one."""

from __future__ import annotations

import prometheus_client

SPOOL_COMMITS_TOTAL = prometheus_client.Counter(
    "gazette_spool_commits_total", "Total number of Spool commits."
)
SPOOL_COMMIT_BYTES_TOTAL = prometheus_client.Counter(
    "gazette_spool_commit_bytes_total", "Total number of bytes committed to Spools."
)
SPOOL_ROLLBACKS_TOTAL = prometheus_client.Counter(
    "gazette_spool_rollbacks_total", "Total number of Spool rollbacks."
)
SPOOL_ROLLBACK_BYTES_TOTAL = prometheus_client.Counter(
    "gazette_spool_rollback_bytes_total", "Total number of bytes rolled back from Spools."
)
SPOOL_COMPLETED_TOTAL = prometheus_client.Counter(
    "gazette_spool_completed_total", "Total number of Spools completed."
)
SPOOL_PERSISTED_TOTAL = prometheus_client.Counter(
    "gazette_spool_persisted_total", "Total number of Spools persisted."
)
# Not in Gazette (whose spool retries failed writes forever): appends failed by it.
SPOOL_WRITE_FAILURES_TOTAL = prometheus_client.Counter(
    "gazette_spool_write_failures_total",
    "Total number of spool content writes that failed (e.g. a full disk), failing their append.",
)
# Not in Gazette (which publishes whatever a member holds): committed content that
# no route confirmed, held back from the store when its member was cut off or deposed.
SPOOL_QUARANTINED_BYTES_TOTAL = prometheus_client.Counter(
    "gazette_spool_quarantined_bytes_total",
    "Total bytes of spool content never confirmed by every route member, kept out of the store.",
)
SPOOL_PERSIST_PENDING = prometheus_client.Gauge(
    "gazette_spool_persist_pending",
    "Completed spools not yet stored in their journal's fragment store (waiting, uploading or"
    " retrying): the persist backlog the chart's alert watches.",
)
