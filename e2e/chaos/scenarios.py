"""The fault scenarios: each on a fresh cluster, with the appenders running throughout.

Every scenario runs the same way (:func:`_drive`): apply the RF3 journals, start
the :class:`~chaos.workload.Workload` and the cluster's exit monitor, inject its
faults (marking each, so its write unavailability is measured), stop writing,
heal (every journal must take an append again), read every journal back and
:func:`~chaos.checker.verify` it. The result is a :class:`~chaos.report.Report`.

=============  ==================================================================
``sigkill``    SIGKILL a random broker, restart it; spaced (``spaced``) or rapid
``sigstop``    SIGSTOP the primary of a journal past its etcd lease, then SIGCONT
``etcd``       SIGKILL etcd, restart it on the same data dir and port (< lease)
``store``      the ``file://`` store root replaced by a plain file for a while
``spool-full`` one broker's spool dir on an 8 MiB tmpfs, filled to the brim
``stall``      one broker's spool dir on a FUSE passthrough whose writes block for a
               while: it must stay ready, keep its lease, fail (not hang) its own
               journals' appends with a message naming the disk, and others write on
``aborts``     appends abandoned half-way (cancelled, or closed without commit)
``sigterm``    SIGTERM every broker (each must exit 0 in time), start them again
``kill-all``   SIGKILL every broker at once, restart them on their spool dirs (they
               resume by themselves, nothing reset); ``-fresh-disks``: on empty
               spool dirs, nobody resetting anything (the lost tail is reported)
``make-down``  ``make down`` then ``make up`` of the devcluster
``partition``  in network namespaces (:mod:`chaos.netns`): the primary of a journal
               cut from everyone (RF2 on 3 brokers; RF3 on 4), from etcd only,
               or from its peer brokers only; then healed. An append opened on
               it before the cut commits after healing (``_Straddle``). Staged:
               the primary's links to its peers go first, the append commits,
               then the rest
``shard``      stream-sum consumers in namespaces too: the process holding a shard's
               primary cut from everyone, then healed (exactly-once sums, the shard
               caught up within lease + 10 s of healing)
=============  ==================================================================

Process-cluster scenarios also check the ``file://`` store itself
(:func:`~chaos.checker.check_store`): no two stored fragments may hold
different bytes at the same offset.

Timings and counts are :class:`Params`; :meth:`Params.from_env` reads
``CHAOS_LONG`` (the ``make chaos`` durations), ``CHAOS_KILLS`` (SIGKILLs in
all, split between the spaced and rapid scenarios), ``CHAOS_CUT`` (how a
partition cuts a link: ``blackhole`` routes, the default, or bogus ``neigh``
entries; see :mod:`chaos.netns`) and ``CHAOS_GO=1`` (the partition scenarios
run Gazette's own Go brokers, as a reference).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import itertools
import os
import pathlib
import random
import shutil
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import grpc

from chaos import netns, streamsum
from chaos.checker import (
    cancelled_by_server,
    check_store,
    fragment_end,
    read_back,
    verify,
    wait_writable,
)
from chaos.clusters import DevCluster, Exit, HarnessError, ProcessCluster
from chaos.netcluster import ETCD, NetCluster, NetGoBrokerProcess
from chaos.records import RecordId, record
from chaos.report import DiskLoss, Report
from chaos.workload import Ack, Channels, Endpoints, Workload, WorkloadConfig
from gazette import allocator, keyspace
from gazette.broker import client, stallfs, testing
from gazette.broker import protocol as pb

__all__ = [
    "HarnessError",
    "Params",
    "SpoolUnavailable",
    "StallUnavailable",
    "aborts",
    "etcd_outage",
    "kill_all",
    "kill_all_fresh_disks",
    "make_down_up",
    "partition_etcd_only",
    "partition_peers_only",
    "partition_primary",
    "partition_shard_primary",
    "sigkill",
    "sigstop",
    "sigterm_all",
    "spool_full",
    "spool_stall",
    "store_outage",
]


class SpoolUnavailable(HarnessError):
    """No small filesystem could be mounted for the full-spool scenario (says why)."""


@dataclasses.dataclass(frozen=True)
class Params:
    """Fault timings and counts. The defaults are the short run of ``make test``."""

    #: ``--etcd.lease`` of the brokers (the SIGKILL unavailability bound is this + 2 s).
    lease_s: float = 5.0
    writers: int = 3
    journals: tuple[str, ...] = ("chaos/a", "chaos/b")
    #: Spaced SIGKILLs, one every ``spaced_every_s``.
    spaced_kills: int = 2
    spaced_every_s: float = 8.0
    #: Rapid SIGKILLs, one every ``rapid_every_s``.
    rapid_kills: int = 3
    rapid_every_s: float = 5.0
    #: SIGSTOP rounds, each for ``lease_s + stop_past_lease_s``.
    stops: int = 1
    stop_past_lease_s: float = 3.0
    #: etcd rounds: down ``etcd_down_s``, under a brokers' lease of ``etcd_lease_s``.
    etcd_rounds: int = 1
    etcd_down_s: float = 9.0
    etcd_lease_s: float = 12.0
    #: Store outages of ``store_outage_s``.
    store_rounds: int = 1
    store_outage_s: float = 8.0
    #: Full-spool rounds of ``spool_full_s``, on a tmpfs of ``spool_size``.
    spool_rounds: int = 1
    spool_full_s: float = 8.0
    spool_size: str = "8m"
    #: Stalled-spool rounds: one broker's spool disk stops answering for ``stall_for_s``,
    #: under a ``--broker.spool-write-timeout`` of ``spool_write_timeout_s``.
    stall_rounds: int = 1
    stall_for_s: float = 10.0
    spool_write_timeout_s: float = 3.0
    #: Appends abandoned half-way.
    aborts: int = 10
    #: SIGTERM-everything rounds; each broker must exit 0 within ``term_timeout_s``.
    term_rounds: int = 1
    term_timeout_s: float = 45.0
    #: ``make down`` / ``make up`` rounds.
    down_up_rounds: int = 1
    #: Network partitions: rounds, each cutting for ``lease_s + partition_past_lease_s``.
    partitions: int = 1
    partition_past_lease_s: float = 4.0
    #: The etcd-only cut lasts longer: a cut-off primary must not hold the journal
    #: until the network heals (its gap is bounded by ``kill_bound_s``).
    etcd_cut_past_lease_s: float = 10.0
    #: How a partition cuts a link: ``blackhole`` routes or bogus ``neigh`` entries.
    cut_how: str = netns.BLACKHOLE
    #: Partition scenarios run Gazette's Go brokers instead of ours (``CHAOS_GO=1``).
    go: bool = False
    #: Writing before the first fault, and after the last.
    warmup_s: float = 1.0
    settle_s: float = 1.5
    #: Writing between one fault's recovery and the next fault.
    spacing_s: float = 1.0
    #: Healing: how long a journal may take to be writable again.
    heal_s: float = 60.0
    #: Reading back: a read making no progress this long below the head is a hole.
    stall_s: float = 15.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Params:
        env = dict(os.environ if env is None else env)
        params = cls()
        if env.get("CHAOS_LONG", "") not in ("", "0"):
            params = dataclasses.replace(
                params,
                writers=4,
                spaced_kills=40,
                spaced_every_s=15.0,
                rapid_kills=60,
                rapid_every_s=5.0,
                stops=3,
                etcd_rounds=3,
                store_rounds=2,
                store_outage_s=30.0,
                spool_rounds=2,
                spool_full_s=30.0,
                stall_rounds=3,
                stall_for_s=20.0,
                aborts=60,
                term_rounds=3,
                down_up_rounds=3,
                partitions=3,
                warmup_s=3.0,
                settle_s=5.0,
                spacing_s=3.0,
            )
        if env.get("CHAOS_GO", "") not in ("", "0"):
            params = dataclasses.replace(params, go=True)
        if env.get("CHAOS_CUT"):
            params = dataclasses.replace(params, cut_how=env["CHAOS_CUT"])
        kills = env.get("CHAOS_KILLS")
        if kills:
            spaced = int(kills) * 2 // 5
            params = dataclasses.replace(
                params, spaced_kills=spaced, rapid_kills=int(kills) - spaced
            )
        return params

    @property
    def partition_s(self) -> float:
        """How long one partition lasts: past the lease, so etcd gives the victim up."""
        return self.lease_s + self.partition_past_lease_s

    @property
    def kill_bound_s(self) -> float:
        """The longest write unavailability a SIGKILL may cause: the lease + 2 s."""
        return self.lease_s + 2.0

    def budget_s(self, faults_s: float) -> float:
        """A test timeout: the faults' own time plus starting, healing and checking."""
        return 150.0 + faults_s * 1.5 + self.heal_s + self.stall_s * len(self.journals)


