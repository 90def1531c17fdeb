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
``aborts``     appends abandoned half-way (cancelled, or closed without commit)
``sigterm``    SIGTERM every broker (each must exit 0 in time), start them again
``make-down``  ``make down`` then ``make up`` of the devcluster
=============  ==================================================================

Timings and counts are :class:`Params`; :meth:`Params.from_env` reads
``CHAOS_LONG`` (the ``make chaos`` durations) and ``CHAOS_KILLS`` (SIGKILLs in
all, split between the spaced and rapid scenarios).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import pathlib
import random
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import grpc

from chaos.checker import fragment_end, read_back, verify, wait_writable
from chaos.clusters import DevCluster, Exit, ProcessCluster
from chaos.report import Report
from chaos.workload import Channels, Endpoints, Workload, WorkloadConfig
from gazette.broker import protocol as pb
from gazette.broker import testing

__all__ = [
    "HarnessError",
    "Params",
    "SpoolUnavailable",
    "aborts",
    "etcd_outage",
    "make_down_up",
    "sigkill",
    "sigstop",
    "sigterm_all",
    "spool_full",
    "store_outage",
]


class HarnessError(RuntimeError):
    """The suite itself could not do what a scenario needs (not a broker verdict)."""


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
    #: Appends abandoned half-way.
    aborts: int = 10
    #: SIGTERM-everything rounds; each broker must exit 0 within ``term_timeout_s``.
    term_rounds: int = 1
    term_timeout_s: float = 45.0
    #: ``make down`` / ``make up`` rounds.
    down_up_rounds: int = 1
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
                aborts=60,
                term_rounds=3,
                down_up_rounds=3,
                warmup_s=3.0,
                settle_s=5.0,
                spacing_s=3.0,
            )
        kills = env.get("CHAOS_KILLS")
        if kills:
            spaced = int(kills) * 2 // 5
            params = dataclasses.replace(
                params, spaced_kills=spaced, rapid_kills=int(kills) - spaced
            )
        return params

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


async def _apply_journals(channels: Channels, endpoints: Endpoints, params: Params) -> None:
    specs = [
        testing.journal_spec(j, replication=3, stores=["file:///"], length=256 << 10)
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
    scenario: str, params: Params, cluster: _Cluster, channels: Channels, inject: Inject
) -> Report:
    started = time.monotonic()
    await _apply_journals(channels, cluster.endpoints, params)
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
    return Report(
        scenario=scenario,
        faults=len(workload.faults),
        verdict=verify(workload.acks, reads, workload.aborted),
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
    )


async def _on_process_cluster(
    scenario: str,
    params: Params,
    work_dir: pathlib.Path,
    inject: Callable[[Run, ProcessCluster], Awaitable[None]],
    *,
    lease_s: float | None = None,
    prepare: Callable[[ProcessCluster], Callable[[], None]] | None = None,
) -> Report:
    """Run ``inject`` on a fresh etcd + 3 brokers; ``prepare`` (before the brokers
    start) returns its own undo, run after everything stopped."""
    cluster = ProcessCluster(work_dir, lease_s=lease_s or params.lease_s)
    undo: Callable[[], None] | None = None
    channels = Channels()
    try:
        await asyncio.to_thread(cluster.prepare)
        if prepare is not None:
            undo = prepare(cluster)
        await asyncio.to_thread(cluster.start)
        return await _drive(scenario, params, cluster, channels, lambda run: inject(run, cluster))
    finally:
        await channels.close()
        await asyncio.to_thread(cluster.close)
        if undo is not None:
            undo()


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


async def _primary(run: Run, cluster: ProcessCluster, journal: str) -> int:
    for address in run.endpoints():
        with contextlib.suppress(grpc.aio.AioRpcError):
            _, meta = await testing.read(run.channels.stub(address), journal, -1, deadline=5)
            route = meta[0].header.route if meta else None
            if route is not None and route.primary >= 0 and route.members:
                return cluster.brokers.index_of(route.members[route.primary])
    raise HarnessError(f"no broker names the primary of {journal}")


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


async def store_outage(params: Params, work_dir: pathlib.Path) -> Report:
    """Move the ``file://`` root away and put a plain file in its place, then restore it."""

    async def inject(run: Run, cluster: ProcessCluster) -> None:
        root = cluster.brokers.file_root
        away = root.with_name(root.name + ".away")
        for k in range(params.store_rounds):
            root.rename(away)
            root.write_text("the chaos suite's store outage\n")
            run.fault(f"store-down{k + 1}")
            try:
                await asyncio.sleep(params.store_outage_s)
            finally:
                root.unlink()
                away.rename(root)
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

    return await _on_process_cluster("spool-full", params, work_dir, inject, prepare=prepare)


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
        "make-down-up",
    )
