"""KeySpace: a decoded local mirror of an etcd prefix, kept current by a watch."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import posixpath
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aetcd
import aetcd.rpc
import grpc

from gazette.broker.protocol import protocol_pb2
from gazette.keyspace import errors, etcd
from gazette.keyspace import key_values as kvs

log = logging.getLogger(__name__)

__all__ = ["KeySpace", "KeySpaceConfig", "WatchResponse", "backoff"]

Sleep = Callable[[float], Awaitable[None]]
Observer = Callable[[], None]


@dataclasses.dataclass(frozen=True, slots=True)
class KeySpaceConfig:
    """Tunables of a KeySpace.

    ``watch_delay``: seconds watch responses are collected before being applied
    as one batch (``--broker.watch-delay``, default 30ms); larger values amortise
    bursts of changes. ``load_page_size``: keys per range request of ``load``.
    ``backoff``: seconds to wait before the n-th consecutive watch restart (the
    last entry repeats).
    """

    watch_delay: float = 0.030
    load_page_size: int = 1000
    backoff: tuple[float, ...] = (0.0, 0.0, 0.005, 2.0, 3.0, 4.0, 5.0)


def backoff(config: KeySpaceConfig, attempt: int) -> float:
    """Seconds to wait before watch restart number ``attempt`` (0-based)."""
    if not config.backoff:
        return 0.0
    return config.backoff[min(attempt, len(config.backoff) - 1)]


@dataclasses.dataclass(frozen=True, slots=True)
class WatchResponse:
    """The part of an etcd watch response that a KeySpace applies.

    ``events`` are in mod revision order, as etcd sends them.
    """

    header: protocol_pb2.Header.Etcd
    events: Sequence[kvs.Event]


class _Restart(enum.Enum):
    """Why a watch stream ended in a way that calls for a new one."""

    CLOSED = "closed by the server"
    NO_LEADER = "etcd member has no leader"
    UNAVAILABLE = "etcd unavailable"
    REFUSED = "etcd refused the watch (an expired auth token?)"


_CLOSED = object()  # Queue marker: the stream ended without an error.

# How etcd cancels a watch it refused for its token or its permissions. etcd up to
# 3.5 reports an expired token as "permission denied" (it checks the token of the
# stream when a watch is created), so the two can't be told apart: a fresh token
# is tried once before the refusal counts.
_REFUSALS = ("permission denied", "invalid auth token", "user name is empty", "auth store is old")
# INTERNAL too: a member that shuts down cleanly resets its watch streams ("Stream
# removed", seen stopping one member of a 3-member cluster), and another member
# serves the next stream. Go's clientv3 restarts watches on both codes alike.
_RESTART_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


def _clean_root(root: str) -> str:
    clean = posixpath.normpath(root) if root else "."
    # normpath keeps a leading "//"; path.Clean (Gazette's check) does not.
    if clean.startswith("//"):
        clean = "/" + clean.lstrip("/")
    if clean != root:
        raise errors.InvalidRootError(root, clean)
    return root


class KeySpace:
    """A local, decoded mirror of every etcd key under ``root``.

    The mirror is a list of :class:`~gazette.keyspace.KeyValue` sorted by key,
    swapped whole on each update: a reference taken from :attr:`key_values` is a
    consistent snapshot that never changes under the reader.

    :attr:`header` is the etcd header of the last applied response, except that
    its ``revision`` is the greatest mod revision the mirror reflects (not
    etcd's current revision): two mirrors of the same root with equal revisions
    hold equal keys. Callers "read their writes" with
    :meth:`wait_for_revision` after their own transaction.

    Observers run synchronously right after each update, before anyone else can
    see the new state; they must not block or await.
    """

    def __init__(
        self,
        root: str,
        decoder: kvs.Decoder,
        config: KeySpaceConfig | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.root = _clean_root(root)
        self.config = config or KeySpaceConfig()
        self._decode = decoder
        self._sleep = sleep
        self._kvs: list[kvs.KeyValue] = []
        self._changed: frozenset[str] | None = None
        self._header = protocol_pb2.Header.Etcd()
        self._observers: list[Observer] = []
        self._updated = asyncio.Event()

    # --- Reading -------------------------------------------------------------

    @property
    def key_values(self) -> Sequence[kvs.KeyValue]:
        """Every mirrored KeyValue, sorted by key (an immutable snapshot)."""
        return self._kvs

    @property
    def changed_keys(self) -> frozenset[str] | None:
        """Keys put or deleted by the last update; None after a snapshot load (any key).

        Observers that mirror the keyspace elsewhere use it to pass on only what
        changed, instead of walking every key at every update.
        """
        return self._changed

    @property
    def header(self) -> protocol_pb2.Header.Etcd:
        """A copy of the mirror's etcd header (revision = last applied mod revision)."""
        out = protocol_pb2.Header.Etcd()
        out.CopyFrom(self._header)
        return out

    @property
    def revision(self) -> int:
        """The greatest etcd mod revision the mirror reflects."""
        return int(self._header.revision)

    def __len__(self) -> int:
        return len(self._kvs)

    def search(self, key: str) -> kvs.KeyValue | None:
        """The KeyValue of ``key``, or None."""
        ind, found = kvs.search(self._kvs, key)
        return self._kvs[ind] if found else None

    def range(self, start: str, end: str) -> Sequence[kvs.KeyValue]:
        """KeyValues with ``start <= key < end``, in key order."""
        return kvs.range_of(self._kvs, start, end)

    def prefixed(self, prefix: str) -> Sequence[kvs.KeyValue]:
        """KeyValues whose key starts with ``prefix``, in key order."""
        return kvs.prefixed(self._kvs, prefix)

    # --- Observing -----------------------------------------------------------

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer()`` after every update (load or applied batch)."""
        self._observers.append(observer)

    async def wait_for_update(self) -> None:
        """Return at the next update of the mirror."""
        await self._updated.wait()

    # A timeout argument (rather than only asyncio.timeout around the call) because
    # Apply handlers bound this wait by their RPC deadline in one line.
    async def wait_for_revision(self, revision: int, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Return once :attr:`revision` >= ``revision``.

        Raises ``TimeoutError`` after ``timeout`` seconds (None waits for ever).
        """
        if self.revision >= revision:
            return
        async with asyncio.timeout(timeout):
            while self.revision < revision:
                await self._updated.wait()

    def _on_update(self) -> None:
        for observer in self._observers:
            observer()
        # Wake every waiter of this update; later waiters wait for the next one.
        updated, self._updated = self._updated, asyncio.Event()
        updated.set()

    # --- Updating ------------------------------------------------------------

    def load_snapshot(self, header: protocol_pb2.Header.Etcd, raw: Sequence[kvs.KeyValue]) -> None:
        """Replace the mirror by ``raw`` (sorted by key, undecoded) as of ``header``.

        Keys the decoder refuses are logged and left out. ``load`` reads etcd and
        calls this; tests call it directly to set up a mirror.
        """
        out: list[kvs.KeyValue] = []
        for kv in raw:
            if out and out[-1].key >= kv.key:
                raise ValueError(f"snapshot keys out of order ({out[-1].key!r} >= {kv.key!r})")
            decoded = kvs.decode_kv(kv, self._decode)
            if decoded is not None:
                out.append(decoded)
        self._header = protocol_pb2.Header.Etcd()
        self._header.CopyFrom(header)
        self._kvs = out
        self._changed = None
        self._on_update()

    def apply(self, *responses: WatchResponse) -> None:
        """Apply watch responses (in the order etcd sent them) as one update.

        Raises :class:`~gazette.keyspace.errors.InconsistentUpdateError` when a
        response comes from another cluster or goes back in revisions; the
        mirror is then left as it was. Event-level anomalies are logged and
        handled by the rules of :func:`~gazette.keyspace.key_values.merge_events`.
        """
        nxt = protocol_pb2.Header.Etcd()
        nxt.CopyFrom(self._header)
        events: list[kvs.Event] = []

        for resp in responses:
            _check_header(nxt, resp.header)
            if not resp.events:
                continue
            first = resp.events[0].kv.mod_revision
            last = resp.events[-1].kv.mod_revision
            if first <= nxt.revision:
                raise errors.RevisionRegressionError(
                    "watch response's first mod revision", nxt.revision, first
                )
            if last < first:
                raise errors.RevisionRegressionError(
                    "watch response's last mod revision", first, last
                )
            nxt.revision = last
            nxt.member_id = resp.header.member_id
            nxt.raft_term = resp.header.raft_term
            events.extend(resp.events)

        # Responses and their events come in revision order, so a stable sort
        # on key alone yields (key, mod revision) order.
        events.sort(key=lambda e: e.kv.key)
        self._kvs = kvs.merge_events(self._kvs, events, self._decode)
        self._changed = frozenset(e.kv.key for e in events)
        self._header = nxt
        self._on_update()

    # --- Talking to etcd -----------------------------------------------------

    async def load(self, client: aetcd.Client, revision: int = 0) -> None:
        """Replace the mirror by a read of the prefix at ``revision`` (0: now).

        The read is paginated (``config.load_page_size`` keys a request), all at
        the same revision, so the result is one consistent snapshot.
        """
        stub = await etcd.kv_stub(client)
        md = etcd.metadata(client)
        try:
            start = self.root.encode()
            end = kvs.prefix_range_end(self.root).encode()
            if revision == 0:
                # etcd reports the revision a read was served at only in its
                # header: learn "now" from a one-key read. It stays under the root,
                # which may be all an etcd user is allowed to read.
                probe = await stub.Range(
                    aetcd.rpc.RangeRequest(key=start, range_end=end, limit=1, keys_only=True),
                    metadata=md,
                )
                revision = int(probe.header.revision)

            header = protocol_pb2.Header.Etcd()
            raw: list[kvs.KeyValue] = []
            while True:
                resp = await stub.Range(
                    aetcd.rpc.RangeRequest(
                        key=start,
                        range_end=end,
                        revision=revision,
                        limit=self.config.load_page_size,
                    ),
                    metadata=md,
                )
                page_header = etcd.header_of(resp.header)
                _check_header(header, page_header)
                header = page_header
                raw.extend(etcd.key_value_of(kv) for kv in resp.kvs)
                if not resp.more or not resp.kvs:
                    break
                start = resp.kvs[-1].key + b"\0"
        except grpc.aio.AioRpcError as e:
            raise etcd.rpc_error(e, f"loading {self.root} at revision {revision}") from e

        # etcd's header revision is the store's revision when it served the read;
        # the mirror's is the revision it reflects.
        header.revision = revision
        self.load_snapshot(header, raw)
        log.info("loaded %d keys of %s at revision %d", len(self._kvs), self.root, revision)

    async def watch(self, client: aetcd.Client) -> None:
        """Keep the mirror current until cancelled; call after :meth:`load`.

        Watches the prefix from ``revision + 1`` with progress notifications (so
        an idle watch's resume point stays ahead of compactions) and "require
        leader". Responses are buffered for ``config.watch_delay`` and applied
        together. A stream that closes, or fails for lack of a leader or of a
        reachable etcd, restarts with back-off. A compacted resume revision,
        an inconsistent update or any other etcd error ends the watch with a
        :class:`~gazette.keyspace.errors.KeySpaceError`.
        """
        resume = self.revision + 1
        attempt = 0
        reauthenticated = False
        while True:
            outcome, resume, progressed, state = await self._watch_once(client, resume)
            if isinstance(outcome, Exception):
                raise outcome
            if state.created:
                reauthenticated = False
            if outcome is _Restart.REFUSED:
                if reauthenticated or not await etcd.reauthenticate(client):
                    raise errors.EtcdError(f"watch of {self.root} cancelled: {state.refusal}")
                reauthenticated = True
                log.info(
                    "etcd refused the watch of %s (%s): watching again with a fresh token",
                    self.root,
                    state.refusal,
                )
                continue
            attempt = 0 if progressed else attempt + 1
            delay = backoff(self.config, attempt)
            log.warning(
                "watch of %s ended: %s (restarting from revision %d in %.3fs; attempt %d)",
                self.root,
                outcome.value,
                resume,
                delay,
                attempt,
            )
            await self._sleep(delay)

    async def _watch_once(
        self, client: aetcd.Client, resume: int
    ) -> tuple[_Restart | Exception, int, bool, _WatchState]:
        """Run one watch stream until it needs a restart or fails.

        Returns (why it ended, the revision to resume from, whether any event was
        applied, the stream's state). Fatal failures are returned rather than raised so that they leave
        the task group as themselves, not wrapped in an exception group.
        """
        stub = await etcd.watch_stub(client)
        call = stub.Watch(metadata=etcd.metadata(client, etcd.REQUIRE_LEADER))
        queue: asyncio.Queue[Any] = asyncio.Queue()
        state = _WatchState(resume)
        try:
            await call.write(
                aetcd.rpc.WatchRequest(
                    create_request=aetcd.rpc.WatchCreateRequest(
                        key=self.root.encode(),
                        range_end=kvs.prefix_range_end(self.root).encode(),
                        start_revision=resume,
                        progress_notify=True,
                    )
                )
            )
        except grpc.aio.AioRpcError as e:
            call.cancel()
            return _classify_rpc_error(e, "starting watch"), resume, False, state
        except asyncio.InvalidStateError:
            call.cancel()
            return _Restart.CLOSED, resume, False, state

        try:
            async with asyncio.TaskGroup() as tg:
                pump = tg.create_task(_pump(call, queue), name=f"keyspace-watch-pump:{self.root}")
                try:
                    outcome = await self._consume(queue, state)
                finally:
                    pump.cancel()
        finally:
            call.cancel()
        return outcome, state.resume, state.progressed, state

    async def _consume(self, queue: asyncio.Queue[Any], state: _WatchState) -> _Restart | Exception:
        """Apply queued responses in delayed batches until the stream must end."""
        pending: list[WatchResponse] = []
        while True:
            ended = state.take(await queue.get(), pending)
            if pending and ended is None:
                # Let a burst of responses queue up, then apply it as one update.
                await self._sleep(self.config.watch_delay)
                while ended is None and not queue.empty():
                    ended = state.take(queue.get_nowait(), pending)
            if pending:
                try:
                    self.apply(*pending)
                except errors.KeySpaceError as e:
                    return e
                pending.clear()
                state.progressed = True
            if ended is not None:
                return ended


class _WatchState:
    """Resume point and outcome of one watch stream."""

    def __init__(self, resume: int) -> None:
        # Where a new stream would start. Progress notifications move it, but
        # not the mirror's revision: they mean "nothing changed up to here".
        self.resume = resume
        self.progressed = False
        # Whether etcd created the watch, and why it refused it if it did not.
        self.created = False
        self.refusal = ""

    def take(self, item: Any, pending: list[WatchResponse]) -> _Restart | Exception | None:
        """Account for one queued item; a non-None result ends the stream."""
        if item is _CLOSED:
            return _Restart.CLOSED
        if isinstance(item, grpc.aio.AioRpcError):
            return _classify_rpc_error(item, "watching")
        resp = item
        if resp.canceled:
            if resp.compact_revision:
                return errors.WatchCompactedError(self.resume, int(resp.compact_revision))
            reason = resp.cancel_reason or "watch cancelled by etcd"
            if "no leader" in reason:
                return _Restart.NO_LEADER
            if any(r in reason for r in _REFUSALS):
                self.refusal = reason
                return _Restart.REFUSED
            return errors.EtcdError(f"watch cancelled: {reason}")
        if resp.created:
            self.created = True
        if resp.events:
            events = [
                kvs.Event(kvs.EventType(ev.type), etcd.key_value_of(ev.kv)) for ev in resp.events
            ]
            pending.append(WatchResponse(etcd.header_of(resp.header), events))
            self.resume = events[-1].kv.mod_revision + 1
        elif not resp.created and resp.header.revision:
            # A progress notification: nothing changed under the prefix before it.
            self.resume = max(self.resume, int(resp.header.revision) + 1)
        return None


async def _pump(call: Any, queue: asyncio.Queue[Any]) -> None:
    """Move a watch stream's messages (then its end, or its error) to ``queue``."""
    try:
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                queue.put_nowait(_CLOSED)
                return
            queue.put_nowait(msg)
    except grpc.aio.AioRpcError as e:
        queue.put_nowait(e)


def _classify_rpc_error(e: grpc.aio.AioRpcError, what: str) -> _Restart | Exception:
    code = e.code()
    if code in _RESTART_CODES:
        details = e.details() or ""
        return _Restart.NO_LEADER if "no leader" in details else _Restart.UNAVAILABLE
    err = etcd.rpc_error(e, what)
    err.__cause__ = e
    return err


def _check_header(current: protocol_pb2.Header.Etcd, update: protocol_pb2.Header.Etcd) -> None:
    """Refuse a response of another cluster, or one behind the mirror."""
    if current.cluster_id and current.cluster_id != update.cluster_id:
        raise errors.ClusterMismatchError(current.cluster_id, update.cluster_id)
    if update.revision < current.revision:
        raise errors.RevisionRegressionError(
            "response header revision", current.revision, update.revision
        )
    if current.cluster_id and (
        current.member_id != update.member_id or current.raft_term != update.raft_term
    ):
        log.info(
            "etcd member or raft term changed (member %d -> %d, term %d -> %d)",
            current.member_id,
            update.member_id,
            current.raft_term,
            update.raft_term,
        )
