"""A local development cluster of real processes, behind ``make up`` / ``make down``.

``up`` starts each component of :data:`COMPONENTS` in order as a detached
background process (it outlives the command), with its data and log under the
data directory (``.local/`` by default), and records what it started in
``<data>/devcluster.json``. ``down`` stops exactly the processes recorded there
(and only if they are still the processes that were started), then forgets
them; both are idempotent.

Today the cluster is one etcd on Gazette's default address,
``http://localhost:2379`` (another free port when that one is taken). Brokers
and consumers join as further entries of :data:`COMPONENTS`.

Usage::

    python -m gazette.gazctl.devcluster up --data .local
    python -m gazette.gazctl.devcluster status --data .local
    python -m gazette.gazctl.devcluster down --data .local
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import time
from collections.abc import Callable

from gazette.keyspace import testing

__all__ = [
    "COMPONENTS",
    "Component",
    "Options",
    "Process",
    "down",
    "is_running",
    "read_state",
    "up",
]

STATE_FILE = "devcluster.json"
DEFAULT_ETCD_PORT = 2379
DEFAULT_ETCD_PEER_PORT = 2380

Say = Callable[[str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """What ``up`` was asked for. ``etcd_port`` 0 means any free port."""

    data: pathlib.Path
    etcd_port: int = DEFAULT_ETCD_PORT


@dataclasses.dataclass(frozen=True, slots=True)
class Process:
    """A process ``up`` started: enough to find it, show it and stop only it."""

    name: str
    pid: int
    argv: list[str]
    endpoint: str
    log: str


@dataclasses.dataclass(frozen=True, slots=True)
class Component:
    """A named part of the cluster and how to start it.

    ``start(options, started, say)`` returns once the process serves; ``started``
    holds the processes started before it (a broker finds etcd's endpoint there).
    """

    name: str
    start: Callable[[Options, list[Process], Say], Process]


def _start_etcd(options: Options, started: list[Process], say: Say) -> Process:
    port = options.etcd_port
    if port and not testing.port_is_free(port):
        say(
            f"port {port} is already in use (another etcd?): starting etcd on a free port "
            "instead; point clients at the endpoint below (--etcd.address)"
        )
        port = 0
    peer = DEFAULT_ETCD_PEER_PORT if port == DEFAULT_ETCD_PORT else 0
    if peer and not testing.port_is_free(peer):
        peer = 0
    server = testing.EtcdServer(
        work_dir=options.data / "etcd",
        client_port=port,
        peer_port=peer,
        name="devcluster",
        detach=True,
        fsync=True,
    )
    server.start()
    argv = server.argv()
    return Process("etcd", server.release(), argv, server.endpoint, str(server.log_path))


#: The cluster, in start order (``down`` stops in reverse order).
COMPONENTS: list[Component] = [Component("etcd", _start_etcd)]


# --- State ---------------------------------------------------------------------


def _state_path(data: pathlib.Path) -> pathlib.Path:
    return data / STATE_FILE


def read_state(data: pathlib.Path) -> list[Process]:
    """The processes recorded by ``up`` (empty when none)."""
    try:
        raw = json.loads(_state_path(data).read_text())
    except FileNotFoundError:
        return []
    return [Process(**p) for p in raw["processes"]]


def _write_state(data: pathlib.Path, processes: list[Process]) -> None:
    path = _state_path(data)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"processes": [dataclasses.asdict(p) for p in processes]}, indent=2))
    tmp.replace(path)


def is_running(process: Process) -> bool:
    """Whether ``process.pid`` is alive and still runs ``process.argv`` (pids get reused)."""
    proc = pathlib.Path(f"/proc/{process.pid}")
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes()
    except OSError:  # Gone (or never ours to read).
        return False
    # A zombie has exited; it just awaits reaping by its new parent.
    if stat.rpartition(")")[2].split()[0] == "Z":
        return False
    return cmdline.split(b"\0")[:-1] == [a.encode() for a in process.argv]


# --- Commands ------------------------------------------------------------------


def up(options: Options, say: Say = print) -> list[Process]:
    """Start the cluster (or report the one already running); returns its processes."""
    options.data.mkdir(parents=True, exist_ok=True)
    recorded = read_state(options.data)
    running = [p for p in recorded if is_running(p)]
    if running:
        say(f"already up (data in {options.data}):")
        _describe(running, say)
        say("stop it with: make down")
        return running

    started: list[Process] = []
    try:
        for component in COMPONENTS:
            process = component.start(options, started, say)
            started.append(process)
            # Record each process as soon as it runs, so `down` finds it even
            # if a later component fails to start.
            _write_state(options.data, started)
    except BaseException:
        _stop_all(started, say)
        _state_path(options.data).unlink(missing_ok=True)
        raise

    say(f"up (data in {options.data}):")
    _describe(started, say)
    say("stop it with: make down")
    return started


def down(data: pathlib.Path, say: Say = print, timeout: float = 10.0) -> list[Process]:
    """Stop what ``up`` recorded under ``data``, and nothing else; returns what was stopped."""
    recorded = read_state(data)
    if not recorded:
        say(f"nothing to stop (no {STATE_FILE} in {data})")
        return []
    stopped = _stop_all(recorded, say, timeout)
    _state_path(data).unlink(missing_ok=True)
    return stopped


def _stop_all(processes: list[Process], say: Say, timeout: float = 10.0) -> list[Process]:
    stopped = []
    for process in reversed(processes):
        if not is_running(process):
            say(f"{process.name} (pid {process.pid}) is not running")
            continue
        _stop(process, timeout)
        say(f"stopped {process.name} (pid {process.pid})")
        stopped.append(process)
    return stopped


def _stop(process: Process, timeout: float) -> None:
    try:
        os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while is_running(process):
            if time.monotonic() > deadline:
                os.kill(process.pid, signal.SIGKILL)
                deadline = time.monotonic() + timeout
            time.sleep(0.05)
    except ProcessLookupError:
        return


def _describe(processes: list[Process], say: Say) -> None:
    width = max(len(p.name) for p in processes)
    for p in processes:
        say(f"  {p.name:<{width}}  pid {p.pid:<7}  {p.endpoint}  log {p.log}")