class _Cluster(Protocol):
    exits: list[Exit]

    def endpoints(self) -> list[str]: ...

    async def monitor(self, stop: asyncio.Event, poll_s: float = ...) -> None: ...


@dataclasses.dataclass
class Run:
    """What a fault injector works with, and the figures it adds to the report."""

    scenario: str
    params: Params
    workload: Workload
    channels: Channels
    endpoints: Endpoints
    rng: random.Random
    unwritable: list[str] = dataclasses.field(default_factory=list)
    forced: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    #: Each time every broker lost its disk (see :class:`Report`).
    disk_losses: list[DiskLoss] = dataclasses.field(default_factory=list)
    #: What a consumer scenario found wrong (None: no consumers in this scenario).
    consumer_failures: list[str] | None = None

    def fault(self, label: str) -> None:
        """Mark a fault (its write unavailability is measured from here) and say so."""
        self.workload.mark_fault(label)
        elapsed = self.workload.clock() - self.workload.started_at
        print(f"[chaos {self.scenario} +{elapsed:.0f}s] {label}", flush=True)

    async def expect_writable(self, after: str, within: float) -> None:
        """Every journal takes a zero-byte append within ``within`` s (else it's recorded)."""
        started = time.monotonic()
        for journal in self.params.journals:
            left = max(1.0, within - (time.monotonic() - started))
            head, err = await wait_writable(self.channels, self.endpoints, journal, left)
            if head is None:
                self.unwritable.append(f"{journal} not writable {within:.0f}s after {after}: {err}")


Inject = Callable[[Run], Awaitable[None]]


async def _apply_journals(
    channels: Channels, endpoints: Endpoints, params: Params, replication: int = 3
) -> None:
    specs = [
        testing.journal_spec(j, replication=replication, stores=["file:///"], length=256 << 10)
        for j in params.journals
    ]
    deadline = time.monotonic() + 30
    while True:
        try:
            resp = await testing.apply_specs(channels.stub(endpoints()[0]), *specs)
            if resp.status == pb.OK:
                break
            last = pb.Status.Name(resp.status)
        except grpc.aio.AioRpcError as e:
            last = e.code().name
        if time.monotonic() > deadline:
            raise HarnessError(f"could not apply the journals: {last}")
        await asyncio.sleep(0.5)
    for j in params.journals:
        head, err = await wait_writable(channels, endpoints, j, 60)
        if head is None:
            raise HarnessError(f"{j} never became writable on the fresh cluster: {err}")


async def _drive(
    scenario: str,
    params: Params,
    cluster: _Cluster,
    channels: Channels,
    inject: Inject,
    *,
    replication: int = 3,
    store_root: pathlib.Path | None = None,
) -> Report:
    """Run ``inject`` among the appenders, heal, read back and verify (see the module docs).

    With ``store_root`` (the ``file://`` root) the stored fragments are checked too.
    """
    started = time.monotonic()
    await _apply_journals(channels, cluster.endpoints, params, replication)
    workload = Workload(
        WorkloadConfig(
            journals=params.journals,
            writers=params.writers,
            append_timeout_s=params.lease_s + 5.0,
        ),
        cluster.endpoints,
        channels,
    )
    run = Run(scenario, params, workload, channels, cluster.endpoints, random.Random(scenario))
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(workload.run(stop), name="workload")
        tg.create_task(cluster.monitor(stop), name="exit-monitor")
        try:
            await asyncio.sleep(params.warmup_s)
            await inject(run)
            await asyncio.sleep(params.settle_s)
        finally:
            workload.mark_end()
            stop.set()

    # Heal: every journal must take appends again; its head bounds the read.
    heads: dict[str, int] = {}
    for j in params.journals:
        head, err = await wait_writable(channels, cluster.endpoints, j, params.heal_s)
        if head is None:
            run.unwritable.append(f"{j} not writable {params.heal_s:.0f}s after healing: {err}")
        acked_end = max((a.end for a in workload.acks if a.journal == j), default=0)
        heads[j] = max(head or 0, acked_end, await fragment_end(channels, cluster.endpoints, j))
    reads = [
        await read_back(channels, cluster.endpoints, j, heads[j], stall_s=params.stall_s)
        for j in params.journals
    ]
    stored = None
    if store_root is not None:
        stored = await asyncio.to_thread(check_store, store_root, params.journals)
    return Report(
        scenario=scenario,
        faults=len(workload.faults),
        verdict=verify(workload.acks, reads, workload.aborted, stored, workload.sent),
        exits=list(cluster.exits),
        gaps=workload.unavailability(),
        unwritable=run.unwritable,
        forced=run.forced,
        hung=workload.hung,
        attempts=workload.attempts,
        errors=workload.errors,
        bad_acks=workload.bad_acks,
        notes=run.notes,
        seconds=time.monotonic() - started,
        disk_losses=run.disk_losses,
        consumer_failures=run.consumer_failures,
    )


