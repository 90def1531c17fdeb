"""The clusters faults are injected into, each watched for brokers that exit on their own.

* :class:`ProcessCluster` — a fresh etcd (:class:`gazette.keyspace.testing.EtcdServer`)
  and a :class:`gazette.broker.testing.BrokerCluster` of 3 brokers in 3 zones
  under a scenario's work directory. Its :meth:`~ProcessCluster.monitor` notices
  a broker process that is gone although the suite never signalled it, records
  it (with its log tail) and starts it again, so the scenario carries on.
* :class:`DevCluster` — what ``make up`` starts (``make down`` / ``make up``
  run through the Makefile, on free ports, under a private data directory).

:class:`chaos.netcluster.NetCluster` is a :class:`ProcessCluster` in network
namespaces. :class:`HarnessError` is what the suite raises when it, not the
broker, failed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import re
import subprocess
import time
from collections.abc import Callable, Sequence

import devcluster
from gazette.broker import testing
from gazette.keyspace import testing as ks_testing

__all__ = ["DevCluster", "Exit", "HarnessError", "ProcessCluster"]

REPO = pathlib.Path(__file__).resolve().parents[2]
#: Runs the brokers of :class:`ProcessCluster` from this source tree (a ``broker/src``).
BROKER_SRC_ENV = "CHAOS_BROKER_SRC"


class HarnessError(RuntimeError):
    """The suite itself could not do what a scenario needs (not a broker verdict)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Exit:
    """A broker that exited without being told to."""

    broker: str
    returncode: int | None
    at: float
    log_tail: str

    def __str__(self) -> str:
        last = self.log_tail.strip().splitlines()[-1:] or ["(empty log)"]
        return f"{self.broker} exited with {self.returncode}: {last[0][:200]}"


class ProcessCluster:
    """etcd + 3 brokers in 3 zones; see the module docstring."""

    def __init__(
        self,
        work_dir: pathlib.Path,
        *,
        lease_s: float,
        brokers: int = 3,
        zones: Sequence[str] = ("zone-a", "zone-b", "zone-c"),
        extra_args: Sequence[str] = (),
    ) -> None:
        self.work_dir = work_dir
        self.etcd = ks_testing.EtcdServer(work_dir=work_dir / "etcd")
        self.lease_s = lease_s
        self._brokers = brokers
        self._zones = zones
        self._extra_args = tuple(extra_args)
        self._cluster: testing.BrokerCluster | None = None
        self.exits: list[Exit] = []

    @property
    def brokers(self) -> testing.BrokerCluster:
        if self._cluster is None:
            raise RuntimeError("the cluster was not started")
        return self._cluster

    def prepare(self) -> testing.BrokerCluster:
        """Start etcd and lay out the brokers (not started yet: mount spools now)."""
        self.etcd.start()
        self._cluster = testing.BrokerCluster(
            self.etcd.endpoint,
            env=self._env(),
            work_dir=self.work_dir,
            brokers=self._brokers,
            zones=self._zones,
            lease=f"{self.lease_s:g}s",
            extra_args=self._extra_args,
        )
        return self._cluster

    def _env(self) -> dict[str, str] | None:
        # Checking the suite itself: brokers from another source tree (an older
        # commit, say) must fail where that broker is broken.
        other = os.environ.get(BROKER_SRC_ENV)
        return {"PYTHONPATH": other} if other else None

    def start(self) -> None:
        self.brokers.start()

    def endpoints(self) -> list[str]:
        return [b.address for b in self.brokers.brokers]

    def restart(self, i: int) -> None:
        """Start broker ``i`` again unless it already runs (the monitor may have beaten us)."""
        if not self.brokers[i].alive:
            self.brokers.restart(i)

    async def monitor(self, stop: asyncio.Event, poll_s: float = 0.25) -> None:
        while not stop.is_set():
            for i, b in enumerate(self.brokers.brokers):
                if not b.exited_on_its_own:
                    continue
                self.exits.append(Exit(b.suffix, b.returncode, time.monotonic(), b.log_tail(15)))
                try:
                    await asyncio.to_thread(self.brokers.restart, i)
                except (RuntimeError, TimeoutError) as e:
                    # It will be seen (and counted) again at the next poll.
                    self.exits.append(Exit(b.suffix, b.returncode, time.monotonic(), str(e)))
            await asyncio.sleep(poll_s)

    def close(self) -> None:
        if self._cluster is not None:
            for b in self._cluster.brokers:
                b.resume()
            self._cluster.kill_all()
        self.etcd.stop()


@dataclasses.dataclass
class MakeResult:
    target: str
    returncode: int
    output: str
    seconds: float

    @property
    def killed(self) -> list[str]:
        """Processes ``make down`` says it had to SIGKILL."""
        return re.findall(r"^KILLED (\S+)", self.output, re.MULTILINE)


def _tail(log: pathlib.Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


class DevCluster:
    """The ``make up`` cluster under ``data``, on free ports."""

    UP_ARGS = "--etcd-port 0 --broker-port 0 --no-journals"

    def __init__(self, data: pathlib.Path, say: Callable[[str], None] = print) -> None:
        self.data = data
        self.say = say
        self.exits: list[Exit] = []
        #: While set, brokers are expected to be down (between down and up).
        self.expect_down = False
        self._addresses: list[str] = []
        self._seen_exit: set[int] = set()

    def make(self, target: str, timeout: float = 300.0) -> MakeResult:
        started = time.monotonic()
        out = subprocess.run(
            [
                "make",
                "--no-print-directory",
                target,
                f"DATA={self.data}",
                f"UP_ARGS={self.UP_ARGS}",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        result = MakeResult(
            target, out.returncode, out.stdout + out.stderr, time.monotonic() - started
        )
        if target == "up":
            self._addresses = [
                p.endpoint.removeprefix("http://") for p in self.brokers() if p.name != "etcd"
            ]
        return result

    def brokers(self) -> list[devcluster.Process]:
        return [p for p in devcluster.read_state(self.data) if p.name != "etcd"]

    def endpoints(self) -> list[str]:
        return self._addresses

    async def monitor(self, stop: asyncio.Event, poll_s: float = 0.5) -> None:
        while not stop.is_set():
            if not self.expect_down:
                for p in self.brokers():
                    if p.pid not in self._seen_exit and not devcluster.is_running(p):
                        self._seen_exit.add(p.pid)
                        tail = await asyncio.to_thread(_tail, pathlib.Path(p.log))
                        self.exits.append(Exit(p.name, None, time.monotonic(), tail))
            await asyncio.sleep(poll_s)

    def close(self) -> None:
        subprocess.run(
            ["make", "--no-print-directory", "down", f"DATA={self.data}"],
            cwd=REPO,
            capture_output=True,
            timeout=300,
        )
