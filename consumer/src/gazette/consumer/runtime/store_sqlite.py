"""SQLiteStore: an embedded SQLite database whose every file write is recorded into the recovery log.

Gazette's ``consumer/store-sqlite`` keeps the same promise with a C++ VFS and a
RocksDB of pages; here an :mod:`apsw` VFS sits between SQLite and the local
disk and hands each mutation to the shard's
:class:`~gazette.consumer.recoverylog.Recorder` as it happens:

* **writes** become ``write`` ops; contiguous writes of one file (a WAL frame's
  header and its page, a commit's run of frames) are merged and recorded at
  the next sync, truncate, close or write elsewhere, so a commit of *n* pages
  is a handful of ops, not *2n*;
* **truncation to zero** and the **restart of a WAL** (a new header written at
  offset 0) record the file as created anew, which lets everything written to
  it before fall out of the log's live segments;
* **truncation to a shorter, non-zero size** (the main file shrinking after a
  ``VACUUM``) records the file anew with the bytes it keeps: ops have no
  truncate, and a file replayed longer than SQLite left it would be wrong for
  the main database (WAL files may be longer: SQLite ignores frames whose salt
  does not match, so those shrinks are not recorded);
* **deletes** become ``unlink`` ops; ``sync`` flushes merged writes (the disk
  itself is never synced: the log is what makes a commit durable).

The database runs ``journal_mode=WAL`` with ``locking_mode=EXCLUSIVE`` (the
WAL index lives in process memory, so there is no ``-shm`` file to record),
``synchronous=FULL`` (SQLite syncs the WAL at every commit, which is when
merged writes reach the recorder) and ``wal_autocheckpoint=0``: the WAL is
never copied back into the database file, which would record every page a
second time. A commit records its WAL frames and nothing else.

**Commits.** :meth:`SQLiteStore.start_commit` first queues a recorder barrier
on the transaction's appends (``wait_for``), then writes the Checkpoint into
the ``gazette_checkpoint`` table of the same database and commits: the WAL
frames of that commit are recorded *behind* the barrier (the log is FIFO), and
the commit is the barrier after them. A new primary plays the log back and
SQLite finds the last commit whose frames made it into the log; frames of a
transaction that never committed are ignored by SQLite itself.

**Compaction.** The WAL only grows, and all of it stays live in the log. Once
the bytes recorded since the last compaction exceed ``compact_ratio`` times
the database file (and at least ``compact_min_bytes``), the store
``VACUUM INTO``s a fresh ``db-<n>.sqlite`` (recorded as a new file), switches
the one-line ``CURRENT`` file to it (recorded as a property: one op holds it
whole) and
removes the old database and its WAL: from then on hints start at the new
file, and ``gazctl shards prune`` can drop the fragments before it. Played
back to any point, the log gives either the old database with its whole WAL
or the new one.

Applications use :attr:`SQLiteStore.db`, a normal :class:`apsw.Connection`,
**on the event loop thread** (the recorder appends from there): inside a
consumer transaction a SQL transaction is always open, and the store commits
it. Usage::

    async def new_store(self, shard):
        store = await store_sqlite.SQLiteStore.open(shard, "CREATE TABLE IF NOT EXISTS ...")
        return store

    async def consume_message(self, shard, store, envelope, publisher):
        store.db.execute("INSERT INTO counts(word, n) VALUES(?, 1) "
                         "ON CONFLICT(word) DO UPDATE SET n = n + 1", (word,))
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import threading
from collections.abc import Collection
from typing import Any

import apsw

from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer.runtime import errors, interfaces

__all__ = ["RecordingVFS", "SQLiteStore", "SQLiteStoreConfig"]

log = logging.getLogger(__name__)

#: The file naming the current database file (one line), in the recorded directory.
CURRENT = "CURRENT"
#: The database file of a new store (compaction makes ``db-<n>.sqlite`` files).
FIRST_DB = "db-000000.sqlite"

_WAL_MAGIC = (0x377F0682, 0x377F0683)
#: Merged writes are recorded once they reach this size, even before a sync.
_MAX_PENDING = 4 << 20

_CHECKPOINT_DDL = """
CREATE TABLE IF NOT EXISTS gazette_checkpoint (
    rowid INTEGER PRIMARY KEY DEFAULT 0 CHECK (rowid = 0),
    checkpoint BLOB
);
INSERT OR IGNORE INTO gazette_checkpoint(rowid, checkpoint) VALUES (0, x'');
"""


@dataclasses.dataclass(frozen=True)
class SQLiteStoreConfig:
    """How a :class:`SQLiteStore` runs its database and compacts its log."""

    #: Compact once the bytes recorded since the last compaction exceed this
    #: multiple of the database's size...
    compact_ratio: float = 4.0
    #: ...and at least this many bytes (small databases compact rarely).
    compact_min_bytes: int = 64 << 20
    #: SQLite's page cache, in KiB (``PRAGMA cache_size=-N``).
    cache_kib: int = 32 << 10
    #: Page size of a new database (``PRAGMA page_size``). A commit records every
    #: page it changed, whole: small pages record less for scattered small
    #: updates, large ones suit scans of big rows.
    page_size: int = 4096


class RecordingVFS(apsw.VFS):
    """A VFS that passes file I/O to the default VFS and records mutations under a directory.

    One per store (its name is unique); files outside the recorder's
    directory cannot be opened, and temporary files (no name) are not recorded.
    """

    _counter = 0
    _counter_lock = threading.Lock()

    def __init__(self, recorder: rl.Recorder) -> None:
        with RecordingVFS._counter_lock:
            RecordingVFS._counter += 1
            n = RecordingVFS._counter
        self.vfs_name = f"gazette-recorded-{os.getpid()}-{n}"
        self.recorder = recorder
        self.root = str(recorder.directory) + os.sep
        self.thread = threading.get_ident()
        self.pending: _RecordedFile | None = None
        #: Bytes recorded as writes since the counter was last reset (compaction's trigger).
        self.recorded_bytes = 0
        #: Cleared when the store is destroyed: closing the database then writes
        #: (a WAL checkpoint) only to a directory that is about to be removed.
        self.recording = True
        super().__init__(self.vfs_name, "")

    def check_thread(self) -> None:
        if self.recording and threading.get_ident() != self.thread:
            raise errors.ConsumerError(
                "SQLiteStore: the database was written from another thread; use store.db "
                "only on the event loop thread, where the recorder appends"
            )

    def flush(self) -> None:
        """Record the merged writes of the file that has some."""
        f, self.pending = self.pending, None
        if f is not None:
            f.flush_pending()

    def xOpen(self, name: str | apsw.URIFilename | None, flags: list[int]) -> apsw.VFSFile:
        path = name.filename() if isinstance(name, apsw.URIFilename) else name
        if name is None or path is None:
            return apsw.VFSFile("", name, flags)
        if not path.startswith(self.root):
            raise errors.ConsumerError(f"SQLiteStore: {path} is outside {self.root}")
        return _RecordedFile(self, path, name, flags)

    def xDelete(self, name: str, syncdir: bool) -> None:
        self.check_thread()
        self.flush()
        super().xDelete(name, False)
        rec = self.recorder
        if self.recording and rec.rel(name) in rec.fsm.links:
            rec.record_remove(name)


class _RecordedFile(apsw.VFSFile):
    """A file of the store's directory: its mutations are recorded as they happen."""

    def __init__(
        self,
        vfs: RecordingVFS,
        path: str,
        name: str | apsw.URIFilename,
        flags: list[int],
    ) -> None:
        super().__init__("", name, flags)
        self.vfs = vfs
        self.path = path
        rec = vfs.recorder
        fnode = rec.fsm.links.get(rec.rel(path))
        size = os.stat(path).st_size
        if fnode is None and vfs.recording:
            vfs.check_thread()
            vfs.flush()
            if size:
                raise errors.ConsumerError(
                    f"SQLiteStore: {path} holds {size} bytes the recovery log never recorded"
                )
            fnode = rec.record_create(path)
        self.fnode = fnode or 0
        self.size = size
        self.buf = bytearray()
        self.buf_at = 0

    def flush_pending(self) -> None:
        if self.buf and self.vfs.recording:
            data, at = bytes(self.buf), self.buf_at
            self.buf.clear()
            self.vfs.recorder.record_write_at(self.fnode, data, at)
            self.vfs.recorded_bytes += len(data)

    def _recreate(self) -> None:
        """Record the file as new (an unlink of the old fnode and a create)."""
        vfs = self.vfs
        if vfs.pending is self:
            vfs.pending = None
        self.buf.clear()
        self.fnode = vfs.recorder.record_create(self.path)

    def xWrite(self, data: bytes, offset: int) -> None:
        vfs = self.vfs
        vfs.check_thread()
        super().xWrite(data, offset)
        if not vfs.recording:
            return
        if vfs.pending is not self:
            vfs.flush()
        if (
            offset == 0
            and len(data) >= 4
            and int.from_bytes(data[:4], "big") in _WAL_MAGIC
            and self.size > 0
        ):
            # SQLite restarts its WAL in place rather than truncating it: the frames
            # after the new header are dead (their salts no longer match).
            self._recreate()
            self.size = 0
        if self.buf and offset == self.buf_at + len(self.buf):
            self.buf += data
        else:
            self.flush_pending()
            self.buf_at = offset
            self.buf += data
        vfs.pending = self
        self.size = max(self.size, offset + len(data))
        if len(self.buf) >= _MAX_PENDING:
            vfs.flush()

    def xTruncate(self, newsize: int) -> None:
        vfs = self.vfs
        vfs.check_thread()
        vfs.flush()
        super().xTruncate(newsize)
        if newsize >= self.size or not vfs.recording:
            return
        self.size = newsize
        self._recreate()
        if newsize and not self.path.endswith("-wal"):
            # Rewrite the kept prefix into the new fnode, a MiB at a time.
            step = 1 << 20
            for at in range(0, newsize, step):
                chunk = self.xRead(min(step, newsize - at), at)
                vfs.recorder.record_write_at(self.fnode, chunk, at)
                vfs.recorded_bytes += len(chunk)

    def xSync(self, flags: int) -> None:
        # Durability is the log's: record what is merged, and never wait for a disk.
        self.vfs.check_thread()
        self.vfs.flush()

    def xClose(self) -> None:
        vfs = self.vfs
        if vfs.pending is self:
            vfs.flush()
        super().xClose()