async def _on_process_cluster(
    scenario: str,
    params: Params,
    work_dir: pathlib.Path,
    inject: Callable[[Run, ProcessCluster], Awaitable[None]],
    *,
    lease_s: float | None = None,
    prepare: Callable[[ProcessCluster], Callable[[], None]] | None = None,
    replication: int = 3,
    extra_args: Sequence[str] = (),
    go_disk: bool = False,
) -> Report:
    """Run ``inject`` on a fresh etcd + 3 brokers (``extra_args`` on their command
    lines); ``prepare`` (before the brokers start) returns its own undo, run after
    everything stopped.

    With ``go_disk`` and :attr:`Params.go` (the disk scenarios, as a reference) the
    brokers are Gazette's own, in network namespaces nobody cuts: their spools are
    temporary files, made in the ``TMPDIR`` that ``prepare`` points at a broker's
    spool dir (:func:`_spool_on`)."""
    cluster: ProcessCluster
    if go_disk and params.go:
        cluster = NetCluster(work_dir, lease_s=lease_s or params.lease_s, go=True)
        scenario += "-go"
    else:
        cluster = ProcessCluster(work_dir, lease_s=lease_s or params.lease_s, extra_args=extra_args)
    undo: Callable[[], None] | None = None
    channels = Channels()
    try:
        await asyncio.to_thread(cluster.prepare)
        if prepare is not None:
            undo = prepare(cluster)
        await asyncio.to_thread(cluster.start)
        return await _drive(
            scenario,
            params,
            cluster,
            channels,
            lambda run: inject(run, cluster),
            replication=replication,
            store_root=cluster.brokers.file_root,
        )
    finally:
        await channels.close()
        await asyncio.to_thread(cluster.close)
        if undo is not None:
            undo()


def _spool_on(b: testing.BrokerProcess) -> None:
    """Gazette's Go broker spools to temporary files: make them in ``b``'s spool dir
    (ours has ``--broker.spool-dir`` there already)."""
    if isinstance(b, NetGoBrokerProcess):
        b.env = {**(b.env or {}), "TMPDIR": str(b.spool_dir)}


async def _sleep_until(t: float) -> None:
    await asyncio.sleep(max(0.0, t - time.monotonic()))


# --- (a), (b) SIGKILL + restart ---------------------------------------------------


async def sigkill(
    scenario: str, params: Params, work_dir: pathlib.Path, kills: int, every_s: float
) -> Report:
    """SIGKILL a random broker every ``every_s`` and restart it at once.

    Spaced kills (``every_s`` > lease + a restart) check each journal is
    writable again before the next kill; rapid ones don't wait.
    """
    spaced = every_s >= params.lease_s + 5.0

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        start = time.monotonic()
        for k in range(kills):
            alive = [i for i, b in enumerate(cluster.brokers.brokers) if b.alive]
            victim = run.rng.choice(alive)
            cluster.brokers.kill(victim)
            run.fault(f"kill{k + 1}:{cluster.brokers[victim].suffix[-2:]}")
            await asyncio.sleep(run.rng.uniform(0.1, 1.0))
            await asyncio.to_thread(cluster.restart, victim)
            if spaced:
                await run.expect_writable(f"kill {k + 1}", params.kill_bound_s + 10)
            await _sleep_until(start + (k + 1) * every_s)

    return await _on_process_cluster(scenario, params, work_dir, inject)


# --- (c) SIGSTOP of the primary -----------------------------------------------------


async def _route(run: Run, cluster: ProcessCluster, journal: str) -> tuple[int, list[int]]:
    """(the primary's index, every member's index) of ``journal``'s route, as a broker says."""
    for address in run.endpoints():
        with contextlib.suppress(grpc.aio.AioRpcError):
            _, meta = await testing.read(run.channels.stub(address), journal, -1, deadline=5)
            route = meta[0].header.route if meta else None
            if route is not None and route.primary >= 0 and route.members:
                members = [cluster.brokers.index_of(m) for m in route.members]
                return members[route.primary], members
    raise HarnessError(f"no broker names the primary of {journal}")


async def _whole(
    run: Run, cluster: ProcessCluster, replication: int, within: float
) -> float | None:
    """Seconds until every broker is a member with room for journals, and every
    journal's route has ``replication`` members (None: not within ``within`` s).

    A partition round starts only then: a round begun while the last one's victim
    was still announcing itself again would find too few brokers to move to.
    """
    brokers = cluster.brokers.brokers
    prefix = f"{cluster.brokers.etcd_prefix}/members/"
    started = time.monotonic()
    etcd = await keyspace.connect(cluster.etcd.endpoint, call_timeout=5)
    try:
        while time.monotonic() - started < within:
            with contextlib.suppress(Exception):
                kvs = await etcd.get_prefix(prefix.encode())
                specs = [pb.BrokerSpec.FromString(kv.value) for kv in kvs]
                with_room = sum(1 for spec in specs if spec.journal_limit > 0)
                if with_room == len(brokers):
                    routes = [await _route(run, cluster, j) for j in run.params.journals]
                    if all(len(members) == replication for _, members in routes):
                        return time.monotonic() - started
            await asyncio.sleep(0.25)
    finally:
        await etcd.close()
    return None


async def _primary(run: Run, cluster: ProcessCluster, journal: str) -> int:
    return (await _route(run, cluster, journal))[0]


async def sigstop(params: Params, work_dir: pathlib.Path) -> Report:
    """SIGSTOP the primary of a journal for its lease and more, then SIGCONT it."""

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        for k in range(params.stops):
            journal = params.journals[k % len(params.journals)]
            victim = await _primary(run, cluster, journal)
            cluster.brokers[victim].pause()
            run.fault(f"stop{k + 1}:{cluster.brokers[victim].suffix[-2:]}")
            try:
                await asyncio.sleep(params.lease_s + params.stop_past_lease_s)
            finally:
                cluster.brokers[victim].resume()
            run.fault(f"cont{k + 1}")
            await run.expect_writable(f"SIGCONT {k + 1}", params.kill_bound_s + 10)
            await asyncio.sleep(params.spacing_s)

    return await _on_process_cluster("sigstop-primary", params, work_dir, inject)


# --- (d) etcd SIGKILL + restart --------------------------------------------------------


async def etcd_outage(params: Params, work_dir: pathlib.Path) -> Report:
    """SIGKILL etcd; restart it ``etcd_down_s`` later on its data dir and port."""

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        for k in range(params.etcd_rounds):
            cluster.etcd.kill()
            run.fault(f"etcd-kill{k + 1}")
            await asyncio.sleep(params.etcd_down_s)
            await asyncio.to_thread(cluster.etcd.restart)
            run.fault(f"etcd-back{k + 1}")
            await run.expect_writable(f"etcd restart {k + 1}", params.etcd_lease_s + 10)
            await asyncio.sleep(params.spacing_s)

    return await _on_process_cluster(
        "etcd-kill", params, work_dir, inject, lease_s=params.etcd_lease_s
    )


# --- (e) store outage --------------------------------------------------------------------


def _store_down(root: pathlib.Path, away: pathlib.Path) -> None:
    """Move the store root to ``away`` and put a plain file where it was.

    A broker storing a fragment between the two steps makes the root again
    (mkdir -p): that directory is moved aside whole (``<root>.late<n>``, merged back
    by _merge_late) and the file put in place once the name is free.
    """
    root.rename(away)
    placeholder = root.with_name(root.name + ".outage")
    placeholder.write_text("the chaos suite's store outage\n")
    for n in itertools.count():
        try:
            os.rename(placeholder, root)  # Refused while a directory holds the name.
            return
        except IsADirectoryError:
            root.rename(root.with_name(f"{root.name}.late{n}"))


def _store_up(root: pathlib.Path, away: pathlib.Path) -> None:
    """Put the store root back, with whatever brokers stored under a re-made one."""
    root.unlink()
    for n in itertools.count(1000):
        _merge_late(root, away)
        try:
            away.rename(root)  # Over an empty directory a broker just made, too.
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            root.rename(root.with_name(f"{root.name}.late{n}"))


