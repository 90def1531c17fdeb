"""Member announcement under an etcd lease, and the member session.

A member exists for its peers as long as its key does: the key is written
under a lease the member keeps alive, so a crashed member's key, and every
assignment of it (assignments are written under the assigned member's
lease), vanish together when the lease expires.

:func:`announce` creates the key only if it doesn't exist, retrying until a
previous incarnation's key has expired. :class:`Session` ties it together:
lease, announcement, KeySpace load and watch, the allocate loop, and graceful
exit (mark the member exiting, wait until it holds no assignments, revoke the
lease). The lease is kept alive from its grant on, through an announcement
that may wait out a previous incarnation's key for longer than the TTL. If
the lease or the member key is lost while not exiting, the session announces
again under a new lease (Gazette instead aborts the process).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aetcd
import grpc

from gazette.allocator import errors, metrics, txn
from gazette.allocator.allocator import ObservedState, RoundHook, allocate
from gazette.allocator.state import IsConsistentFn, always_consistent
from gazette.keyspace import KeySpace
from gazette.keyspace import errors as ks_errors
from gazette.keyspace import etcd as ks_etcd

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

#: How long :meth:`Session.resign` waits on etcd to revoke the lease.
RESIGN_TIMEOUT = 2.0
_rpc: Any = aetcd.rpc


@dataclasses.dataclass(frozen=True)
class SessionConfig:
    lease_ttl: int = 20
    """Seconds of the member lease (``--etcd.lease``)."""
    announce_retry: float = 10.0
    """Seconds between announce attempts while an older key of ours still exists."""
    reannounce: bool = True
    """Announce again under a new lease if the lease or member key is lost."""
    reannounce_backoff: float = 1.0
    watch_keyspace: bool = True
    """Run the KeySpace watch within the session (off if the caller runs it)."""
    txn_config: txn.TxnConfig = dataclasses.field(default_factory=txn.TxnConfig)
    """How the leader batches its writes (etcd's ``--max-txn-ops``, transactions in flight)."""


@dataclasses.dataclass
class Announcement:
    """An announced key: its revision is the last one we wrote it at."""

    client: aetcd.Client
    key: str
    revision: int

    async def update(self, value: bytes) -> None:
        """Rewrite the value, keeping the lease; fails if anyone else changed the key."""
        resp = await txn.commit(
            self.client,
            [txn.mod_revision_is(self.key, self.revision)],
            [txn.put(self.key, value, ignore_lease=True)],
        )
        if not resp.succeeded:
            raise errors.TxnFailed(
                f"key {self.key} modified or deleted externally (expected revision {self.revision})"
            )
        self.revision = int(resp.header.revision)


async def announce(
    client: aetcd.Client,
    key: str,
    value: bytes,
    lease_id: int,
    *,
    retry_interval: float = 10.0,
    sleep: Sleep = asyncio.sleep,
    watch: bool = True,
) -> Announcement:
    """Create ``key`` under ``lease_id``, waiting out an existing key of another lease.

    A previous incarnation's key (this member restarted after SIGKILL) goes when
    its lease expires. With ``watch``, the next attempt follows etcd's report of
    that deletion at once, else every ``retry_interval`` (Gazette's
    ``allocator/announce.go`` polls every 10 s): until the member is back, a
    journal whose replication equals the number of brokers takes no appends.
    """
    while True:
        existing = 0  # The revision at which another lease's key was seen.
        try:
            resp = await txn.commit(
                client,
                [txn.version_is(key, 0)],
                [txn.put(key, value, lease=lease_id)],
                [txn.get(key)],
            )
        except errors.EtcdError as e:
            log.warning("failed to announce %s (will retry): %s", key, e)
        else:
            if resp.succeeded:
                return Announcement(client, key, int(resp.header.revision))
            kvs = resp.responses[0].response_range.kvs
            if kvs and kvs[0].lease == lease_id:
                # Our own write of an earlier attempt, whose response was lost.
                return Announcement(client, key, int(kvs[0].mod_revision))
            log.warning("failed to announce %s (will retry): key exists with another lease", key)
            existing = int(resp.header.revision)
        if watch and existing:
            await wait_deleted(client, key, existing, retry_interval)
        else:
            await sleep(retry_interval)


async def wait_deleted(client: aetcd.Client, key: str, revision: int, within: float) -> bool:
    """Wait until etcd reports ``key`` deleted after ``revision``: True, or False after ``within`` s.

    A watch that fails or ends early leaves the rest of the time to be slept out
    (the caller then polls).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    try:
        stub = await ks_etcd.watch_stub(client)
    except ks_errors.EtcdError:
        await asyncio.sleep(within)
        return False
    call = stub.Watch(metadata=ks_etcd.metadata(client))
    try:
        async with asyncio.timeout_at(deadline):
            await call.write(
                _rpc.WatchRequest(
                    create_request=_rpc.WatchCreateRequest(
                        key=key.encode(),
                        start_revision=revision + 1,
                        filters=[_rpc.WatchCreateRequest.NOPUT],
                    )
                )
            )
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF or resp.canceled:
                    break
                if resp.events:
                    return True
    except TimeoutError:
        return False
    except grpc.aio.AioRpcError as e:
        log.warning("watching %s for its deletion failed (polling instead): %s", key, e)
    finally:
        call.cancel()
    await asyncio.sleep(max(0.0, deadline - loop.time()))
    return False


async def grant_lease_retrying(
    client: aetcd.Client, ttl: int, *, backoff: float = 1.0, sleep: Sleep = asyncio.sleep
) -> int:
    """Grant a lease, retrying while etcd is unreachable (with back-off up to 10 s)."""
    delay = backoff
    while True:
        try:
            return await grant_lease(client, ttl)
        except errors.EtcdError as e:
            log.warning("%s (will retry in %.1fs)", e, delay)
        await sleep(delay)
        delay = min(delay * 2, 10.0)


async def grant_lease(client: aetcd.Client, ttl: int) -> int:
    try:
        lease = await client.lease(ttl)
    except aetcd.exceptions.ClientError as e:
        raise errors.EtcdError(f"granting lease: {e}") from e
    return int(lease.id)


async def revoke_lease(client: aetcd.Client, lease_id: int) -> None:
    try:
        await client.revoke_lease(lease_id)
    except aetcd.exceptions.ClientError as e:
        raise errors.EtcdError(f"revoking lease {lease_id:x}: {e}") from e


async def keep_alive(
    client: aetcd.Client,
    lease_id: int,
    ttl: int,
    *,
    sleep: Sleep = asyncio.sleep,
    health: LeaseHealth | None = None,
) -> None:
    """Refresh the lease every ttl/3 until cancelled; raise LeaseLost once etcd says it's gone.

    A failed refresh is retried. ``health`` (if given) tracks until when the lease
    is surely still valid, counted from the *sending* of the last successful
    refresh, so that this broker stops serving as a member no later than etcd
    could expire the lease. Past that point the broker is in doubt, not lost:
    etcd may still hold the lease (an etcd restart extends every lease), and a
    later successful refresh ends the doubt. Only etcd's own answer that the
    lease is gone raises :class:`~gazette.allocator.errors.LeaseLost`.
    """
    interval = max(ttl / 3.0, 0.1)
    loop = asyncio.get_running_loop()
    health = health or LeaseHealth()
    while True:
        sent = loop.time()
        try:
            # Bounded: over a connection into a network partition a refresh neither
            # fails nor answers, and the doubt (which stores what we hold) would come
            # only when the connection gives up, long after the lease.
            async with asyncio.timeout(max(interval, 1.0)):
                await ks_etcd.kv_stub(client)  # connects if needed
                reply = await client.refresh_lease(lease_id)
        except TimeoutError:
            health.failed(loop.time(), f"lease {lease_id:x} keep-alive got no answer in time")
        except (aetcd.exceptions.ClientError, ks_errors.EtcdError, grpc.aio.AioRpcError) as e:
            health.failed(loop.time(), f"lease {lease_id:x} keep-alive failed: {e}")
        else:
            if reply is None or reply.TTL <= 0:
                raise errors.LeaseLost(lease_id)
            health.refreshed(sent + reply.TTL)
        await sleep(interval)


class LeaseHealth:
    """Whether a member's lease is surely valid, as its keep-alives tell.

    ``on_doubt`` is called when a keep-alive first fails (the broker then stores
    what it holds); ``valid_until`` is the monotonic time until which etcd cannot
    have expired the lease.
    """

    def __init__(self, on_doubt: Callable[[], None] | None = None) -> None:
        self.valid_until = float("inf")
        self.on_doubt = on_doubt
        self._failing = False
        # Given up (see Session.resign): no refresh of the old lease counts any more.
        self._given_up = False

    def valid(self, now: float) -> bool:
        return now < self.valid_until

    def granted(self, valid_until: float) -> None:
        """A new lease, valid until ``valid_until``."""
        self._given_up = False
        if self._failing:
            metrics.lease_in_doubt.set(0)
        self._failing = False
        self.valid_until = valid_until

    def give_up(self) -> None:
        """Stop counting on the current lease at once (a refresh under way won't revive it)."""
        self._given_up = True
        self.valid_until = float("-inf")

    def failed(self, now: float, why: str) -> None:
        left = self.valid_until - now
        if left > 0:
            log.warning("%s (will retry; lease surely valid for %.1fs more)", why, left)
        else:
            log.warning("%s (will retry; lease may have expired: not serving as a member)", why)
        if not self._failing:
            self._failing = True
            metrics.lease_doubts.inc()
            metrics.lease_in_doubt.set(1)
            if self.on_doubt is not None:
                self.on_doubt()

    def refreshed(self, valid_until: float) -> None:
        if self._given_up:
            return
        if self._failing:
            log.warning("lease keep-alive succeeded again")
            metrics.lease_in_doubt.set(0)
        self._failing = False
        self.valid_until = valid_until


class Session:
    """One member's life in an allocator keyspace.

    ``spec`` is the member value to announce; ``exiting_spec`` the same value
    marked exiting (``exiting: true``), written by :meth:`request_exit`. Run
    :meth:`run` in a task; it returns once the member exited cleanly.
    """

    def __init__(
        self,
        client: aetcd.Client,
        ks: KeySpace,
        member_key: str,
        spec: bytes,
        exiting_spec: bytes,
        *,
        config: SessionConfig | None = None,
        is_consistent: IsConsistentFn = always_consistent,
        on_round: RoundHook | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.client = client
        self.ks = ks
        self.member_key = member_key
        self.spec = spec
        self.exiting_spec = exiting_spec
        self.config = config or SessionConfig()
        self.is_consistent = is_consistent
        self.on_round = on_round
        self._sleep = sleep
        self._exit = asyncio.Event()
        self.announcement: Announcement | None = None
        self.lease_id = 0
        self.observed: ObservedState | None = None
        self.lease = LeaseHealth()
        """Until when our lease is surely valid; set ``lease.on_doubt`` to be told of doubt."""
        self.ready = asyncio.Event()
        """Set once announced and the KeySpace is loaded."""

    def request_exit(self) -> None:
        """The SIGTERM path: mark the member exiting; :meth:`run` returns once drained."""
        self._exit.set()

    async def update_spec(self, spec: bytes) -> None:
        """Announce ``spec`` from now on: rewrite the member key now if we're announced,
        and announce it next time otherwise (a failed rewrite is logged, and the key
        keeps its old value until the next announcement)."""
        self.spec = spec
        ann = self.announcement
        if ann is None or self._exit.is_set() or not self.ready.is_set():
            return
        try:
            await ann.update(spec)
        except errors.EtcdError as e:  # TxnFailed too: our key went with its lease.
            log.warning("member %s: could not update its spec: %s", self.member_key, e)

    async def resign(self, spec: bytes | None = None) -> None:
        """Give up our lease now, and with it the member key and every assignment
        under it, as a lease expiry would (but at once); then announce again, with
        ``spec`` if given (else :attr:`spec` as it is then).

        We stop counting on the lease before asking etcd to revoke it: from this
        call on, :attr:`lease` is invalid. If etcd can't be reached within
        :data:`RESIGN_TIMEOUT` s the lease expires by itself.
        """
        if spec is not None:
            self.spec = spec
        self.lease.give_up()
        lease = self.lease_id
        if not lease or self._exit.is_set():
            return
        try:
            async with asyncio.timeout(RESIGN_TIMEOUT):
                await revoke_lease(self.client, lease)
        except (TimeoutError, errors.EtcdError) as e:
            log.warning(
                "member %s: revoking lease %x: %s (it will expire)", self.member_key, lease, e
            )

    async def run(self) -> None:
        while True:
            gone: BaseException | None = None
            try:
                await self._run_once()
                return
            except* (errors.LeaseLost, errors.MemberKeyMissing, errors.EtcdError) as eg:
                # Raised from within the session's task group, so they arrive
                # wrapped in an exception group (with anything else that failed
                # alongside, which this block leaves to propagate).
                if not self.config.reannounce and not self._exit.is_set():
                    raise
                gone = eg.exceptions[0]
            if self._exit.is_set():
                # Exiting, and our key or lease is gone: so are our assignments.
                log.warning("member %s gone while exiting: %s", self.member_key, gone)
                return
            log.warning("member %s lost (%s): announcing again", self.member_key, gone)
            self.ready.clear()
            await self._sleep(self.config.reannounce_backoff)

    async def _run_once(self) -> None:
        cfg = self.config
        granted_at = asyncio.get_running_loop().time()
        self.lease_id = await grant_lease_retrying(
            self.client, cfg.lease_ttl, backoff=cfg.reannounce_backoff, sleep=self._sleep
        )
        self.lease.granted(granted_at + cfg.lease_ttl)
        try:
            async with asyncio.TaskGroup() as tg:
                # Kept alive from its grant on: announcing may wait out a
                # previous incarnation's key for longer than our own TTL (a
                # broker restarted after SIGKILL; test_session.py).
                keeper = tg.create_task(
                    keep_alive(
                        self.client,
                        self.lease_id,
                        cfg.lease_ttl,
                        sleep=self._sleep,
                        health=self.lease,
                    ),
                    name="lease keep-alive",
                )
                self.announcement = await announce(
                    self.client,
                    self.member_key,
                    self.exiting_spec if self._exit.is_set() else self.spec,
                    self.lease_id,
                    retry_interval=cfg.announce_retry,
                    sleep=self._sleep,
                )
                if self.observed is None:
                    await self.ks.load(self.client, self.announcement.revision)
                    self.observed = ObservedState(self.ks, self.member_key, self.is_consistent)
                # A watch of our own resumes where the last session's left off;
                # it must run before waiting for the announcement to be seen.
                watcher = (
                    tg.create_task(self.ks.watch(self.client), name="keyspace watch")
                    if cfg.watch_keyspace
                    else None
                )
                await self.ks.wait_for_revision(self.announcement.revision)
                self.ready.set()
                alloc = tg.create_task(
                    allocate(
                        self.client,
                        self.observed,
                        on_round=self.on_round,
                        txn_config=cfg.txn_config,
                    ),
                    name="allocate",
                )
                exiter = tg.create_task(self._mark_exiting(), name="mark exiting")
                await alloc
                for task in (keeper, exiter, watcher):
                    if task is not None:
                        task.cancel()
        finally:
            # Revoking deletes our member key and any assignments left under it.
            lease, self.lease_id = self.lease_id, 0
            with _suppress_etcd():
                await revoke_lease(self.client, lease)

    async def _mark_exiting(self) -> None:
        await self._exit.wait()
        assert self.announcement is not None
        log.info("member %s exiting: draining assignments", self.member_key)
        while True:
            try:
                await self.announcement.update(self.exiting_spec)
                return
            except errors.EtcdError as e:
                # etcd is away: keep trying (the caller bounds how long it waits).
                log.warning("marking member %s exiting: %s (will retry)", self.member_key, e)
                await self._sleep(self.config.reannounce_backoff)


class _suppress_etcd:
    """Best-effort clean-up: an unreachable etcd expires the lease by itself."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: Any, e: BaseException | None, tb: Any) -> bool:
        if isinstance(e, errors.EtcdError):
            log.warning("revoking member lease: %s (it will expire)", e)
            return True
        return False
