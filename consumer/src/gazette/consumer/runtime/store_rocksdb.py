"""RocksDBStore: an embedded RocksDB whose files are recorded into the shard's recovery log.

Gazette's ``consumer/store-rocksdb`` wraps RocksDB's ``Env`` in C++ and hands
every file operation to the recorder as it happens. :mod:`rocksdict` (the
binding used here) cannot hook the ``Env``, so this store records by
**directory diff at commit**: after a transaction's ``WriteBatch`` (with the
Checkpoint in it) is written, the store takes a consistent snapshot of the
directory and records what changed since the previous commit.

**Which files, and how.** RocksDB writes every file it keeps through an
append-only writer and never rewrites one in place: SST and blob files are
written once, start to end, then only read; WAL (``*.log``) and
``MANIFEST-*`` files only grow; ``OPTIONS-*`` are written once. Files are
identified by inode (the store keeps a descriptor open on each recorded file,
so its inode number cannot be reused while recorded): a grown file records
its new tail as ``write`` ops at the previously recorded size; a new name
records a create and its bytes; a vanished name records an unlink. The small
files replaced whole (``CURRENT`` by rename, ``IDENTITY``, rocksdict's
``rocksdict-config.json``) are compared by content and recorded as
*properties*: one op carries the whole content, so a replayed log never
lacks a ``CURRENT`` nor holds half of one. (A recorded rename would not do:
it unlinks the old file one op before linking the new one, and the
cut-anywhere test replayed a log ending between the two into a directory
without ``CURRENT``, which RocksDB refuses to open.) ``LOCK``, the info log
(``LOG``, ``LOG.old.*``) and RocksDB's transient ``*.dbtmp`` files are not
recorded. The store enforces the options these rules rely on:
``recycle_log_file_num=0`` (a recycled WAL is overwritten in place), no mmap
writes (they extend files ahead of their data), no WAL archive directory,
point-in-time WAL recovery, and a small ``max_manifest_file_size`` (Go's
128 KiB) so that the MANIFEST rolls over and old log segments fall out of
the hints. Applications must not set ``wal_dir``, ``db_paths`` or direct I/O
for flushes and compactions.

**A consistent snapshot while background jobs run.** Flushes and compactions
keep creating, finishing and deleting files while the directory is listed
(in a worker thread, after the commit's write). The store reads ``CURRENT``
(naming the MANIFEST) and opens the MANIFEST and takes its size ``S``; *then*
lists the directory, opening a descriptor on every file it does not already
hold; then reads ``CURRENT`` and the MANIFEST's size again, and starts over
unless both are unchanged. When they are, the snapshot is the MANIFEST prefix
``[0, S)`` with every file listed, and that is a state RocksDB recovers from,
because:

* RocksDB deletes a file only once it is obsolete, which happens only after
  a version edit that drops it was appended (and synced) to the MANIFEST, or
  after ``CURRENT`` switched to a new MANIFEST that no longer names it. Had
  that happened inside the listing window, ``S`` or ``CURRENT`` would have
  changed. So every SST named by the prefix ``[0, S)``, and every WAL at or
  after its log number, existed for the whole window, was listed, and is
  held open; it stays readable through its descriptor if deleted later.
* An SST (or blob file) is written in full and synced before the edit that
  names it is appended, and is immutable afterwards: reading it later
  through the descriptor gives exactly its bytes. Files not named by the
  prefix (outputs of a running compaction, a MANIFEST being written for a
  roll-over) are recorded as the prefix they have; RocksDB ignores and
  deletes them on open, and the next commit records the rest.
* Only the store writes the WAL (on the commit's behalf, before the
  snapshot), and each commit is one ``WriteBatch``, one WAL record. Its bytes
  are in the OS file when ``write`` returns (``flush_wal`` makes sure). Only
  the MANIFEST prefix ``[0, S)`` is recorded, even if it has grown since; a
  record torn at ``S`` (a writer caught mid-record) is treated by RocksDB as
  the end of the MANIFEST, and the next commit records the rest.

**Order in the log.** Within a commit, the recorded ops are: the tails and
new files other than MANIFESTs (WALs, SSTs, OPTIONS); then MANIFEST bytes;
then the properties, ``CURRENT`` last; then unlinks. Replayed up to any
point of that sequence, the directory is the state of the previous commit
with extra files RocksDB ignores, or with the commit's WAL record (whole: the
previous state plus this commit; torn: ignored by point-in-time recovery),
or a MANIFEST prefix whose every file is already in the log, or the new
state. Files are unlinked only after the MANIFEST and ``CURRENT`` that stopped
naming them. As in :mod:`~.store_json_file`, the ops queue behind a recorder
barrier on the transaction's appends, and the commit is the barrier after
them.

**Restoring.** A new primary plays the log into the directory (the recovery
runtime does that) and the store opens RocksDB there: RocksDB replays the WAL
and rewrites its MANIFEST and ``CURRENT``, and the first commit records that
difference against the files the log already held. The Checkpoint is the
value of Gazette's key (``\\x00\\x12checkpoint\\x00\\x01``, the ordered-code
encoding of ``(null, "checkpoint")``) in the default column family. Keys
starting with ``\\x00`` are reserved for the store. Gazette's legacy offset keys
(``(null, "mark", journal)``) are neither written nor read.

**Using it.** The database is in rocksdict's raw mode (keys and values are
``bytes``). Write only through the store, on the event loop thread:
:meth:`RocksDBStore.put` and :meth:`RocksDBStore.delete` stage the current
transaction's changes, :meth:`RocksDBStore.get` reads through them, and the
commit writes them with the Checkpoint in one atomic ``WriteBatch``.
:attr:`RocksDBStore.db` (a :class:`rocksdict.Rdict`) is for reads and
iteration of committed data; writing to it directly bypasses the
transaction (such writes would be recorded with whichever commit comes next,
not atomically with a checkpoint). Column families named in
:attr:`RocksDBStoreConfig.column_families` are opened (created if missing)
and written with ``column_family=name``; they share the WAL and MANIFEST, so
they are recorded like the rest. Usage::

    async def new_store(self, shard):
        return await store_rocksdb.RocksDBStore.open(shard)

    async def consume_message(self, shard, store, envelope, publisher):
        key = envelope.message.word.encode()
        n = int(store.get(key) or b"0")
        store.put(key, b"%d" % (n + 1))

Cost: each commit lists the directory and ``fstat`` s each file, and records
its WAL record; SSTs are recorded once each, when they appear (a compaction
records its outputs whole: the log carries RocksDB's write amplification).
The commit's write, the listing and reads of large files run in worker
threads; the ops are recorded on the event loop thread, in order.

Tested (``tests/runtime/test_store_rocksdb.py``) by replaying the log cut at
commit points, at op boundaries inside commits and at random bytes, under
memtable flushes, compactions (also forced from another thread) and MANIFEST
roll-overs: each replay opens as the last commit before the cut or the one
being recorded. A run with the directory listing slowed down (so listings
race version edits) found the MANIFEST size must be taken before the listing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping

import rocksdict

from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer.runtime import errors, interfaces

__all__ = ["CHECKPOINT_KEY", "RocksDBStore", "RocksDBStoreConfig"]

log = logging.getLogger(__name__)

#: Where the Checkpoint is kept (default column family): Gazette's key, the
#: ordered-code encoding of ``(null, "checkpoint")``.
CHECKPOINT_KEY = b"\x00\x12checkpoint\x00\x01"

CURRENT = "CURRENT"
IDENTITY = "IDENTITY"
#: rocksdict's own settings (raw mode, prefix extractors), replaced whole at open.
ROCKSDICT_CONFIG = "rocksdict-config.json"
#: Small files replaced whole, never appended to: recorded as properties (their
#: content in one op). ``CURRENT`` last: it switches the MANIFEST.
_WHOLE = (IDENTITY, ROCKSDICT_CONFIG, CURRENT)


def _ignored(name: str) -> bool:
    """Files never recorded: the lock, the info log, transient temporaries."""
    return name == "LOCK" or name.startswith("LOG") or name.endswith(".dbtmp")


def _order(name: str) -> tuple[int, int, str]:
    """Recording order of appended files: MANIFESTs after the rest, each by file number."""
    stem = name.split(".", 1)[0].rsplit("-", 1)[-1]
    number = int(stem) if stem.isdigit() else -1
    return (1 if name.startswith("MANIFEST-") else 0, number, name)


@dataclasses.dataclass(frozen=True)
class RocksDBStoreConfig:
    """How a :class:`RocksDBStore` opens its database and records it."""

    #: Memtable size of the default options (``write_buffer_size``); ignored when
    #: the store is given its own options.
    write_buffer_size: int = 64 << 20
    #: MANIFEST size that makes RocksDB start a new one (Go's store uses 128 KiB):
    #: the live MANIFEST is replayed whole, so it should stay small.
    max_manifest_file_size: int = 128 << 10
    #: Column families besides ``default`` opened (and created if missing).
    column_families: tuple[str, ...] = ()
    #: Listings of the directory a snapshot may take before it gives up (each
    #: retry means a flush or compaction changed the MANIFEST meanwhile).
    snapshot_attempts: int = 200
    #: Largest ``write`` op a commit records (bigger files take several).
    write_chunk: int = 4 << 20
    #: Commits recording up to this many bytes read them on the event loop;
    #: bigger ones read each chunk in a worker thread.
    inline_read_bytes: int = 1 << 20


@dataclasses.dataclass
class _Held:
    """A recorded file: its fnode, an open descriptor, and how many bytes are recorded."""

    fnode: int
    fd: int
    ino: int
    size: int


@dataclasses.dataclass
class _Listed:
    """A file of a snapshot: a descriptor (new, or the recorded one's) and its size then."""

    fd: int
    ino: int
    size: int
    new: bool


@dataclasses.dataclass
class _Snapshot:
    files: dict[str, _Listed]
    whole: dict[str, str]

    def close_new(self) -> None:
        for f in self.files.values():
            if f.new:
                os.close(f.fd)
        self.files.clear()


class _Unstable(Exception):
    """The directory changed under a listing: list it again."""


class RocksDBStore:
    """A :class:`~gazette.consumer.runtime.interfaces.Store` of one RocksDB, recorded."""

    def __init__(
        self,
        recorder: rl.Recorder,
        options: rocksdict.Options | None = None,
        config: RocksDBStoreConfig | None = None,
        column_family_options: Mapping[str, rocksdict.Options] | None = None,
    ) -> None:
        """Open the database in ``recorder.directory`` (as played back from the log).

        ``options`` must be made with ``raw_mode=True``; the store overrides the
        settings its recording depends on (see the module's docs). Column
        families use ``column_family_options[name]``, else ``options``.
        """
        self.recorder = recorder
        self.config = config or RocksDBStoreConfig()
        self.directory = pathlib.Path(recorder.directory)
        self._held: dict[str, _Held] = {}
        self._whole: dict[str, str] = {}
        self._pending: dict[tuple[str | None, bytes], bytes | None] = {}
        self._committing: dict[tuple[str | None, bytes], bytes | None] = {}
        self._failed: BaseException | None = None
        #: Listings started over because the MANIFEST changed meanwhile (for tests).
        self.relistings = 0
        #: How the directory is listed: a seam for tests, which slow it down so that
        #: listings race RocksDB's version edits.
        self._scandir: Callable[
            [pathlib.Path], contextlib.AbstractContextManager[Iterator[os.DirEntry[str]]]
        ] = os.scandir
        self._db: rocksdict.Rdict | None = None
        self._cfs: dict[str, rocksdict.Rdict] = {}
        #: Held by work in worker threads, and by the release of what they use.
        self._threads = threading.Lock()
        self._handles: dict[str, rocksdict.ColumnFamily] = {}
        self._adopt_recorded()
        try:
            self._open(options, column_family_options)
        except BaseException:
            self._release()
            raise

    def _open(
        self,
        options: rocksdict.Options | None,
        column_family_options: Mapping[str, rocksdict.Options] | None,
    ) -> None:
        cfg = self.config
        opts = options if options is not None else rocksdict.Options(raw_mode=True)
        if options is None:
            opts.set_write_buffer_size(cfg.write_buffer_size)
        cf_opts = dict(column_family_options or {})
        for name in cfg.column_families:
            cf_opts.setdefault(name, opts)
        for o in (opts, *cf_opts.values()):
            _enforce(o, cfg)
        existing = set()
        if (self.directory / CURRENT).exists():
            existing = set(rocksdict.Rdict.list_cf(str(self.directory), opts)) - {"default"}
        missing = existing - set(cf_opts)
        if missing:
            raise errors.ConfigError(
                f"{self.directory}: the database has column families {sorted(missing)}"
                " that RocksDBStoreConfig.column_families does not name"
            )
        try:
            db = rocksdict.Rdict(str(self.directory), opts, column_families=cf_opts or None)
        except Exception as e:
            raise errors.ConsumerError(f"{self.directory}: opening RocksDB: {e}") from e
        self._db = db
        self._cfs = {name: db.get_column_family(name) for name in cf_opts}
        self._handles = {name: db.get_column_family_handle(name) for name in cf_opts}
        try:
            raw = json.loads((self.directory / ROCKSDICT_CONFIG).read_text()).get("raw_mode")
        except (OSError, ValueError):
            raw = None
        if raw is not True:
            raise errors.ConfigError(
                f"{self.directory}: RocksDBStore needs rocksdict.Options(raw_mode=True)"
            )
        self._checkpoint = self._read_checkpoint()

    @classmethod
    async def open(
        cls,
        shard: interfaces.Shard,
        options: rocksdict.Options | None = None,
        config: RocksDBStoreConfig | None = None,
        column_family_options: Mapping[str, rocksdict.Options] | None = None,
    ) -> RocksDBStore:
        """The store of ``shard``, whose spec must name a recovery log."""
        recorder = shard.recorder
        if recorder is None:
            raise errors.ConsumerError(
                f"shard {shard.id}: RocksDBStore needs a recovery log "
                "(ShardSpec.recovery_log_prefix is empty)"
            )
        return cls(recorder, options, config, column_family_options)

    # -- the application's API ------------------------------------------------

    @property
    def db(self) -> rocksdict.Rdict:
        """The database (raw mode), for reads of committed data; write through the store."""
        if self._db is None:
            raise errors.ConsumerError("RocksDBStore is destroyed")
        return self._db

    def column_family(self, name: str) -> rocksdict.Rdict:
        """A column family named in the config, for reads of committed data."""
        try:
            return self._cfs[name]
        except KeyError:
            raise errors.ConsumerError(f"column family {name!r} is not configured") from None

    def put(self, key: bytes, value: bytes, column_family: str | None = None) -> None:
        """Stage ``key = value`` in the current transaction."""
        self._check_key(key, column_family)
        self._pending[(column_family, bytes(key))] = bytes(value)

    def delete(self, key: bytes, column_family: str | None = None) -> None:
        """Stage the deletion of ``key`` in the current transaction."""
        self._check_key(key, column_family)
        self._pending[(column_family, bytes(key))] = None

    def get(self, key: bytes, column_family: str | None = None) -> bytes | None:
        """``key``'s value as the current transaction sees it (its own writes first)."""
        k = (column_family, bytes(key))
        for staged in (self._pending, self._committing):
            if k in staged:
                return staged[k]
        db = self.db if column_family is None else self.column_family(column_family)
        value = db.get(k[1])
        return None if value is None else bytes(value)

    def _check_key(self, key: bytes, column_family: str | None) -> None:
        if column_family is None and key[:1] == b"\x00":
            raise ValueError("keys starting with \\x00 are reserved by RocksDBStore")
        if column_family is not None and column_family not in self._handles:
            raise errors.ConsumerError(f"column family {column_family!r} is not configured")

    # -- Store ------------------------------------------------------------------

    def _read_checkpoint(self) -> pc.Checkpoint:
        cp = pc.Checkpoint()
        raw = self.db.get(CHECKPOINT_KEY)
        if raw:
            cp.ParseFromString(bytes(raw))
        return cp

    async def restore_checkpoint(self, shard: interfaces.Shard) -> pc.Checkpoint:
        # At a transaction boundary: what an abandoned transaction staged goes.
        self._pending.clear()
        cp = pc.Checkpoint()
        cp.CopyFrom(self._checkpoint)
        return cp

    def start_commit(
        self,
        shard: interfaces.Shard,
        checkpoint: pc.Checkpoint,
        wait_for: Collection[AsyncOperation],
    ) -> AsyncOperation:
        if self._failed is not None:
            return AsyncOperation.finished(
                errors.CommitError(f"{self.directory}: an earlier commit failed: {self._failed}")
            )
        db = self.db
        batch = rocksdict.WriteBatch(raw_mode=True)
        for (cf, key), value in self._pending.items():
            handle = None if cf is None else self._handles[cf]
            if value is None:
                batch.delete(key, handle)
            else:
                batch.put(key, value, handle)
        batch.put(CHECKPOINT_KEY, checkpoint.SerializeToString())
        self._committing, self._pending = self._pending, {}
        cp = pc.Checkpoint()
        cp.CopyFrom(checkpoint)
        # Everything recorded from here on queues behind the transaction's appends.
        self.recorder.barrier(list(wait_for))

        def write() -> None:
            with self._threads:
                if self._db is None:
                    raise errors.CommitError(f"{self.directory}: the store was destroyed")
                db.write(batch)
                # The WAL record must be in the OS file before the directory is read.
                db.flush_wal(False)

        async def commit() -> None:
            try:
                await asyncio.to_thread(write)
                self._committing = {}
                snap = await asyncio.to_thread(self._locked_snapshot)
                await self._record(snap)
            except BaseException as e:
                # The log may hold part of this commit: nothing more may follow it.
                self._failed = e
                raise
            await self.recorder.barrier()
            self._checkpoint = cp

        return shard.run_operation("rocksdb commit (recorded)", commit())

    async def destroy(self) -> None:
        """Close the database (waiting for its background jobs) and the held files.

        The directory stays: the shard removes it (the log holds the store).
        """
        await asyncio.to_thread(self._release)

    def _release(self) -> None:
        # After any worker thread of a cancelled commit: they use the database and
        # the held descriptors.
        with self._threads:
            self._release_locked()

    def _release_locked(self) -> None:
        db, self._db = self._db, None
        self._cfs.clear()
        self._handles.clear()
        if db is not None:
            try:
                db.close()
            except Exception as e:  # noqa: BLE001 - tearing down; nothing to fail.
                log.warning("closing %s: %s", self.directory, e)
        for held in self._held.values():
            os.close(held.fd)
        self._held.clear()

    # -- recording ----------------------------------------------------------------

    def _adopt_recorded(self) -> None:
        """Take the played-back files as recorded, before RocksDB touches them."""
        rec = self.recorder
        for name in _WHOLE:
            content = rec.fsm.properties.get("/" + name)
            if content is not None:
                self._whole[name] = content
        for rel, fnode in sorted(rec.fsm.links.items()):
            name = rel.lstrip("/")
            path = self.directory / name
            if "/" in name or _ignored(name) or name in _WHOLE:
                # Not a file this store records as a file (a foreign log's): unlink it
                # in the log; the next commit records what RocksDB has there now.
                rec.record_remove(path)
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                rec.record_remove(path)
                continue
            st = os.fstat(fd)
            self._held[name] = _Held(fnode, fd, st.st_ino, st.st_size)

    def _locked_snapshot(self) -> _Snapshot:
        with self._threads:
            if self._db is None:
                raise errors.CommitError(f"{self.directory}: the store was destroyed")
            return self._snapshot()

    def _snapshot(self) -> _Snapshot:
        """A consistent listing of the directory (see the module's docs). In a worker thread."""
        backoff = 0.001
        for _ in range(self.config.snapshot_attempts):
            snap = _Snapshot({}, {})
            try:
                self._list(snap)
                return snap
            except (_Unstable, FileNotFoundError):
                snap.close_new()
                self.relistings += 1
            except BaseException:
                snap.close_new()
                raise
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.05)
        raise errors.CommitError(
            f"{self.directory}: no stable listing in {self.config.snapshot_attempts} attempts"
            " (the MANIFEST kept changing)"
        )

    def _list(self, snap: _Snapshot) -> None:
        d = self.directory
        current = (d / CURRENT).read_text()
        manifest = current.strip()
        if not manifest.startswith("MANIFEST-") or "/" in manifest:
            raise errors.CommitError(f"{d / CURRENT}: names no MANIFEST: {current!r}")
        # The MANIFEST's size is taken BEFORE the listing and checked after it: the
        # window the argument of the module's docs needs must cover the whole listing
        # (taken after it, the slow-listing stress run replayed a MANIFEST naming an
        # SST the listing had missed).
        try:
            man = self._listed(snap, manifest, d / manifest, None)
        except FileNotFoundError:
            raise _Unstable from None
        size = os.fstat(man.fd).st_size
        with self._scandir(d) as entries:
            for entry in entries:
                name = entry.name
                if (
                    _ignored(name)
                    or name in _WHOLE
                    or name == manifest
                    or not entry.is_file(follow_symlinks=False)
                ):
                    continue
                try:
                    ino = entry.stat(follow_symlinks=False).st_ino
                    self._listed(snap, name, pathlib.Path(entry.path), ino)
                except FileNotFoundError:
                    # Deleted since readdir: not a file of the listed version (had it been
                    # one, the MANIFEST check below fails and the listing starts over).
                    continue
        for f in snap.files.values():
            f.size = os.fstat(f.fd).st_size
        for name in _WHOLE:
            if name != CURRENT:
                with contextlib.suppress(FileNotFoundError):
                    snap.whole[name] = (d / name).read_text()
        # No version edit and no MANIFEST switch while listing: the MANIFEST
        # prefix [0, size) names only files held open now.
        if (d / CURRENT).read_text() != current or os.fstat(man.fd).st_size != size:
            raise _Unstable
        man.size = size
        snap.whole[CURRENT] = current

    def _listed(self, snap: _Snapshot, name: str, path: pathlib.Path, ino: int | None) -> _Listed:
        """Add ``name`` to the snapshot: its held descriptor if the same file, else a new one."""
        held = self._held.get(name)
        if held is not None and ino == held.ino:
            # The held descriptor pins the inode: the same number is the same file.
            listed = _Listed(held.fd, held.ino, 0, False)
        else:
            fd = os.open(path, os.O_RDONLY)
            st = os.fstat(fd)
            if held is not None and st.st_ino == held.ino:
                os.close(fd)
                listed = _Listed(held.fd, held.ino, 0, False)
            else:
                listed = _Listed(fd, st.st_ino, 0, True)
        snap.files[name] = listed
        return listed

    async def _record(self, snap: _Snapshot) -> None:
        rec, d = self.recorder, self.directory
        try:
            plan: list[tuple[str, _Listed, _Held | None]] = []
            for name in sorted(snap.files, key=_order):
                f = snap.files[name]
                held = self._held.get(name)
                if held is None or held.ino != f.ino:
                    plan.append((name, f, None))
                elif f.size < held.size:
                    raise errors.CommitError(
                        f"{d / name}: shrank from {held.size} to {f.size} bytes"
                        " (RocksDB files must only grow)"
                    )
                else:
                    plan.append((name, f, held))
            total = sum(f.size - (h.size if h else 0) for _, f, h in plan)
            inline = total <= self.config.inline_read_bytes
            for name, f, known in plan:
                held = known
                if held is None:
                    # New, or a new file under a recorded name (its number reused after
                    # a restore): the create unlinks the old one.
                    old = self._held.pop(name, None)
                    held = _Held(rec.record_create(d / name), f.fd, f.ino, 0)
                    self._held[name] = held
                    f.new = False  # The descriptor is held from here on.
                    if old is not None:
                        os.close(old.fd)
                if f.size > held.size:
                    await self._copy(held.fnode, f.fd, held.size, f.size, inline)
                    held.size = f.size
            for name in _WHOLE:
                content = snap.whole.get(name)
                if content is not None and self._whole.get(name) != content:
                    _record_property(rec, d / name, content)
                    self._whole[name] = content
            for name in sorted(set(self._held) - set(snap.files), key=_order):
                gone = self._held.pop(name)
                rec.record_remove(d / name)
                os.close(gone.fd)
        finally:
            snap.close_new()

    def _pread(self, fd: int, n: int, at: int) -> bytes:
        with self._threads:
            if self._db is None:
                raise errors.CommitError(f"{self.directory}: the store was destroyed")
            return os.pread(fd, n, at)

    async def _copy(self, fnode: int, fd: int, start: int, end: int, inline: bool) -> None:
        step = self.config.write_chunk
        for at in range(start, end, step):
            n = min(step, end - at)
            data = (
                os.pread(fd, n, at) if inline else await asyncio.to_thread(self._pread, fd, n, at)
            )
            if len(data) != n:
                raise errors.CommitError(f"fnode {fnode}: read {len(data)} of {n} bytes at {at}")
            self.recorder.record_write_at(fnode, data, at)


