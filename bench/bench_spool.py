"""What recoverable and synced spools cost: ``--broker.spool-dir`` and ``--broker.spool-sync``.

Four clusters of three real broker processes over one real etcd on loopback,
differing only in how their brokers spool the fragment being written:

- A: the default, anonymous (already unlinked) spool files in the system
  temporary directory, which die with the process;
- B: the same as A, a control: how far two measurements of the same thing
  differ on this host;
- D: ``--broker.spool-dir`` on local disk: spool files keep their names beside
  a record of their confirmed end, which a primary writes before it
  acknowledges an append (recoverable after the process crashes);
- S: D plus ``--broker.spool-sync``: a primary fdatasyncs the spool file and
  its record before it acknowledges an append (recoverable after a power loss).

APPENDERS appenders each append to a journal of their own (replication 3, so
every broker spools every journal), one append at a time, to the journal's
primary: 1 KiB appends, then 256 KiB appends. The clusters are measured in
turn, row by row (A, B, D, S, S, D, B, A), so that load from elsewhere on the
host falls on all alike. Rows print appends/s and MB/s, ack latency p50 / p99
and the CPU of the client and the cluster's brokers per append, each over both
runs of a side and as a ratio to A; B/A is the host's noise. A bare append +
fdatasync loop on the spool dir's disk, in the same run, is the floor of what
S adds to every append (it syncs twice: the spool file, then the record).
Journals have Gazette's default 512 MiB fragments, which none fills during the
run, and every run starts after a sync(2): each side pays for its own appends
only, not for rolls or for write-back left by the side before it.
``BENCH_SPOOL_SECONDS`` (2) sets the length of a measured run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import statistics
import tempfile
import time
from collections.abc import Sequence

import grpc

from bench import _cluster, bench_broker
from gazette.broker.protocol import protocol_pb2 as pb2

SIZES = (1024, 256 * 1024)
CHUNK = 128 * 1024  # Content messages of at most this many bytes (bench_broker's bulk chunk).
APPENDERS = 4
REPLICATION = 3
SECONDS = float(os.environ.get("BENCH_SPOOL_SECONDS", "2"))
# Gazette's default: no journal fills a fragment within the run, so no side's runs
# pay for rolls and their persisting when others don't (with 64 MiB fragments the
# 256 KiB rows rolled in some runs and not others, the later run of a side ~20% slower).
FRAGMENT_LENGTH = 512 << 20
WARMUP = 0.5  # Seconds appended before each measured run, unmeasured.
ORDER = (0, 1, 2, 3, 3, 2, 1, 0)  # Indexes into SIDES: each measured twice, mirrored.

# BrokerCluster gives every broker a --broker.spool-dir of its own; an empty one
# later on the command line wins, and means anonymous spools (the default).
_ANONYMOUS = ("--broker.spool-dir", "")
SIDES: tuple[tuple[str, str, Sequence[str]], ...] = (
    # key, label, extra broker flags
    ("A", "anonymous spools (default)", _ANONYMOUS),
    ("B", "anonymous spools (control)", _ANONYMOUS),
    ("D", "--broker.spool-dir", ()),
    ("S", "--broker.spool-dir, spool-sync", ("--broker.spool-sync", "true")),
)


@dataclasses.dataclass
class _Run:
    """What one measured run of every appender of a side added up to."""

    appends: int
    seconds: float
    cpu: float  # Seconds of CPU of the client and the side's brokers.
    latencies: list[float]


class _Side:
    """One cluster and its appenders' (channel to the primary, journal)."""

    def __init__(self, key: str, label: str, cluster: object) -> None:
        self.key = key
        self.label = label
        self.cluster = cluster
        self.appenders: list[tuple[grpc.aio.Channel, str]] = []

    async def setup(self, stack: contextlib.AsyncExitStack) -> None:
        for i in range(APPENDERS):
            journal = f"bench/spool-{i}"
            primary = await bench_broker._create_journal(
                self.cluster, journal, REPLICATION, FRAGMENT_LENGTH
            )
            channel = self.cluster.channel(primary)  # type: ignore[attr-defined]
            self.appenders.append((await stack.enter_async_context(channel), journal))

    async def run(self, size: int, seconds: float) -> _Run:
        """Every appender appends ``size`` bytes at a time for ``seconds``."""
        latencies: list[float] = []
        cpu = self._cpu()
        start = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(_append_until(ch, journal, size, start + seconds, latencies))
                for ch, journal in self.appenders
            ]
        elapsed = time.perf_counter() - start
        return _Run(sum(t.result() for t in tasks), elapsed, self._cpu() - cpu, latencies)

    def _cpu(self) -> float:
        return _cluster.cpu_seconds(self.cluster)


async def _append_until(
    channel: grpc.aio.Channel, journal: str, size: int, deadline: float, latencies: list[float]
) -> int:
    """Append ``size`` bytes per RPC, one at a time, until ``deadline``; returns the appends."""
    call_append = channel.stream_unary(
        "/protocol.Journal/Append",
        request_serializer=pb2.AppendRequest.SerializeToString,
        response_deserializer=pb2.AppendResponse.FromString,
    )
    chunks = [b"x" * min(size, CHUNK)] * max(1, size // CHUNK)
    appends = 0
    while time.perf_counter() < deadline:
        latencies.append(await bench_broker.timed_append(call_append, journal, chunks))
        appends += 1
    return appends


def _sync_floor(directory: pathlib.Path, size: int, seconds: float = 0.5) -> float:
    """Median ms to append ``size`` bytes to a file in ``directory`` and fdatasync it."""
    fd, path = tempfile.mkstemp(prefix="fdatasync-", dir=directory)
    os.unlink(path)
    data = b"x" * size
    times: list[float] = []
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            os.write(fd, data)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return statistics.median(times) * 1e3


def _filesystem(path: pathlib.Path) -> str:
    """The type of the file system ``path`` is on (from /proc/mounts)."""
    target = os.path.realpath(path)
    best, kind = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            mount, fstype = line.split()[1:3]
            inside = target == mount or target.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) > len(best):
                best, kind = mount, fstype
    return kind


