"""SQLStore: a shard's state and checkpoint in PostgreSQL, fenced against older primaries.

Gazette's ``consumer/store_sql.go``, on psycopg 3 (asyncio). The application
writes its state through :meth:`SQLStore.transaction` (a connection inside the
current consumer transaction's SQL transaction, begun by its first statement);
:meth:`SQLStore.start_commit` adds the Checkpoint to that SQL transaction and
commits it, so state and checkpoint are committed together or not at all.

Fencing: the checkpoint row of a shard carries a ``fence`` counter.
:meth:`SQLStore.restore_checkpoint` increments it (and commits); every later
commit updates the row only ``WHERE fence = <the value we set>``. A primary
that lost its assignment but still runs (a "zombie") thus can no longer
commit once a new primary restored: its UPDATE matches no row and its
transaction rolls back (:class:`FenceError`). If the zombie committed first,
the new primary's fence increment waits for that row lock and then reads the
zombie's checkpoint: either way exactly one of them commits each input.

Pipelining: the next consumer transaction runs while the previous one
commits, so the store keeps two connections and alternates: the committing
transaction owns one, the next one writes on the other. A statement of the
next transaction touching a row the committing one changed waits for that
commit (row locks). Reads on the new connection do not see the previous
transaction's writes until it committed; applications cache what they wrote
(as Gazette's examples do) rather than read it back.

The table, created by the application or :meth:`SQLStore.create_table`::

    CREATE TABLE gazette_checkpoints (
        shard_fqn  TEXT    PRIMARY KEY NOT NULL,  -- "<etcd prefix>/items/<shard id>"
        fence      INTEGER NOT NULL,
        checkpoint BYTEA   NOT NULL               -- the protobuf Checkpoint
    );
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import Any

import psycopg

from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import errors, interfaces

__all__ = [
    "TABLE_DDL",
    "DependencyFailed",
    "FenceError",
    "SQLStore",
    "connect",
    "ensure_schema",
]

TABLE_DDL = """
CREATE TABLE IF NOT EXISTS gazette_checkpoints (
    shard_fqn  TEXT    PRIMARY KEY NOT NULL,
    fence      INTEGER NOT NULL,
    checkpoint BYTEA   NOT NULL
)
"""


class FenceError(errors.CommitError):
    """Another primary restored the shard since this store did: it may not commit."""

    def __init__(self, shard_fqn: str, fence: int) -> None:
        super().__init__(
            f"{shard_fqn}: checkpoint fence was updated (ie, by a new primary); ours was {fence}"
        )
        self.shard_fqn = shard_fqn
        self.fence = fence


DependencyFailed = errors.DependencyFailed


async def connect(dsn: str) -> psycopg.AsyncConnection[Any]:
    """A connection to ``dsn`` (outside any transaction until its first statement)."""
    try:
        return await psycopg.AsyncConnection.connect(dsn)
    except psycopg.Error as e:
        raise errors.ConfigError(f"connecting to PostgreSQL: {e}") from e


#: The advisory lock under which :func:`ensure_schema` runs (any constant of ours).
_SCHEMA_LOCK = 0x6761_7A65_7474_65  # "gazette"


async def ensure_schema(dsn: str, *ddl: str) -> None:
    """Run ``gazette_checkpoints``' DDL and the application's ``ddl`` in one transaction.

    Shards of one application start together, and PostgreSQL's ``CREATE TABLE IF
    NOT EXISTS`` run concurrently can still fail on its catalog's unique index: a
    transaction-scoped advisory lock makes them take turns.
    """
    async with await connect(dsn) as conn:
        try:
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            await conn.execute(TABLE_DDL)
            for statement in ddl:
                await conn.execute(statement)
            await conn.commit()
        except psycopg.Error as e:
            raise errors.ConfigError(f"creating the store's tables: {e}") from e


class SQLStore:
    """A :class:`~gazette.consumer.runtime.interfaces.Store` in PostgreSQL."""

    def __init__(
        self, fqn: str, current: psycopg.AsyncConnection[Any], spare: psycopg.AsyncConnection[Any]
    ) -> None:
        self.fqn = fqn
        self._current = current
        self._spare = spare
        self.fence = 0

    @classmethod
    async def open(cls, dsn: str, shard: interfaces.Shard) -> SQLStore:
        """A store of ``shard`` on the database at ``dsn`` (the table must exist)."""
        a = await connect(dsn)
        try:
            b = await connect(dsn)
        except BaseException:
            await a.close()
            raise
        return cls(shard.fqn, a, b)

    @staticmethod
    async def create_table(conn: psycopg.AsyncConnection[Any]) -> None:
        """Create ``gazette_checkpoints`` if it doesn't exist (in ``conn``'s transaction)."""
        await conn.execute(TABLE_DDL)

    async def transaction(self) -> psycopg.AsyncConnection[Any]:
        """The connection of the current consumer transaction.

        Its first statement begins the SQL transaction that :meth:`start_commit`
        commits; the previous transaction commits meanwhile on the other one.
        """
        return self._current

    async def restore_checkpoint(self, shard: interfaces.Shard) -> pc.Checkpoint:
        conn = self._current
        try:
            await conn.execute(
                "UPDATE gazette_checkpoints SET fence = fence + 1 WHERE shard_fqn = %s",
                (self.fqn,),
            )
            cur = await conn.execute(
                "SELECT fence, checkpoint FROM gazette_checkpoints WHERE shard_fqn = %s",
                (self.fqn,),
            )
            row = await cur.fetchone()
        except psycopg.Error as e:
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()
            raise errors.CommitError(f"{self.fqn}: restoring the checkpoint: {e}") from e
        cp = pc.Checkpoint()
        if row is None:
            self.fence = 0
        else:
            self.fence = int(row[0])
            cp.ParseFromString(bytes(row[1]))
        # Commit the fence now (re-writing the same checkpoint): from here on, an
        # older primary's commits match no row.
        await self.start_commit(shard, cp, ())
        return cp

    def start_commit(
        self,
        shard: interfaces.Shard,
        checkpoint: pc.Checkpoint,
        wait_for: Collection[AsyncOperation],
    ) -> AsyncOperation:
        conn = self._current
        # The next transaction writes on the other connection while this one commits.
        self._current, self._spare = self._spare, conn
        value = checkpoint.SerializeToString(deterministic=True)
        return shard.run_operation("sql commit", self._commit(conn, value, wait_for))

    async def _commit(
        self,
        conn: psycopg.AsyncConnection[Any],
        value: bytes,
        wait_for: Collection[AsyncOperation],
    ) -> None:
        try:
            await interfaces.await_dependencies(wait_for, self.fqn)
            if self.fence == 0:
                await conn.execute(
                    "INSERT INTO gazette_checkpoints (shard_fqn, fence, checkpoint)"
                    " VALUES (%s, 1, %s)",
                    (self.fqn, value),
                )
                self.fence = 1
            else:
                cur = await conn.execute(
                    "UPDATE gazette_checkpoints SET checkpoint = %s"
                    " WHERE shard_fqn = %s AND fence = %s",
                    (value, self.fqn, self.fence),
                )
                if cur.rowcount == 0:
                    raise FenceError(self.fqn, self.fence)
            await conn.commit()
        except BaseException as e:
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()
            if isinstance(e, psycopg.Error):
                raise errors.CommitError(f"{self.fqn}: committing: {e}") from e
            raise

    async def destroy(self) -> None:
        for conn in (self._current, self._spare):
            with contextlib.suppress(psycopg.Error):
                await conn.close()
