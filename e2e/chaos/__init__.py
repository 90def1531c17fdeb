"""The chaos suite: does the broker ever lose an acknowledged byte under faults?

Each scenario starts a fresh cluster (a real etcd and 3 broker processes in 3
zones, RF3 journals over a ``file://`` store; or the ``make up`` devcluster),
runs concurrent recording appenders through the faults, heals the cluster and
reads every journal back from offset 0. It reports acknowledged appends, bytes
verified, acknowledged appends lost, duplicated records, holes, fragments of
the store that disagree at an offset, brokers that exited on their own and the
write unavailability around each fault. Network partitions need root and
``ip`` (iproute2): the partition tests skip without ``ip``, and fail, saying
why, when namespaces can't be made.

* :mod:`chaos.records` — self-describing records ``writer seq crc payload\\n``.
* :mod:`chaos.workload` — :class:`~chaos.workload.Workload`, the recording appenders.
* :mod:`chaos.checker` — heal, read back, :func:`~chaos.checker.verify`.
* :mod:`chaos.clusters` — the clusters faults go into, watched for exits.
* :mod:`chaos.netns` — :class:`~chaos.netns.Netns`, a private network of
  namespaces on a bridge whose links can be cut (black-holed) and healed.
* :mod:`chaos.netcluster` — :class:`~chaos.netcluster.NetCluster`, etcd and
  brokers each in a namespace of that network (the partition scenarios).
* :mod:`chaos.streamsum` — the stream-sum example as consumer processes of a
  :class:`~chaos.netcluster.NetCluster`, and how to tell its shards' progress.
* :mod:`chaos.scenarios` — the faults, and :class:`~chaos.scenarios.Params`.
* :mod:`chaos.report` — :class:`~chaos.report.Report` and the summary table.

``e2e/test_chaos.py`` runs the short version in ``make test``; ``make chaos``
the long one (``CHAOS_LONG=1``, ``CHAOS_KILLS``), printing the table. To check
the suite itself, ``CHAOS_BROKER_SRC=<a broker/src>`` runs the brokers from
another source tree, e.g. ``git archive <old commit> broker/src`` unpacked in
/tmp: the short run then fails where that broker is broken. In code::

    report = await scenarios.sigkill("sigkill-spaced", Params(), tmp_path, kills=2, every_s=8)
    print(report.describe())
"""

from chaos import (
    checker,
    clusters,
    netcluster,
    netns,
    records,
    report,
    scenarios,
    streamsum,
    workload,
)

__all__ = [
    "checker",
    "clusters",
    "netcluster",
    "netns",
    "records",
    "report",
    "scenarios",
    "streamsum",
    "workload",
]