def _rows(sides: Sequence[_Side], runs: dict[int, list[_Run]], size: int) -> list[str]:
    def figures(i: int) -> tuple[float, float, float, float]:
        # Over both runs: the mirrored order cancels a drift of the host (page cache
        # writeback builds up through the 256 KiB rows) only in their sum; the
        # better of the two favoured the sides measured first and last.
        appends = sum(r.appends for r in runs[i])
        latencies = [t for r in runs[i] for t in r.latencies]
        cpu_ms = sum(r.cpu for r in runs[i]) / appends * 1e3
        p50, p99 = bench_broker._pct(latencies, 50), bench_broker._pct(latencies, 99)
        return appends / sum(r.seconds for r in runs[i]), p50, p99, cpu_ms

    base = figures(0)
    out = [
        f"  {'':<36} {'appends/s':>9} {'MB/s':>8} {'':7} {'ack p50':>10} {'':7} "
        f"{'ack p99':>10} {'':7} {'CPU/append':>10}"
    ]
    for i, side in enumerate(sides):
        rate, p50, p99, cpu = fig = figures(i)
        r = [f / b for f, b in zip(fig, base, strict=True)]
        out.append(
            f"  {side.key}: {side.label:<33} {rate:9.0f} {rate * size / 1e6:8.2f} ({r[0]:4.2f}x)"
            f" {p50:7.2f} ms ({r[1]:4.2f}x) {p99:7.2f} ms ({r[2]:4.2f}x)"
            f" {cpu:7.2f} ms ({r[3]:4.2f}x)"
        )
    return out


async def _main(clusters: Sequence[object]) -> None:
    sides = [_Side(key, label, c) for (key, label, _), c in zip(SIDES, clusters, strict=True)]
    spool_dir = clusters[2].brokers[0].spool_dir  # type: ignore[attr-defined]
    tmp = pathlib.Path(tempfile.gettempdir())  # The brokers' too: they inherit our environment.
    print(
        f"spools: anonymous in {tmp} ({_filesystem(tmp)}),"
        f" --broker.spool-dir in {spool_dir.parent.parent} ({_filesystem(spool_dir)});"
        f" {APPENDERS} appenders, a journal each at replication {REPLICATION} on 3 brokers"
    )
    async with contextlib.AsyncExitStack() as stack:
        for side in sides:
            await side.setup(stack)
        for size in SIZES:
            floor = await asyncio.to_thread(_sync_floor, spool_dir, size)
            label = f"{size // 1024} KiB"
            print(
                f"{label} appends, 2 x {SECONDS:.0f}s per side after {WARMUP}s of warm-up"
                f" (A, B, D, S, S, D, B, A); a bare {label} append + fdatasync here:"
                f" {floor:.2f} ms (p50)"
            )
            runs: dict[int, list[_Run]] = {i: [] for i in range(len(sides))}
            for i in ORDER:
                # Write back what the previous run left dirty: on ext4 an fdatasync that
                # commits the file system's journal waits for it, so S paid for the sides
                # measured before it (without this, S/A at 1 KiB ranged 0.45x-0.70x from
                # one bench run to the next, and S's second run was the slower by ~30%).
                await asyncio.to_thread(os.sync)
                await sides[i].run(size, WARMUP)
                runs[i].append(await sides[i].run(size, SECONDS))
            for line in _rows(sides, runs, size):
                print(line, flush=True)
    print(
        "  B/A is the host's noise (the same thing measured twice): D/A or S/A within it is free."
    )


def _signal_all(clusters: Sequence[object]) -> None:
    for c in clusters:
        for b in c.brokers:  # type: ignore[attr-defined]
            b.send_term()


def main() -> None:
    from gazette.broker import testing
    from gazette.keyspace import testing as ks_testing

    cache = pathlib.Path(".cache")
    with tempfile.TemporaryDirectory(
        prefix="bench-spool-", dir=cache if cache.is_dir() else None
    ) as tmp:
        work = pathlib.Path(tmp)
        with ks_testing.EtcdServer(work_dir=work / "etcd") as etcd, contextlib.ExitStack() as stack:
            clusters = [
                stack.enter_context(
                    testing.BrokerCluster(
                        etcd.endpoint,
                        work_dir=work / key,
                        etcd_prefix=f"/gazette/bench-spool-{key}",
                        brokers=3,
                        lease="10s",
                        log_level="warn",
                        extra_args=args,
                    )
                )
                for key, _, args in SIDES
            ]
            # Brokers holding journals at replication 3 of 3 can't hand them off, so
            # each cluster's stop waits out its timeout: signal them all at once first
            # (the callback runs before the clusters' own exits) so the waits overlap.
            stack.callback(_signal_all, clusters)
            asyncio.run(_main(clusters))


if __name__ == "__main__":
    main()
