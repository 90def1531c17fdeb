"""A throwaway cluster for benchmarks: a real etcd and broker processes on loopback."""

from __future__ import annotations

import asyncio
import os
import pathlib
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any


def run_on_cluster(name: str, body: Callable[[Any], Awaitable[None]], brokers: int = 3) -> None:
    """Start etcd and ``brokers`` broker processes, run ``body(cluster)``, tear all down.

    Work files go under ``.cache/`` when it exists (the gitignored cache), else the
    system temporary directory.
    """
    from gazette.broker import testing
    from gazette.keyspace import testing as ks_testing

    cache = pathlib.Path(".cache")
    with tempfile.TemporaryDirectory(
        prefix=f"bench-{name}-", dir=cache if cache.is_dir() else None
    ) as tmp:
        work = pathlib.Path(tmp)
        with (
            ks_testing.EtcdServer(work_dir=work / "etcd") as etcd,
            testing.BrokerCluster(
                etcd.endpoint,
                work_dir=work / "brokers",
                brokers=brokers,
                lease="10s",
                log_level="warn",
            ) as cluster,
        ):
            asyncio.run(body(cluster))


def cpu_seconds(cluster: Any) -> float:
    """CPU seconds used so far by this process (the client) and ``cluster``'s brokers."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = sum(os.times()[:2])
    for b in cluster.brokers:
        if b.proc is not None:
            with open(f"/proc/{b.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total