class SQLiteStore:
    """A :class:`~gazette.consumer.runtime.interfaces.Store` of one SQLite database, recorded."""

    def __init__(
        self,
        recorder: rl.Recorder,
        bootstrap_sql: str = "",
        config: SQLiteStoreConfig | None = None,
    ) -> None:
        self.recorder = recorder
        self.config = config or SQLiteStoreConfig()
        self.bootstrap_sql = bootstrap_sql
        self.directory = pathlib.Path(recorder.directory)
        self.vfs = RecordingVFS(recorder)
        self._db: apsw.Connection | None = None
        #: The current database file's name.
        self.db_name = FIRST_DB
        #: Compactions done (a counter for tests and metrics).
        self.compactions = 0
        self._open()

    @classmethod
    async def open(
        cls,
        shard: interfaces.Shard,
        bootstrap_sql: str = "",
        config: SQLiteStoreConfig | None = None,
    ) -> SQLiteStore:
        """The store of ``shard``, whose spec must name a recovery log."""
        recorder = shard.recorder
        if recorder is None:
            raise errors.ConsumerError(
                f"shard {shard.id}: SQLiteStore needs a recovery log "
                "(ShardSpec.recovery_log_prefix is empty)"
            )
        return cls(recorder, bootstrap_sql, config)

    @property
    def db(self) -> apsw.Connection:
        """The connection; a SQL transaction is open whenever a consumer transaction is."""
        if self._db is None:
            raise errors.ConsumerError("SQLiteStore is destroyed")
        return self._db

    def _current(self) -> str:
        """The name of the current database file (``CURRENT`` names it; none yet: the first)."""
        try:
            name = (self.directory / CURRENT).read_text().strip()
        except FileNotFoundError:
            return FIRST_DB
        if not name or "/" in name:
            raise errors.ConsumerError(f"{self.directory / CURRENT}: not a database name: {name!r}")
        return name

    def _open(self) -> None:
        current = self._current()
        # Files of a compaction that did not reach its switch, or of the database it
        # replaced: only the current database and its WAL are the store.
        keep = {current, current + "-wal", CURRENT}
        for path in sorted(self.directory.iterdir()):
            if path.name not in keep and path.is_file():
                self.vfs.xDelete(str(path), False)
        db = apsw.Connection(
            str(self.directory / current),
            flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE,
            vfs=self.vfs.vfs_name,
        )
        for pragma in (
            f"PRAGMA page_size={self.config.page_size}",
            "PRAGMA locking_mode=EXCLUSIVE",
            "PRAGMA journal_mode=WAL",
            "PRAGMA synchronous=FULL",
            # The WAL is never copied back into the database file (that would record
            # every page twice): it grows until compaction makes a fresh database.
            "PRAGMA wal_autocheckpoint=0",
            f"PRAGMA cache_size=-{self.config.cache_kib}",
        ):
            _run(db, pragma)
        self._db, self.db_name = db, current
        with db:
            if self.bootstrap_sql:
                _run(db, self.bootstrap_sql)
            _run(db, _CHECKPOINT_DDL)
        self.vfs.flush()
        db.execute("BEGIN")

    async def restore_checkpoint(self, shard: interfaces.Shard) -> pc.Checkpoint:
        row = self.db.execute("SELECT checkpoint FROM gazette_checkpoint").fetchone()
        cp = pc.Checkpoint()
        if row and row[0]:
            cp.ParseFromString(bytes(row[0]))
        return cp

    def start_commit(
        self,
        shard: interfaces.Shard,
        checkpoint: pc.Checkpoint,
        wait_for: Collection[AsyncOperation],
    ) -> AsyncOperation:
        rec, db = self.recorder, self.db
        # Everything recorded from here on queues behind the transaction's appends.
        rec.barrier(list(wait_for))
        db.execute(
            "UPDATE gazette_checkpoint SET checkpoint = ?", (checkpoint.SerializeToString(),)
        )
        db.execute("COMMIT")
        self.vfs.flush()
        done = rec.barrier()
        if self._should_compact():
            self.compact()
        db = self.db
        if not db.in_transaction:
            db.execute("BEGIN")

        async def recorded() -> None:
            await done

        return shard.run_operation("sqlite commit (recorded)", recorded())

    def _should_compact(self) -> bool:
        size = (self.directory / self.db_name).stat().st_size
        threshold = max(self.config.compact_min_bytes, int(self.config.compact_ratio * size))
        return self.vfs.recorded_bytes > threshold

    def compact(self) -> None:
        """Copy the database into a fresh recorded file and switch ``CURRENT`` to it.

        Call between transactions (``start_commit`` does, by its policy). The log
        holds: the new file, whole; then ``CURRENT`` (a property: the switch,
        in one op); then the old database and its WAL removed. Played back to any point before the switch, the old database
        and WAL are whole; after it, the new file is.
        """
        db, rec = self.db, self.recorder
        if db.in_transaction:
            db.execute("COMMIT")
        old = self.db_name
        gen = int(old[3:9]) + 1 if old.startswith("db-") else 1
        new = f"db-{gen:06d}.sqlite"
        # VACUUM INTO reads through the WAL: the copy holds every commit.
        _run(db, "VACUUM INTO ?", (str(self.directory / new),))
        self.vfs.flush()
        # The switch: CURRENT is recorded as a property (one op holding it whole), so
        # no replay ever finds it missing or half written.
        current = self.directory / CURRENT
        nxt = self.directory / (CURRENT + ".next")
        nxt.write_text(new + "\n")
        os.replace(nxt, current)
        rec.record_property(current, new + "\n")
        # Closing checkpoints the old WAL into the old file: writes nobody needs.
        self.vfs.recording = False
        try:
            db.close()
        finally:
            self.vfs.recording = True
            self._db = None
        for name in (old, old + "-wal"):
            path = self.directory / name
            path.unlink(missing_ok=True)
            if rec.rel(path) in rec.fsm.links:
                rec.record_remove(path)
        self.vfs.recorded_bytes = 0
        self.compactions += 1
        log.info("compacted %s into %s", self.directory / old, new)
        self._open()

    async def destroy(self) -> None:
        db, self._db = self._db, None
        self.vfs.flush()
        self.vfs.recording = False
        if db is not None:
            try:
                db.close()
            except apsw.Error as e:
                log.warning("closing %s: %s", self.directory / self.db_name, e)
        self.vfs.unregister()


def _run(db: apsw.Connection, sql: str, bindings: tuple[Any, ...] = ()) -> None:
    """Run every statement of ``sql`` (apsw runs statements lazily, as rows are read)."""
    for _ in db.execute(sql, bindings):
        pass
