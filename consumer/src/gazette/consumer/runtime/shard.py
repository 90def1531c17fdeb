"""One shard assigned to this process: a standby that may become primary.

Gazette's ``consumer/shard.go``. A :class:`ShardReplica` exists while the
process holds an assignment of the shard. It announces STANDBY (Consumers I
has no recovery log to play, so a standby is ready at once), waits until its
assignment is in slot 0, then serves as primary:

1. the application makes its store; :meth:`Store.restore_checkpoint` fences
   any earlier primary and returns the last committed Checkpoint;
2. status PRIMARY; a new Publisher (a new producer id) over the shard's own
   :class:`~gazette.broker.client.AppendService`;
3. one reader task per source journal, from the checkpoint's read-through
   offset (or the source's ``min_offset`` if larger), into the transaction
   loop's channel; a Sequencer built from the checkpoint's producer states;
4. :class:`~gazette.consumer.runtime.transaction.Transactions` until it fails
   or the shard stops. A failure marks the assignment FAILED with the error.

Losing the assignment (or the process stopping) sets :attr:`stopping` and
cancels everything the shard runs; its store is destroyed afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import shutil
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from gazette import allocator, keyspace, message, task
from gazette.allocator import txn as etcd_txn
from gazette.broker import protocol as pb
from gazette.broker.client import AppendService, AsyncOperation, JournalClient
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer.runtime import (
    checkpoints,
    errors,
    interfaces,
    metrics,
    recovery,
    transaction,
)

__all__ = ["ShardReplica", "ShardServices"]

log = logging.getLogger(__name__)

_Code = pc.ReplicaStatus.Code
#: Errors longer than this many characters are cut before going to etcd (Gazette: 2048 runes).
MAX_ETCD_ERR_LEN = 2048
_STATUS_BACKOFF = (0.0, 0.05, 0.05, 0.1, 0.1, 1.0, 1.0)
_STATUS_BACKOFF_MAX = 5.0
DEFAULT_RING_BUFFER_SIZE = 8192
DEFAULT_READ_CHANNEL_SIZE = 8192


class ShardServices:
    """What every shard of a process shares."""

    def __init__(
        self,
        app: interfaces.Application,
        etcd: Any,
        ks: keyspace.KeySpace,
        journal_client: JournalClient,
        publish_clock_delta_ns: int = 0,
    ) -> None:
        self.app = app
        self.etcd = etcd
        self.ks = ks
        self.journal_client = journal_client
        self.publish_clock_delta_ns = publish_clock_delta_ns


class ShardReplica:
    """A shard assigned here (implements :class:`interfaces.Shard` for the application)."""

    def __init__(
        self, svc: ShardServices, item: allocator.keys.KeyValue, assignment: allocator.keys.KeyValue
    ) -> None:
        self._svc = svc
        self._item = item
        self._assignment = assignment
        self._stopping = asyncio.Event()
        self._promoted = asyncio.Event()
        self._assignment_changed = asyncio.Event()
        self._group: task.Group | None = None
        self._appends: AppendService | None = None
        self._read_through: dict[str, int] = {}
        self._publish_at: dict[str, int] = {}
        self._progressed = asyncio.Event()
        self.store: interfaces.Store | None = None
        self._recorder: rl.Recorder | None = None
        self._local_dir: pathlib.Path | None = None
        self.store_ready = asyncio.Event()
        self.primary_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.status_code = int(_Code.IDLE)
        self._note_slot()

    # -- interfaces.Shard -------------------------------------------------

    @property
    def id(self) -> str:
        item: allocator.Item = self._item.decoded
        return item.id

    @property
    def fqn(self) -> str:
        return self._item.key

    @property
    def spec(self) -> pc.ShardSpec:
        item: allocator.Item = self._item.decoded
        spec: pc.ShardSpec = item.spec
        return spec

    @property
    def stopping(self) -> asyncio.Event:
        return self._stopping

    @property
    def journal_client(self) -> JournalClient:
        return self._svc.journal_client

    @property
    def append_service(self) -> AppendService:
        if self._appends is None:
            raise RuntimeError(f"shard {self.id} is not primary: it has no append service")
        return self._appends

    @property
    def recorder(self) -> rl.Recorder | None:
        return self._recorder

    def progress(self) -> tuple[dict[str, int], dict[str, int]]:
        return dict(self._read_through), dict(self._publish_at)

    def run_operation(self, name: str, coro: Coroutine[Any, Any, None]) -> AsyncOperation:
        if self._group is None:
            coro.close()
            raise RuntimeError(f"shard {self.id} is not running")
        op = AsyncOperation()

        async def run() -> None:
            try:
                await coro
            except asyncio.CancelledError as e:
                op.resolve(e)
                raise
            except Exception as e:  # noqa: BLE001 - the operation carries it to its waiter.
                op.resolve(e)
            else:
                op.resolve(None)

        self._group.spawn(f"{self.id}: {name}", run())
        return op

    # -- for the transaction loop and the service -------------------------

    def signal_progress(self, read_through: dict[str, int], publish_at: dict[str, int]) -> None:
        self._read_through.update(read_through)
        self._publish_at.update(publish_at)
        fqn = self.fqn
        for journal, offset in read_through.items():
            metrics.shard_read_head.labels(fqn, journal).set(offset)
        self._progressed.set()
        self._progressed = asyncio.Event()

    async def wait_progress(self) -> None:
        """Wait for the next progress signal."""
        await self._progressed.wait()

    @property
    def assignment(self) -> allocator.keys.KeyValue:
        return self._assignment

    @property
    def slot(self) -> int:
        a: allocator.Assignment = self._assignment.decoded
        return a.slot

    def update(self, item: allocator.keys.KeyValue, assignment: allocator.keys.KeyValue) -> None:
        """The item or our assignment changed in etcd (same replica)."""
        self._item, self._assignment = item, assignment
        self._assignment_changed.set()
        self._assignment_changed = asyncio.Event()
        self._note_slot()

    def _note_slot(self) -> None:
        if self.slot == 0:
            self._promoted.set()

    def stop(self) -> None:
        """The assignment is gone (or the process stops): stop serving."""
        self._stopping.set()
        if self._group is not None:
            self._group.cancel()

    # -- serving ----------------------------------------------------------

    async def serve(self) -> None:
        """Serve the replica until it is stopped; never raises but for cancellation."""
        fqn = self.fqn
        try:
            async with task.Group(f"shard {self.id}") as group:
                self._group = group
                group.spawn("lifecycle", self._lifecycle())
        except asyncio.CancelledError:
            if not self._stopping.is_set():
                raise
        except Exception as e:  # noqa: BLE001 - a failed shard is reported, not crashed.
            # The group logged it, naming the task; here it goes to etcd.
            if not self._stopping.is_set():
                text = str(e) or type(e).__name__
                if len(text) > MAX_ETCD_ERR_LEN:
                    text = text[:MAX_ETCD_ERR_LEN] + " ...[truncated]"
                with contextlib.suppress(errors.StatusError):
                    await self.set_status(int(_Code.FAILED), [text])
        finally:
            self._group = None
            if not self.primary_done.done():
                self.primary_done.set_result(None)
            metrics.shard_up.labels(fqn, _code_name(self.status_code)).set(0)
            store, self.store = self.store, None
            if store is not None:
                try:
                    await store.destroy()
                except Exception as e:  # noqa: BLE001 - tearing down; nothing to fail.
                    log.warning("shard %s: destroying its store: %s", fqn, e)
            self._recorder = None
            local, self._local_dir = self._local_dir, None
            if local is not None:
                # The log holds the store: its local copy goes with the assignment.
                await asyncio.to_thread(shutil.rmtree, local, True)

    async def _lifecycle(self) -> None:
        playback: recovery.Playback | None = None
        if pc.recovery_log(self.spec):
            # A hot standby: BACKFILL while it replays the log, STANDBY once it follows
            # the head; promoted, it hands the log off and serves from what it replayed.
            await self.set_status(int(_Code.BACKFILL))
            tailing = asyncio.Event()
            assert self._group is not None
            self._group.spawn("standby status", self._standby_when(tailing))
            self._local_dir = await asyncio.to_thread(recovery.new_dir, self.id)
            playback = await recovery.play(
                self._svc.etcd,
                self._svc.journal_client,
                self.spec,
                self._local_dir,
                tailing=tailing,
                promoted=self._promoted,
            )
        else:
            await self.set_status(int(_Code.STANDBY))
            await self._promoted.wait()
        log.info("shard %s: promoted to primary", self.fqn)
        await self._serve_primary(playback)

    async def _standby_when(self, tailing: asyncio.Event) -> None:
        await tailing.wait()
        await self.set_status(int(_Code.STANDBY))

    async def _serve_primary(self, playback: recovery.Playback | None) -> None:
        svc = self._svc
        app = svc.app
        async with AppendService(svc.journal_client) as appends:
            self._appends = appends
            if playback is not None:
                self._recorder = await recovery.start_recording(
                    svc.etcd, appends, self.spec, playback, self._assignment
                )
                assert self._group is not None
                self._group.spawn("store hints", self._store_hints())
            store = self.store = await app.new_store(self)
            cp = await store.restore_checkpoint(self)
            self.signal_progress(checkpoints.flatten_read_through(cp), {})
            self.store_ready.set()
            await self.set_status(int(_Code.PRIMARY))
            publisher = message.Publisher(appends, message.Clock())
            while True:
                await self._run_transactions(app, store, publisher, cp)
                cp = await store.restore_checkpoint(self)

    async def _store_hints(self) -> None:
        """Store the recorder's hints as the shard's primary hints, periodically."""
        while True:
            await asyncio.sleep(recovery.HINTS_INTERVAL_S)
            recorder = self._recorder
            if recorder is None:
                return
            hints = await recorder.build_hints()
            try:
                await recovery.store_hints(
                    self._svc.etcd, pc.hint_primary_key(self.spec), hints, self._assignment
                )
            except allocator.errors.EtcdError as e:
                log.warning("shard %s: storing hints: %s", self.fqn, e)

    async def _run_transactions(
        self,
        app: interfaces.Application,
        store: interfaces.Store,
        publisher: message.Publisher,
        cp: pc.Checkpoint,
    ) -> None:
        spec = self.spec
        wake = asyncio.Event()
        channel = transaction.Channel(spec.read_channel_size or DEFAULT_READ_CHANNEL_SIZE, wake.set)
        read_through = checkpoints.flatten_read_through(cp)
        async with task.Group(f"shard {self.id} readers") as readers:
            for source in spec.sources:
                offset = max(read_through.get(source.journal, 0), source.min_offset)
                readers.spawn(f"read {source.journal}", self._read(source.journal, offset, channel))
            sequencer = message.Sequencer(
                read_through,
                checkpoints.flatten_producer_states(cp),
                spec.ring_buffer_size or DEFAULT_RING_BUFFER_SIZE,
            )
            loop = transaction.Transactions(
                self,
                app,
                store,
                sequencer,
                publisher,
                channel,
                transaction.LoopTimer(wake.set),
                self._replay,
                wake,
                svc_delta(self._svc),
            )
            await loop.run(cp)
            readers.cancel()

    async def _read(self, journal: str, offset: int, channel: transaction.Channel) -> None:
        """Read ``journal`` from ``offset`` into ``channel``, until an error (which it passes on)."""
        request = pb.ReadRequest(journal=journal, offset=offset, block=True)
        fqn = self.fqn
        try:
            async with message.ReadUncommittedIter(
                self._svc.journal_client, request, self._svc.app.new_message
            ) as it:
                head = metrics.shard_read_head.labels(fqn, journal)
                lag = metrics.shard_lag_bytes.labels(fqn, journal)
                async for env in it:
                    await channel.put(env)
                    head.set(env.end)
                    lag.set(max(0, it.write_head - env.end))
            await channel.put(errors.ReadError(f"reading {journal}: the read ended"))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the transaction loop fails the shard with it.
            await channel.put(e)

    def _replay(self, journal: str, begin: int, end: int) -> AsyncIterator[message.Envelope]:
        request = pb.ReadRequest(journal=journal, offset=begin, end_offset=end, block=True)
        return message.ReadUncommittedIter(
            self._svc.journal_client, request, self._svc.app.new_message
        )

    # -- status in etcd -----------------------------------------------------

    async def set_status(self, code: int, errs: list[str] | None = None) -> None:
        """Write our ReplicaStatus (codes only rise; errors accumulate), retrying until it lands."""
        attempt = 0
        while True:
            if self._stopping.is_set():
                return
            delay = (
                _STATUS_BACKOFF[attempt] if attempt < len(_STATUS_BACKOFF) else _STATUS_BACKOFF_MAX
            )
            if delay:
                await asyncio.sleep(delay)
            try:
                if await self._try_status(code, errs or []):
                    return
            except errors.StatusError as e:
                if attempt:
                    log.warning("shard %s: writing its status (will retry): %s", self.fqn, e)
            attempt += 1

    async def _try_status(self, code: int, errs: list[str]) -> bool:
        kv = self._assignment
        current: pc.ReplicaStatus = kv.decoded.value
        status = pc.ReplicaStatus(code=max(code, current.code))  # type: ignore[arg-type]
        status.errors.extend(errs)
        status.errors.extend(current.errors)
        if status == current and kv.value:
            self._note_status(status.code)
            return True
        try:
            resp = await etcd_txn.commit(
                self._svc.etcd,
                [etcd_txn.mod_revision_is(kv.key, kv.mod_revision)],
                [etcd_txn.put(kv.key, status.SerializeToString(), ignore_lease=True)],
            )
        except allocator.errors.EtcdError as e:
            raise errors.StatusError(str(e)) from e
        if not resp.succeeded:
            # Our view is stale: wait for the KeySpace to bring the newer value.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._assignment_changed.wait()
            return False
        with contextlib.suppress(TimeoutError):
            await self._svc.ks.wait_for_revision(int(resp.header.revision), timeout=5.0)
        self._note_status(status.code)
        return True

    def _note_status(self, code: int) -> None:
        if code != self.status_code:
            metrics.shard_up.labels(self.fqn, _code_name(self.status_code)).set(0)
        self.status_code = code
        metrics.shard_up.labels(self.fqn, _code_name(code)).set(1)


def _code_name(code: int) -> str:
    return _Code.Name(_Code.ValueType(code))


def svc_delta(svc: ShardServices) -> int:
    return svc.publish_clock_delta_ns