def _record_property(rec: rl.Recorder, path: pathlib.Path, content: str) -> None:
    """Record ``path``'s whole content as one op (a property).

    A log that ends anywhere holds one version or the other, whole: the files
    RocksDB replaces by renaming (``CURRENT``, ``IDENTITY``, rocksdict's config)
    must never replay missing, or RocksDB refuses to open ("While creating a new
    Db, wal_dir contains existing log file"), as the cut-anywhere test found.
    """
    rec.record_property(path, content)


def _enforce(opts: rocksdict.Options, cfg: RocksDBStoreConfig) -> None:
    """The settings recording by directory diff relies on (see the module's docs)."""
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    # A recycled WAL is overwritten from its start: not an append-only file.
    opts.set_recycle_log_file_num(0)
    # Memory-mapped writes grow files ahead of their data (zero-filled tails).
    opts.set_allow_mmap_writes(False)
    # Direct I/O writes aligned blocks and trims the padding when a file closes.
    opts.set_use_direct_io_for_flush_and_compaction(False)
    # Archived WALs would move into a subdirectory the diff does not follow.
    opts.set_wal_ttl_seconds(0)
    opts.set_wal_size_limit_mb(0)
    # A commit whose WAL record is cut short in the log replays as the commit before.
    opts.set_wal_recovery_mode(rocksdict.DBRecoveryMode.point_in_time())
    opts.set_max_manifest_file_size(cfg.max_manifest_file_size)
    opts.set_keep_log_file_num(2)