def _merge_late(root: pathlib.Path, away: pathlib.Path) -> None:
    """Move what brokers stored under a re-made root (see _store_down) into ``away``."""
    for late in sorted(root.parent.glob(f"{root.name}.late*")):
        for path in sorted(late.rglob("*")):
            if path.is_file() and not path.name.startswith(".partial-"):
                target = away / path.relative_to(late)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
        shutil.rmtree(late)


async def store_outage(params: Params, work_dir: pathlib.Path) -> Report:
    """Move the ``file://`` root away and put a plain file in its place, then restore it."""

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        root = cluster.brokers.file_root
        away = root.with_name(root.name + ".away")
        for k in range(params.store_rounds):
            _store_down(root, away)
            run.fault(f"store-down{k + 1}")
            try:
                await asyncio.sleep(params.store_outage_s)
            finally:
                _store_up(root, away)
            run.fault(f"store-back{k + 1}")
            await run.expect_writable(f"store restored {k + 1}", 30)
            await asyncio.sleep(params.spacing_s)

    return await _on_process_cluster("store-outage", params, work_dir, inject)


# --- (f) a full spool disk ------------------------------------------------------------------


def _mount_small(directory: pathlib.Path, size: str) -> tuple[str, Callable[[], None]]:
    """Mount a ``size`` filesystem on ``directory``: a tmpfs, else a loop image; (how, undo)."""
    directory.mkdir(parents=True, exist_ok=True)
    tried = []
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode == 0:
        return "tmpfs", lambda: _umount(directory)
    tried.append(f"mount -t tmpfs: {out.stderr.strip()}")
    image = directory.with_name(directory.name + ".img")
    steps = [
        ["truncate", "-s", size.upper(), str(image)],
        ["mkfs.ext4", "-q", "-F", str(image)],
        ["mount", "-o", "loop", str(image), str(directory)],
    ]
    for step in steps:
        if shutil.which(step[0]) is None:
            tried.append(f"{step[0]}: not installed")
            break
        out = subprocess.run(step, capture_output=True, text=True, check=False)
        if out.returncode:
            tried.append(f"{' '.join(step[:3])}: {out.stderr.strip()}")
            break
    else:
        return "loop image", lambda: _umount(directory)
    raise SpoolUnavailable("cannot mount a small filesystem: " + "; ".join(tried))


def _umount(directory: pathlib.Path) -> None:
    subprocess.run(["umount", "-l", str(directory)], capture_output=True, check=False)


