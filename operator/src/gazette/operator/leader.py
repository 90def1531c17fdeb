"""Leader election over a ``coordination.k8s.io/v1`` Lease: one replica writes, the others wait.

Several replicas of the operator may run (a Deployment of two, a rollout's surge);
only the holder of the Lease ``<namespace>/<name>`` serves. The others stand by,
ready, and take over when the holder stops renewing it. The algorithm is
client-go's ``leaderelection`` (what kube-controller-manager and controller-runtime
run), so ``kubectl get lease`` reads as it does for them:

* The Lease's ``spec.holderIdentity`` names the leader; it renews ``spec.renewTime``
  every ``retry_period``. Writes are replaces carrying the ``resourceVersion`` read,
  so of two replicas racing for it exactly one wins.
* A standby takes the Lease when its holder is empty, or when the record has not
  changed for ``lease_duration`` *as the standby observed it* (its own monotonic
  clock: the replicas' wall clocks need not agree).
* A leader that has not renewed for ``renew_deadline`` (shorter than
  ``lease_duration``) stops (:class:`LeadershipLost`) before any standby may take
  over: the process stops writing to etcd and to the API server, and exits, to be
  restarted as a standby. So two replicas never write at once, as long as stopping
  takes less than ``lease_duration - renew_deadline``.
* A leader that stops on purpose releases the Lease (empty holder), after its
  writers stopped, so the next one takes over at once instead of after
  ``lease_duration``.

Usage::

    elector = leader.Elector(leader.LeaderConfig(name="gazette-operator-default",
                                                 namespace="gazette"), kube_client)
    if await elector.acquire(stop):         # standby until it holds the Lease
        async with asyncio.TaskGroup() as tg:
            tg.create_task(elector.hold())  # raises LeadershipLost
            ...                             # serve
        await elector.release()
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from gazette.operator import errors, kube, metrics

__all__ = ["Elector", "LeaderConfig", "LeadershipLost", "default_identity", "default_namespace"]

logger = logging.getLogger(__name__)

_SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class LeadershipLost(errors.OperatorError):
    """This replica could not renew its Lease in time, or another replica took it."""


def default_identity() -> str:
    """``<hostname>_<random>``, as client-go's: the pod name, told apart across restarts."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:12]}"


def default_namespace(
    watched: tuple[str, ...] = (), environ: Mapping[str, str] | None = None
) -> str:
    """Where the Lease goes when not told: ``$POD_NAMESPACE``, else the service account's
    namespace, else the first watched namespace that is no pattern, else ``default``."""
    env = os.environ if environ is None else environ
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    try:
        with open(_SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
            namespace = f.read().strip()
    except OSError:
        namespace = ""
    if namespace:
        return namespace
    for ns in watched:
        if ns and not any(c in ns for c in "*?[!"):
            return ns
    return "default"


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderConfig:
    """The Lease and its timing (client-go's defaults, in seconds).

    ``enabled`` False serves at once, without a Lease (one replica only).
    ``renew_deadline`` must be shorter than ``lease_duration``, ``retry_period``
    shorter than ``renew_deadline``.
    """

    enabled: bool = True
    name: str = "gazette-operator"
    namespace: str = "default"
    identity: str = dataclasses.field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election wants 0 < retry period < renew deadline < lease duration "
                f"(got {self.retry_period}, {self.renew_deadline}, {self.lease_duration})"
            )


