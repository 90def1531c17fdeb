"""The application contract: what a consumer application and its store provide.

Gazette's ``consumer/interfaces.go``, as typed Python protocols. The runtime
(:mod:`gazette.consumer.runtime`) calls an :class:`Application` for each shard
it serves as primary:

* :meth:`Application.new_store` once per primary assignment, then
  :meth:`Store.restore_checkpoint` (a remote store fences older primaries here);
* :meth:`Application.consume_message` once per committed message read, inside a
  consumer transaction; it publishes with ``publisher.publish_uncommitted``;
* :meth:`Application.finalize_txn` when the transaction closes: flush what it
  holds in memory into the store's transaction;
* :meth:`Store.start_commit`: commit the store's transaction together with the
  :class:`~gazette.consumer.protocol.Checkpoint`, but only after every
  operation in ``wait_for`` (the shard's in-flight appends) succeeded.

Optional hooks: :class:`BeginFinisher` (``begin_txn`` / ``finished_txn``), and
:class:`ServiceRegistrar` (the application's own gRPC services, served on the
process's port beside ``consumer.Shard``).

A :class:`Shard` is the application's handle on the shard it serves.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Collection, Coroutine
from typing import Any, Protocol, runtime_checkable

from gazette import message
from gazette.broker import protocol as pb
from gazette.broker.client import AppendService, AsyncOperation, JournalClient
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer.runtime import errors

__all__ = [
    "DEFER",
    "Application",
    "BeginFinisher",
    "Consumed",
    "ServiceRegistrar",
    "Shard",
    "Store",
    "await_dependencies",
]


class Consumed(enum.Enum):
    """What :meth:`Application.consume_message` may return besides ``None``."""

    #: The message is not consumed now: the transaction closes without it, and
    #: the next transaction starts with it. Returned for the first message of a
    #: transaction, it fails the shard (nothing would ever progress).
    DEFER_TO_NEXT_TRANSACTION = "defer"


DEFER = Consumed.DEFER_TO_NEXT_TRANSACTION


class Shard(Protocol):
    """The application's handle on one shard served here as primary."""

    @property
    def id(self) -> str:
        """The shard id (``ShardSpec.id``)."""

    @property
    def fqn(self) -> str:
        """The etcd key of its ShardSpec, ``{prefix}/items/{id}``: unique across applications."""

    @property
    def spec(self) -> pc.ShardSpec:
        """The current ShardSpec (it may change while the shard runs)."""

    @property
    def stopping(self) -> asyncio.Event:
        """Set once the shard's assignment is lost or the process stops."""

    @property
    def journal_client(self) -> JournalClient:
        """The process's broker client."""

    @property
    def append_service(self) -> AppendService:
        """The shard's appends: everything appended through it is awaited before a commit."""

    @property
    def recorder(self) -> rl.Recorder | None:
        """Records the store's files into the shard's recovery log (None without one)."""

    def progress(self) -> tuple[dict[str, int], dict[str, int]]:
        """(read-through offsets of committed transactions, publish-at offsets of their ACKs)."""

    def run_operation(self, name: str, coro: Coroutine[Any, Any, None]) -> AsyncOperation:
        """Run ``coro`` in the shard's task group; the operation resolves with its outcome.

        Stores use it for their commits: the task belongs to the shard (never
        fire-and-forget) and is cancelled with it.
        """


class Store(Protocol):
    """Where a shard's state and its checkpoint are committed, atomically together."""

    async def restore_checkpoint(self, shard: Shard) -> pc.Checkpoint:
        """The last committed Checkpoint (an empty one if none).

        Remote stores install their write fence here: no earlier instance of
        the shard can commit afterwards. Called again when the runtime restarts
        reading at a transaction boundary.
        """

    def start_commit(
        self, shard: Shard, checkpoint: pc.Checkpoint, wait_for: Collection[AsyncOperation]
    ) -> AsyncOperation:
        """Start committing this transaction's state with ``checkpoint``.

        The commit must not happen before every operation of ``wait_for``
        succeeded, and fails if one of them failed. Never called while the
        previous commit is unresolved; ``consume_message`` of the next
        transaction may run while this one commits.
        """

    async def destroy(self) -> None:
        """Release the store's resources; it is not used again."""


class Application(Protocol):
    """A consumer application: what ``python -m gazette.consumer --consumer.app`` runs."""

    async def new_store(self, shard: Shard) -> Store:
        """A Store for ``shard``, made once per primary assignment."""

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        """An empty message of the type ``spec`` (a source journal) holds."""

    async def consume_message(
        self, shard: Shard, store: Store, envelope: message.Envelope, publisher: message.Publisher
    ) -> Consumed | None:
        """Consume one committed message within the current transaction.

        Transaction acknowledgements reach the application too, as in Gazette: an
        ACK (``message.get_flags(uuid) == message.Flags.ACK_TXN``) carries no
        document of the producer's and is skipped by applications that count or
        sum what they read (see the runtime's module example and ``examples/``).
        """

    async def finalize_txn(self, shard: Shard, store: Store, publisher: message.Publisher) -> None:
        """The transaction closes: move in-memory state into the store's transaction."""


@runtime_checkable
class BeginFinisher(Protocol):
    """Optional hooks around each transaction of an :class:`Application`."""

    async def begin_txn(self, shard: Shard, store: Store) -> None:
        """Called before the first message of a transaction (it may wait, e.g. on a semaphore)."""

    def finished_txn(self, shard: Shard, store: Store, op: AsyncOperation) -> None:
        """Called once the transaction starts committing (``op`` resolves with the
        commit) or has failed (``op`` already holds the error). Only for transactions that began."""


@runtime_checkable
class ServiceRegistrar(Protocol):
    """Optional: an application that serves gRPC services of its own.

    ``register_services`` is called once, before the process's gRPC server
    starts; ``resolver`` (a :class:`~gazette.consumer.runtime.resolver.Resolver`)
    maps a shard to its local store or to the endpoint of its primary, and
    holds the process's journal client.
    """

    def register_services(self, server: Any, resolver: Any) -> None:
        """Add the application's servicers to ``server`` (a ``grpc.aio.Server``)."""


async def await_dependencies(wait_for: Collection[AsyncOperation], where: str) -> None:
    """Wait for every operation a commit depends on; raise DependencyFailed if one failed.

    For :meth:`Store.start_commit` implementations, before they commit.
    """
    for op in wait_for:
        await op.wait()
        if op.error is not None:
            raise errors.DependencyFailed(
                f"{where}: not committing: an append it waited for failed: {op.error}"
            ) from op.error