def _fill(directory: pathlib.Path) -> int:
    """Write a ballast file until the filesystem is full; returns its size."""
    block = b"\0" * (256 << 10)
    written = 0
    with open(directory / "ballast", "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    return written
                block = block[: len(block) // 2]


async def spool_full(params: Params, work_dir: pathlib.Path) -> Report:
    """One broker's spool on a small filesystem, filled up while appends go on, then freed."""
    victim = 1
    mounted: list[str] = []

    def prepare(cluster: ProcessCluster) -> Callable[[], None]:
        how, undo = _mount_small(cluster.brokers[victim].spool_dir, params.spool_size)
        mounted.append(how)
        _spool_on(cluster.brokers[victim])
        return undo

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        spool = cluster.brokers[victim].spool_dir
        run.notes.append(
            f"{cluster.brokers[victim].suffix}'s spool on a {mounted[0]} of {params.spool_size}"
        )
        for k in range(params.spool_rounds):
            ballast = await asyncio.to_thread(_fill, spool)
            run.fault(f"spool-full{k + 1}")
            run.notes.append(f"round {k + 1}: ballast of {ballast >> 10} KiB filled the spool")
            await asyncio.sleep(params.spool_full_s)
            # Appends must fail or move on while the disk is full: keep filling
            # whatever the broker freed, then give it all back.
            (spool / "ballast").unlink()
            run.fault(f"space-back{k + 1}")
            await run.expect_writable(f"space returned {k + 1}", params.kill_bound_s + 10)
            await asyncio.sleep(params.spacing_s)

    return await _on_process_cluster(
        "spool-full", params, work_dir, inject, prepare=prepare, go_disk=True
    )


# --- one broker's spool disk stalls ------------------------------------------------------------


#: Words of an error that tells its reader nothing of the cause (a bug, wherever it shows).
_UNCLEAR = ("TaskGroup", "Internal error", "Exception", "unexpected EOF")


class StallUnavailable(HarnessError):
    """No FUSE mount can be made here for the stalled-spool scenario (says why)."""


async def _still_serving(run: Run, victim: testing.BrokerProcess) -> list[str]:
    """What the broker with the stalled disk failed to answer within a second (empty: all)."""
    failed = []
    try:
        call = run.channels.stub(victim.address).List(pb.ListRequest(), timeout=1.0)
        listed = await call.read()
        call.cancel()
        if listed is grpc.aio.EOF:
            failed.append("List: no answer")
    except grpc.aio.AioRpcError as e:
        failed.append(f"List: {e.code().name}")
    # Gazette has no /debug/ready: its metrics (on its one port) say it serves HTTP.
    url = (
        f"http://{victim.address}/debug/metrics"
        if isinstance(victim, NetGoBrokerProcess)
        else f"http://127.0.0.1:{victim.http_port}/debug/ready"
    )
    try:
        with await asyncio.to_thread(urllib.request.urlopen, url, None, 1.0) as r:
            if r.status != 200:
                failed.append(f"/debug/ready: {r.status}")
    except OSError as e:  # URLError and timeouts are OSErrors
        failed.append(f"/debug/ready: {e}")
    return failed


async def _member_lease(cluster: ProcessCluster, b: testing.BrokerProcess) -> int | None:
    """The etcd lease of ``b``'s member key (None: the key is gone)."""
    key = allocator.member_key(cluster.brokers.etcd_prefix, b.zone, b.suffix)
    etcd = await keyspace.connect(cluster.etcd.endpoint, call_timeout=5)
    try:
        kv = await etcd.get(key.encode())
    finally:
        await etcd.close()
    return None if kv is None else kv.lease


async def spool_stall(params: Params, work_dir: pathlib.Path) -> Report:
    """One broker's spool disk stops answering (every write blocks) for a while, then heals.

    The broker's spool dir is a FUSE passthrough (:mod:`gazette.broker.stallfs`);
    journals are RF2 over 3 brokers, so some journals' routes avoid it. While
    the disk is stalled, every half second: the broker must answer List and
    ``/debug/ready`` within a second, and every journal whose route avoids it
    must take an append (through the other brokers) within 2 s; over the stall
    it must keep its etcd lease (its member key's lease is unchanged).
    Appends to its own journals must fail (within ``--broker.spool-write-timeout``,
    not hang: the scenario's verdict counts hung appends), and be writable
    again once the disk answers. Each miss is recorded as the journal (or
    broker) not being writable."""
    victim = 1
    disk: list[stallfs.StallFS] = []
    params = dataclasses.replace(params, journals=("chaos/a", "chaos/b", "chaos/c"))
    why = stallfs.unavailable()
    if why is not None:
        raise StallUnavailable(f"no stalled disk here: {why}")

    def prepare(cluster: ProcessCluster) -> Callable[[], None]:
        spool = cluster.brokers[victim].spool_dir
        fs = stallfs.StallFS(spool.with_name(spool.name + ".disk"), spool)
        fs.__enter__()
        disk.append(fs)
        _spool_on(cluster.brokers[victim])
        return fs.close

    async def avoiding(run: Run, cluster: ProcessCluster) -> list[str]:
        out = []
        for j in params.journals:
            _, members = await _route(run, cluster, j)
            if victim not in members:
                out.append(j)
        return out

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        b = cluster.brokers[victim]
        others = [x.address for i, x in enumerate(cluster.brokers.brokers) if i != victim]
        run.notes.append(
            f"{b.suffix}'s spool on a FUSE passthrough; "
            + (
                "Gazette's broker (no write timeout)"
                if params.go
                else f"--broker.spool-write-timeout {params.spool_write_timeout_s:g}s"
            )
        )
        for k in range(1, params.stall_rounds + 1):
            free = await avoiding(run, cluster)
            lease = await _member_lease(cluster, b)
            await asyncio.to_thread(disk[0].stall)
            run.fault(f"stall{k}:{b.suffix[-2:]}")
            stalled_at = time.monotonic()
            checks = appends = 0
            slowest = 0.0
            try:
                while time.monotonic() - stalled_at < params.stall_for_s:
                    checks += 1
                    for miss in await _still_serving(run, b):
                        run.unwritable.append(f"round {k}: {b.suffix} with a stalled disk: {miss}")
                    for i, j in enumerate(free):
                        t0 = time.monotonic()
                        stub = run.channels.stub(others[(checks + i) % len(others)])
                        try:
                            resp = await testing.append(stub, j, [], deadline=2.0)
                            status = pb.Status.Name(resp.status)
                        except grpc.aio.AioRpcError as e:
                            status = e.code().name
                        slowest = max(slowest, time.monotonic() - t0)
                        appends += 1
                        if status != "OK":
                            run.unwritable.append(
                                f"round {k}: {j} (its route avoids {b.suffix}) answered "
                                f"{status} while {b.suffix}'s disk stalled"
                            )
                    await asyncio.sleep(0.5)
            finally:
                await asyncio.to_thread(disk[0].unstall)
            run.fault(f"unstall{k}")
            after = await _member_lease(cluster, b)
            if after != lease:
                run.unwritable.append(
                    f"round {k}: {b.suffix} lost its etcd lease while its disk stalled "
                    f"({lease} -> {after})"
                )
            run.notes.append(
                f"round {k}: {checks} checks of {b.suffix} (List, /debug/ready) while stalled; "
                f"journals avoiding it {free or 'none'}: {appends} appends, slowest "
                f"{slowest:.2f}s; lease {'kept' if after == lease else 'LOST'}"
            )
            await run.expect_writable(f"the disk answering again ({k})", params.kill_bound_s + 10)
            await asyncio.sleep(params.spacing_s)
        # What failed appends were told must name the cause, not an internal error.
        said = run.workload.details.most_common()
        run.notes.append("failed appends were told: " + "; ".join(f"{n}x {d}" for d, n in said[:4]))
        for detail, n in said:
            if any(w in detail for w in _UNCLEAR):
                run.unwritable.append(f"{n} appends answered an unclear error: {detail}")

    return await _on_process_cluster(
        "spool-stall",
        params,
        work_dir,
        inject,
        prepare=prepare,
        replication=2,
        extra_args=["--broker.spool-write-timeout", f"{params.spool_write_timeout_s:g}s"],
        go_disk=True,
    )


# --- (g) client aborts ---------------------------------------------------------------------


async def aborts(params: Params, work_dir: pathlib.Path) -> Report:
    """Appends opened and abandoned half-way, among the recording writers."""

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        run.fault("aborts")
        outcomes = await run.workload.abort_appends(params.aborts, run.rng)
        run.notes.append(f"abandoned appends ended as {dict(outcomes)}")
        await run.expect_writable("the aborts", 15)

    return await _on_process_cluster("client-aborts", params, work_dir, inject)


# --- (h) SIGTERM of every broker ---------------------------------------------------------------


async def sigterm_all(params: Params, work_dir: pathlib.Path) -> Report:
    """SIGTERM every broker at once: each must exit 0 within ``term_timeout_s``; restart."""

    async def wait_exit(cluster: ProcessCluster, i: int, run: Run, k: int) -> str:
        b = cluster.brokers[i]
        started = time.monotonic()
        assert b.proc is not None
        try:
            code = await asyncio.to_thread(b.proc.wait, params.term_timeout_s)
        except subprocess.TimeoutExpired:
            b.kill()
            run.forced.append(
                f"round {k}: {b.suffix} did not exit within {params.term_timeout_s:.0f}s "
                f"of SIGTERM (SIGKILLed); log: {b.log_tail(3)!r}"
            )
            return f"{b.suffix} SIGKILLed"
        if code != 0:
            run.forced.append(f"round {k}: {b.suffix} exited {code} on SIGTERM")
        return f"{b.suffix} exit {code} in {time.monotonic() - started:.1f}s"

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        for k in range(1, params.term_rounds + 1):
            for b in cluster.brokers.brokers:
                b.send_term()
            run.fault(f"term-all{k}")
            exits = await asyncio.gather(
                *(wait_exit(cluster, i, run, k) for i in range(len(cluster.brokers)))
            )
            run.notes.append(f"round {k}: " + ", ".join(exits))
            await asyncio.to_thread(cluster.brokers.start)
            await run.expect_writable(f"restarting every broker ({k})", params.heal_s)
            await asyncio.sleep(params.spacing_s)

    return await _on_process_cluster("sigterm-all", params, work_dir, inject)


# --- SIGKILL of every broker at once, restarted on their disks ---------------------------------


async def kill_all(params: Params, work_dir: pathlib.Path) -> Report:
    """SIGKILL every broker at once under load; start them again on their spool dirs.

    Each stores what it finds in its spool dir (the confirmed part) before it
    announces itself, so nothing acknowledged is lost, and the one that owned
    a journal's acknowledgement fence lowers it to what it recovered. The
    journals then resume by themselves (a lease + 2 s after their brokers saw
    the gap), where what was acknowledged ends: no reset of their heads, no
    offset handed out twice and no offsets skipped (a reader would see a hole).
    """

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        for k in range(1, params.term_rounds + 1):
            for b in cluster.brokers.brokers:
                b.kill()
            run.fault(f"kill-all{k}")
            await asyncio.to_thread(cluster.brokers.start)
            await run.expect_writable(f"restarting every broker ({k})", params.heal_s)
            await asyncio.sleep(params.spacing_s)

    return await _on_process_cluster("kill-all", params, work_dir, inject)


# --- SIGKILL of every broker at once, restarted on empty disks ----------------------------------


def _stored_spans(root: pathlib.Path, journal: str) -> list[tuple[int, int]]:
    """The ``[begin, end)`` of every fragment file of ``journal`` in the ``file://`` store."""
    directory = root / journal
    spans = []
    for path in directory.rglob("*") if directory.is_dir() else ():
        with contextlib.suppress(pb.ValidationError):
            spec = pb.parse_fragment_path(path.relative_to(directory).as_posix(), journal=journal)
            spans.append((spec.begin, spec.end))
    return sorted(spans)


async def kill_all_fresh_disks(params: Params, work_dir: pathlib.Path) -> Report:
    """SIGKILL every broker at once under load; start them again on *empty* spool dirs.

    As if every node were replaced: what the brokers had not yet persisted to
    the store is gone, so appends acknowledged before are lost with it (reported,
    not judged) and readers jump over it (holes over offsets no stored fragment
    holds, see :attr:`~chaos.checker.Verdict.unstored_holes`); any other append
    (stored by then, or acknowledged after the restart) must read back
    (:attr:`~chaos.report.Report.lost_beyond_tail`). No operator steps
    in (unlike :func:`kill_all`'s reset of the heads): the brokers must resume
    each journal on their own within ``heal_s``, past every offset that may have
    been acknowledged, so no offset is ever acknowledged twice.
    """

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        root = cluster.brokers.file_root
        for k in range(1, params.term_rounds + 1):
            for b in cluster.brokers.brokers:
                b.kill()
            run.fault(f"kill-all-fresh{k}")
            # Nothing runs now: what the store holds is all that survives.
            stored_spans: dict[str, list[tuple[int, int]]] = {}
            at_risk = []
            for journal in params.journals:
                spans = await asyncio.to_thread(_stored_spans, root, journal)
                stored_spans[journal] = spans
                acked = max((a.end for a in run.workload.acks if a.journal == journal), default=0)
                stored = max((e for _, e in spans), default=0)
                at_risk.append(f"{journal} acked to {acked}, stored to {stored}")
            wiped = 0
            for b in cluster.brokers.brokers:
                wiped += sum(f.stat().st_size for f in b.spool_dir.rglob("*") if f.is_file())
                await asyncio.to_thread(shutil.rmtree, b.spool_dir)
                b.spool_dir.mkdir(parents=True)
            run.notes.append(f"round {k}: {wiped >> 10} KiB of spools wiped; " + ", ".join(at_risk))
            # Stamped once the old brokers are long gone, before new ones start: an
            # ack taken until now was sent by a broker that died with its disk.
            run.disk_losses.append(DiskLoss(run.workload.clock(), stored_spans))
            await asyncio.to_thread(cluster.brokers.start)
            await run.expect_writable(
                f"restarting every broker on empty disks ({k})", params.heal_s
            )
            await asyncio.sleep(params.spacing_s)

    return await _on_process_cluster("kill-all-fresh-disks", params, work_dir, inject)


# --- (i) make down / make up -------------------------------------------------------------------


async def make_down_up(params: Params, work_dir: pathlib.Path) -> Report:
    """``make down`` while appends go on, then ``make up`` over the same data."""
    dev = DevCluster(work_dir / "data")

    async def inject(run: Run) -> None:
        for k in range(1, params.down_up_rounds + 1):
            dev.expect_down = True
            run.fault(f"down{k}")
            down = await asyncio.to_thread(dev.make, "down")
            lines = [ln for ln in down.output.splitlines() if ln.strip()]
            run.notes.append(f"make down {k}: exit {down.returncode} in {down.seconds:.0f}s")
            if down.returncode != 0 or down.killed:
                run.forced.append(
                    f"make down {k} exited {down.returncode}, SIGKILLed {down.killed}: "
                    + " | ".join(lines[-6:])
                )
            if not any(ln.startswith("sent SIGTERM") for ln in lines):
                run.notes.append(f"make down {k} said: " + " | ".join(lines[-6:]))
            up = await asyncio.to_thread(dev.make, "up")
            if up.returncode != 0:
                raise HarnessError(f"make up {k} failed:\n{up.output[-3000:]}")
            dev.expect_down = False
            await run.expect_writable(f"make up {k}", params.heal_s)
            await asyncio.sleep(params.spacing_s)

    channels = Channels()
    try:
        up = await asyncio.to_thread(dev.make, "up")
        if up.returncode != 0:
            raise HarnessError(f"make up failed:\n{up.output[-3000:]}")
        return await _drive("make-down-up", params, dev, channels, inject)
    finally:
        await channels.close()
        await asyncio.to_thread(dev.close)


# --- (j) network partitions ------------------------------------------------------------------


async def _on_net_cluster(
    scenario: str,
    params: Params,
    work_dir: pathlib.Path,
    inject: Callable[[Run, NetCluster], Awaitable[None]],
    *,
    brokers: int,
    replication: int,
    consumers: int = 0,
) -> Report:
    """Run ``inject`` on a fresh etcd + ``brokers`` brokers, each in its own namespace
    (and ``consumers`` namespaces for consumer processes, which ``inject`` starts)."""
    cluster = NetCluster(
        work_dir,
        lease_s=params.lease_s,
        brokers=brokers,
        how=params.cut_how,
        go=params.go,
        consumers=consumers,
    )
    if params.go:
        scenario += "-go"
    channels = Channels()
    try:
        await asyncio.to_thread(cluster.prepare)
        await asyncio.to_thread(cluster.start)
        return await _drive(
            scenario,
            params,
            cluster,
            channels,
            lambda run: inject(run, cluster),
            replication=replication,
            store_root=cluster.brokers.file_root,
        )
    finally:
        # Channels first: nothing may still be sending to the /24 once it is gone.
        await channels.close()
        await asyncio.to_thread(cluster.close)


class _Straddle:
    """An append whose content reaches a primary before a partition, committed after it heals.

    So each cut surely finds the primary (and its replicas) holding content no
    commit confirmed, while the journal may go on elsewhere from an earlier
    offset. The commit chunk comes only once the network is whole; by then the
    broker's minimum append rate (``--broker.min-append-rate``: no stream may
    stall for much more than a second, whatever the rate) has normally aborted
    the stream. Whatever the broker answers is fine, but an acknowledgement
    must hold: it is recorded as an :class:`~chaos.workload.Ack` and verified
    like the appenders' own.
    """

    def __init__(self, run: Run, address: str, journal: str, k: int) -> None:
        self.run = run
        self.address = address
        self.journal = journal
        self.ids = tuple(RecordId("straddle", 10 * k + i) for i in range(3))
        self.data = b"".join(record(i) for i in self.ids)
        self.sent = asyncio.Event()
        self.commit = asyncio.Event()

    async def append(self, deadline_s: float) -> str:
        async def requests() -> AsyncIterator[pb.AppendRequest]:
            yield pb.AppendRequest(journal=self.journal)
            yield pb.AppendRequest(content=self.data)
            self.sent.set()
            await self.commit.wait()
            yield pb.AppendRequest()

        stub = self.run.channels.stub(self.address)
        try:
            resp = await stub.Append(requests(), timeout=deadline_s)
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name} ({(e.details() or '')[:120]})"
        except asyncio.CancelledError:
            if not cancelled_by_server():
                raise
            return "CANCELLED (by the server)"
        finally:
            self.sent.set()
        if resp.status != pb.OK:
            return pb.Status.Name(resp.status)
        begin, end = resp.commit.begin, resp.commit.end
        if end - begin != len(self.data):
            self.run.workload.bad_acks.append(
                f"{self.journal}: straddling append of {len(self.data)} bytes "
                f"acknowledged as [{begin}, {end})"
            )
        self.run.workload.acks.append(
            Ack(self.journal, begin, end, self.ids, self.run.workload.clock())
        )
        return f"OK [{begin},{end})"


async def _writable_elsewhere(
    run: Run, addresses: Sequence[str], within: float, attempt_s: float = 1.0
) -> dict[str, float | None]:
    """Seconds until each journal took a zero-byte append through ``addresses`` (None: never).

    Short attempts, so a broker still proxying to a cut-off primary costs at most
    ``attempt_s`` of precision (the appenders' own deadline is much longer); the
    journals are probed side by side.
    """
    started = time.monotonic()

    async def probe(journal: str, turn: int) -> float | None:
        while time.monotonic() - started < within:
            stub = run.channels.stub(addresses[turn % len(addresses)])
            turn += 1
            try:
                resp = await testing.append(stub, journal, [], deadline=attempt_s)
                if resp.status == pb.OK:
                    return time.monotonic() - started
            except grpc.aio.AioRpcError:
                pass
            except asyncio.CancelledError:
                if not cancelled_by_server():
                    raise
            await asyncio.sleep(0.1)
        return None

    journals = run.params.journals
    took = await asyncio.gather(*(probe(j, i) for i, j in enumerate(journals)))
    return dict(zip(journals, took, strict=True))


async def _partition(
    run: Run,
    cluster: NetCluster,
    what: str,
    cut: Callable[[str], None],
    *,
    replication: int,
    first: Callable[[str, list[str]], None] | None = None,
    duration_s: float | None = None,
    probe_others: bool = False,
) -> None:
    """Per round: find a journal's primary, open a :class:`_Straddle` append on it,
    ``cut`` it (by node name) for ``duration_s`` (default :attr:`Params.partition_s`),
    heal everything, let the straddling append commit, and expect every journal
    writable.

    With ``first``, the partition comes in two steps: ``first`` (given the
    primary's and the route members' node names) cuts some links, then the
    straddling append sends its content *and* its commit, and only then ``cut``
    completes the partition (the commit is not held).

    With ``probe_others``, every journal must take an append through the other
    brokers within :attr:`Params.kill_bound_s` of the cut, as after a SIGKILL
    (else it is recorded as unwritable)."""
    params = run.params
    for k in range(1, params.partitions + 1):
        journal = params.journals[(k - 1) % len(params.journals)]
        took = await _whole(run, cluster, replication, params.heal_s)
        if took is None:
            run.unwritable.append(
                f"round {k}: the cluster was not whole (every broker a member, every route "
                f"{replication} members) {params.heal_s:g}s after the last round"
            )
        elif took > 1.0:
            run.notes.append(f"round {k}: waited {took:.1f}s for the cluster to be whole")
        victim, members = await _route(run, cluster, journal)
        name = cluster.name_of(victim)
        if k == 1:
            run.notes.append(f"links cut by {params.cut_how}")
        straddle = _Straddle(run, cluster.brokers[victim].address, journal, k)
        probe: asyncio.Task[dict[str, float | None]] | None = None
        async with asyncio.TaskGroup() as tg:
            try:
                if first is not None:
                    first(name, [cluster.name_of(m) for m in members])
                    run.fault(f"{what}{k}-begins:{name[-2:]}")
                    straddle.commit.set()
                pending = tg.create_task(
                    straddle.append((duration_s or params.partition_s) + 30), name=f"straddle-{k}"
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(straddle.sent.wait(), 5)
                # Let the content (and commit) reach the primary, and from there
                # whichever replicas it still reaches, before cutting.
                await asyncio.sleep(0.3)
                cut(name)
                run.fault(f"{what}{k}:{name[-2:]}")
                run.notes.append(
                    f"round {k}: {what} of {name} (primary of {journal}): {cluster.net.cuts}"
                )
                if probe_others:
                    brokers = cluster.brokers.brokers
                    others = [b.address for i, b in enumerate(brokers) if i != victim]
                    probe = tg.create_task(
                        _writable_elsewhere(run, others, params.partition_s), name="probe"
                    )
                await asyncio.sleep(duration_s or params.partition_s)
            finally:
                await asyncio.to_thread(cluster.net.heal_all)
                straddle.commit.set()
            run.fault(f"heal{k}")
            await run.expect_writable(f"healing {what} {k}", params.kill_bound_s + 10)
        run.notes.append(f"round {k}: the straddling append ended {pending.result()}")
        if probe is not None:
            took = probe.result()
            run.notes.append(
                f"round {k}: writable through the other brokers after "
                + ", ".join(f"{j} {'never' if t is None else f'{t:.1f}s'}" for j, t in took.items())
            )
            for j, t in took.items():
                if t is None or t > params.kill_bound_s:
                    run.unwritable.append(
                        f"{j} not writable through the other brokers within "
                        f"{params.kill_bound_s:g}s of {what} {k}: "
                        + ("never" if t is None else f"{t:.1f}s")
                    )
        await asyncio.sleep(params.spacing_s)


async def partition_primary(
    params: Params,
    work_dir: pathlib.Path,
    *,
    brokers: int = 3,
    replication: int = 2,
    staged: bool = False,
) -> Report:
    """Cut a journal's primary from every other node (etcd, peers, the appenders), then heal.

    ``staged``: what the primary sends to its peers is lost first (but for one
    replica, if it has two or more), and a straddling append commits meanwhile,
    so the primary (and that replica) hold content the other members lack.
    """

    async def inject(run: Run, cluster: NetCluster) -> None:
        def peers_first(name: str, members: list[str]) -> None:
            # All but one replica stop hearing from the primary: with RF3 the
            # replicas then disagree on what was committed last.
            replicas = [m for m in members if m != name]
            keep = replicas[0] if len(replicas) > 1 else None
            for peer in cluster.broker_names:
                if peer not in (name, keep):
                    cluster.net.block(name, peer)
            run.notes.append(f"staged: {name} still reaches {keep} of {members}")

        await _partition(
            run,
            cluster,
            "isolate",
            cluster.net.isolate,
            replication=replication,
            first=peers_first if staged else None,
            probe_others=True,
        )

    return await _on_net_cluster(
        f"partition-primary-rf{replication}" + ("-staged" if staged else ""),
        params,
        work_dir,
        inject,
        brokers=brokers,
        replication=replication,
    )


async def partition_etcd_only(params: Params, work_dir: pathlib.Path) -> Report:
    """Cut only a primary's link to etcd (peers and appenders still reach it), then heal.

    The cut lasts ``lease_s + etcd_cut_past_lease_s``: long enough that a primary
    which held on to the journal until the network healed shows as a long gap.
    """

    async def inject(run: Run, cluster: NetCluster) -> None:
        await _partition(
            run,
            cluster,
            "etcd-cut",
            lambda name: cluster.net.cut_from_etcd(name, ETCD),
            replication=2,
            duration_s=params.lease_s + params.etcd_cut_past_lease_s,
        )

    return await _on_net_cluster(
        "partition-etcd-only", params, work_dir, inject, brokers=3, replication=2
    )


async def partition_peers_only(params: Params, work_dir: pathlib.Path) -> Report:
    """Cut a primary from the other brokers only (etcd and appenders still reach it), then heal.

    Gazette's journal waits for the heal here (its primary keeps its lease); ours
    must be writable through the other brokers within the lease + 2 s of the cut.
    """

    async def inject(run: Run, cluster: NetCluster) -> None:
        def cut(name: str) -> None:
            cluster.net.cut_from(name, [b for b in cluster.broker_names if b != name])

        # The primary keeps its lease, but it can replicate to nobody: it must give
        # its journals up (--broker.isolation-timeout), and the other brokers carry
        # on within the lease + 2 s, as after a SIGKILL.
        await _partition(run, cluster, "peers-cut", cut, replication=2, probe_others=True)

    return await _on_net_cluster(
        "partition-peers-only", params, work_dir, inject, brokers=3, replication=2
    )


# --- (k) a partition of a consumer shard's primary -------------------------------------------


async def partition_shard_primary(params: Params, work_dir: pathlib.Path) -> Report:
    """stream-sum (:mod:`chaos.streamsum`) on 3 consumer processes; per round, the process
    holding a shard's primary is cut from every other node for ``partition_s``, then healed.

    Meanwhile the chunker writes streams of chunks and the broker appenders go on
    (brokers are not faulted). The shard must have caught up with every chunk
    written before the heal within ``lease_s + 10`` s of it (a ``Stat`` read
    barrier); at the end every stream's Sum must have arrived exactly once and be
    right, and no shard may have FAILED. Consumer processes that exit on their
    own count as exits, like brokers.
    """
    bound = params.lease_s + 10.0

    async def rounds(
        run: Run, cluster: NetCluster, jc: client.JournalClient, etcd: Any, failures: list[str]
    ) -> None:
        consumers = cluster.consumers
        assert consumers is not None
        endpoints = [p.endpoint for p in consumers.processes]
        for k in range(1, params.partitions + 1):
            shard = streamsum.shard_id((k - 1) % streamsum.PARTS)
            journal = streamsum.chunk_journal((k - 1) % streamsum.PARTS)
            victim = await _shard_primary(etcd, shard, params.heal_s)
            # It must be consuming before the cut, or the round proves nothing.
            head = (await client.append(jc, journal, b"")).commit.end
            took, err = await streamsum.caught_up(endpoints, shard, journal, head, params.heal_s)
            if took is None:
                failures.append(
                    f"round {k}: {shard} did not read through {journal}@{head} within "
                    f"{params.heal_s:g}s, before any cut ({err})"
                )
                continue
            others = [p.endpoint for p in consumers.processes if p.suffix != victim]
            try:
                cluster.net.isolate(victim)
                run.fault(f"isolate{k}:{victim[-2:]}")
                # While cut off: how soon a standby carries on past the chunks written
                # so far (a figure, not judged: the bound is on the heal).
                head = (await client.append(jc, journal, b"")).commit.end
                cut_at = time.monotonic()
                over, _ = await streamsum.caught_up(
                    others, shard, journal, head, params.partition_s
                )
                run.notes.append(
                    f"round {k}: isolated {victim} (primary of {shard}); "
                    + (
                        "no other process carried on while it was cut off"
                        if over is None
                        else f"another process read through {journal}@{head} {over:.1f}s on"
                    )
                )
                await _sleep_until(cut_at + params.partition_s)
            finally:
                await asyncio.to_thread(cluster.net.heal_all)
            run.fault(f"heal{k}")
            head = (await client.append(jc, journal, b"")).commit.end
            took, err = await streamsum.caught_up(endpoints, shard, journal, head, bound)
            now = await streamsum.primary_of(etcd, shard)
            run.notes.append(
                f"round {k}: {shard} read through {journal}@{head} "
                + ("never" if took is None else f"{took:.1f}s")
                + f" after healing; its primary is now {now}"
            )
            if took is None:
                failures.append(
                    f"round {k}: {shard} did not read through {journal}@{head} within "
                    f"{bound:g}s of healing ({err})"
                )
            await asyncio.sleep(params.spacing_s)

    async def inject(run: Run, cluster: NetCluster) -> None:
        failures: list[str] = []
        run.consumer_failures = failures
        etcd = await keyspace.connect(cluster.etcd.endpoint)
        try:
            config = client.ClientConfig(address=cluster.brokers[0].endpoint)
            async with client.JournalClient(config) as jc:
                await streamsum.setup(jc, etcd)
                await asyncio.to_thread(
                    cluster.start_consumers,
                    streamsum.APP,
                    etcd_prefix=streamsum.PREFIX,
                    lease_s=params.lease_s,
                    app_args=streamsum.APP_ARGS,
                    env=streamsum.env(),
                )
                # Chunks flow through every round and the recovery after it.
                pace, chunks = 0.02, 40
                writing_s = params.partitions * (params.partition_s + bound + params.spacing_s) + 15
                streams = max(10, int(writing_s / pace / (chunks + 1)))
                async with asyncio.TaskGroup() as tg:
                    chunker = tg.create_task(
                        streamsum.stream_sum.run_chunker(
                            jc,
                            streams=streams,
                            chunks_per_stream=chunks,
                            concurrent=10,
                            sum_timeout=params.heal_s,
                            pace=pace,
                            seed=1,
                        ),
                        name="chunker",
                    )
                    tg.create_task(rounds(run, cluster, jc, etcd, failures), name="rounds")
            sums = chunker.result()
            run.notes.insert(  # first: the description shows the first few notes
                0,
                f"stream-sum: {sums.streams} streams, {sums.chunks} chunks, {sums.sums} sums: "
                f"{sums.correct} correct, {sums.mismatched} mismatched, {sums.duplicates} "
                f"duplicated, {sums.missing} missing in {sums.seconds:.0f}s",
            )
            if not sums.ok or sums.correct != sums.streams:
                failures.append(
                    f"stream-sum not exactly once: {sums.mismatched} mismatched, "
                    f"{sums.duplicates} duplicated, {sums.missing} missing of {sums.streams}"
                )
            failed = await streamsum.failed_shards(etcd)
            failures += [f"shard failed: {f}" for f in failed]
            # The exit monitor polls: one that just went is caught here.
            assert cluster.consumers is not None
            for p in cluster.consumers.exited_on_their_own():
                failures.append(f"{p.suffix} exited with {p.returncode}: {p.log_tail(3)!r}")
        finally:
            await etcd.close()

    return await _on_net_cluster(
        "partition-shard-primary",
        params,
        work_dir,
        inject,
        brokers=3,
        replication=2,
        consumers=3,
    )


async def _shard_primary(etcd: Any, shard: str, within: float) -> str:
    """The suffix (= node name) of the consumer process serving ``shard``'s primary."""
    deadline = time.monotonic() + within
    while (primary := await streamsum.primary_of(etcd, shard)) is None:
        if time.monotonic() > deadline:
            raise HarnessError(f"{shard} has no primary {within:.0f}s on")
        await asyncio.sleep(0.3)
    return primary


def scenario_names() -> Sequence[str]:
    return (
        "sigkill-spaced",
        "sigkill-rapid",
        "sigstop-primary",
        "etcd-kill",
        "store-outage",
        "spool-full",
        "client-aborts",
        "sigterm-all",
        "kill-all",
        "kill-all-fresh-disks",
        "make-down-up",
        "partition-primary-rf2",
        "partition-primary-rf3",
        "partition-primary-rf3-staged",
        "partition-etcd-only",
        "partition-peers-only",
        "partition-shard-primary",
    )