def _micro_time(now: datetime.datetime) -> str:
    # metav1.MicroTime: RFC 3339 with microseconds, UTC.
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Elector:
    """Campaigns for, holds and releases one Lease; see the module's docstring.

    ``clock`` (monotonic seconds, by which a standby times the holder out) and ``wall``
    (the times written into the Lease) are injected, so tests drive time.
    """

    def __init__(
        self,
        config: LeaderConfig,
        api: kube.LeaseAPI,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = _now,
    ) -> None:
        self.config = config
        self._api = api
        self._clock = clock
        self._wall = wall
        self._observed: dict[str, Any] | None = None  # The Lease as last seen...
        self._observed_at = 0.0  # ...and when it was last seen to change.
        self._lease: dict[str, Any] | None = None  # The Lease as last read or written.
        self._renewed = 0.0
        self.is_leader = False
        self.holder = ""
        """The holder last seen ("" when none)."""

    # --- One attempt ------------------------------------------------------------

    def _spec(self, acquiring: bool) -> dict[str, Any]:
        old = (self._lease or {}).get("spec") or {}
        now = _micro_time(self._wall())
        transitions = int(old.get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "acquireTime": now if acquiring else old.get("acquireTime", now),
            "renewTime": now,
            "leaseTransitions": transitions + 1 if acquiring and old else transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round of client-go's ``tryAcquireOrRenew``: True when this replica holds the
        Lease afterwards. Raises KubeAPIError when the API server fails."""
        name, namespace = self.config.name, self.config.namespace
        lease = await self._api.get_lease(namespace, name)
        now = self._clock()
        if lease is None:
            self._lease = None
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": self._spec(acquiring=True),
            }
            created = await self._api.create_lease(namespace, body)
            return self._took(created, now)
        self._lease = lease
        spec = dict(lease.get("spec") or {})
        # Any write counts as a renewal (client-go compares the record; the resourceVersion
        # also changes when a holder renews within a wall clock's tick).
        seen = {**spec, "resourceVersion": (lease.get("metadata") or {}).get("resourceVersion")}
        if seen != self._observed:
            self._observed = seen
            self._observed_at = now
        holder = str(spec.get("holderIdentity") or "")
        self.holder = holder
        mine = holder == self.config.identity
        duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration)
        if holder and not mine and now < self._observed_at + duration:
            self._lost_if_leader(f"the Lease is held by {holder}")
            return False
        body = copy.deepcopy(lease)
        body["spec"] = self._spec(acquiring=not mine)
        replaced = await self._api.replace_lease(namespace, name, body)
        return self._took(replaced, now)

    def _took(self, lease: dict[str, Any] | None, now: float) -> bool:
        if lease is None:
            # Someone else wrote it between our read and write: they won this round.
            self._lost_if_leader("the Lease changed under this replica's renewal")
            return False
        self._lease = lease
        spec = dict(lease.get("spec") or {})
        seen = {**spec, "resourceVersion": (lease.get("metadata") or {}).get("resourceVersion")}
        self._observed, self._observed_at, self._renewed = seen, now, now
        self.holder = self.config.identity
        if not self.is_leader:
            logger.info(
                "leader: %s holds Lease %s/%s",
                self.config.identity,
                self.config.namespace,
                self.config.name,
            )
            metrics.leader_transitions.inc()
        self.is_leader = True
        metrics.leader.set(1)
        return True

    def _lost_if_leader(self, why: str) -> None:
        if self.is_leader:
            self.is_leader = False
            metrics.leader.set(0)
            raise LeadershipLost(why)

    # --- The life of a replica --------------------------------------------------

    async def acquire(self, stop: asyncio.Event | None = None) -> bool:
        """Stand by until this replica holds the Lease (True), or ``stop`` is set (False)."""
        logged = ""
        while stop is None or not stop.is_set():
            try:
                if await self.try_acquire_or_renew():
                    return True
            except errors.KubeAPIError as e:
                logger.warning("leader election: %s", e)
            if self.holder and self.holder != logged:
                logger.info(
                    "standby: Lease %s/%s is held by %s",
                    self.config.namespace,
                    self.config.name,
                    self.holder,
                )
                logged = self.holder
            await self._wait(stop, self.config.retry_period)
        return False

    @staticmethod
    async def _wait(stop: asyncio.Event | None, delay: float) -> None:
        if stop is None:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await stop.wait()

    async def hold(self) -> None:
        """Renew the Lease every ``retry_period`` until cancelled.

        Raises LeadershipLost once a renewal has not succeeded for ``renew_deadline``,
        or another replica holds the Lease.
        """
        while True:
            await asyncio.sleep(self.config.retry_period)
            try:
                remaining = self._renewed + self.config.renew_deadline - self._clock()
                async with asyncio.timeout(max(remaining, 0.001)):
                    if await self.try_acquire_or_renew():
                        continue
            except (errors.KubeAPIError, TimeoutError) as e:
                logger.warning("renewing the Lease: %s", e or type(e).__name__)
            if self._clock() - self._renewed >= self.config.renew_deadline:
                self.is_leader = False
                metrics.leader.set(0)
                raise LeadershipLost(
                    f"the Lease was not renewed for {self.config.renew_deadline:g}s"
                )

    async def release(self) -> None:
        """Give the Lease up (empty holder), if this replica holds it: the next one takes
        over at once. Call once this replica stopped writing. Best effort."""
        if not self.is_leader or self._lease is None:
            return
        self.is_leader = False
        metrics.leader.set(0)
        body = copy.deepcopy(self._lease)
        spec = dict(body.get("spec") or {})
        now = _micro_time(self._wall())
        body["spec"] = {
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0),
        }
        try:
            async with asyncio.timeout(self.config.renew_deadline):
                done = await self._api.replace_lease(self.config.namespace, self.config.name, body)
        except (errors.KubeAPIError, TimeoutError) as e:
            logger.warning("releasing the Lease: %s", e or type(e).__name__)
            return
        if done is not None:
            logger.info("released Lease %s/%s", self.config.namespace, self.config.name)
