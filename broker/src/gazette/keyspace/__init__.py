"""KeySpace: a local, decoded mirror of an etcd prefix, and Gazette's checked apply.

Gazette keeps all of its shared state in etcd under one root prefix
(``--etcd.prefix``, default ``/gazette/cluster``): journal or shard specs under
``<root>/items/``, members under ``<root>/members/``, assignments under
``<root>/assign/``. Every broker and consumer holds a :class:`KeySpace`: it
loads the prefix once, then follows a watch of it, applying changes in small
batches, decoding each value with a caller's decoder and keeping the result
sorted by key. The allocator and the servers read it and are told of updates
by observers; an RPC that wrote to etcd waits with
:meth:`KeySpace.wait_for_revision` until its own write is mirrored.

:func:`connect` dials etcd as every Gazette process configures it
(:class:`EtcdConfig`: ``--etcd.address``, one or several members over http,
https or a Unix socket, TLS client certificates, an etcd user whose token is
renewed as it expires; flags in :mod:`gazette.keyspace.options`, the channel
in :mod:`gazette.keyspace.channel`).

:func:`apply_changes` is the one checked transaction behind the broker's and
the consumer's Apply RPCs and the Kubernetes operator: puts and deletes of
``<root>/items/<name>``, each guarded by an expected mod revision.

Key types: :class:`KeySpace`, :class:`KeySpaceConfig`, :class:`KeyValue`,
:class:`Event`, :class:`WatchResponse`, :class:`Change`, :class:`ApplyResult`,
:class:`EtcdConfig`; errors in :mod:`gazette.keyspace.errors`; a real etcd for
tests in :mod:`gazette.keyspace.testing`.

Usage::

    from gazette.broker.protocol import protocol_pb2
    from gazette import keyspace

    def decode(key: str, value: bytes) -> object:
        return protocol_pb2.JournalSpec.FromString(value)

    client = await keyspace.connect(keyspace.EtcdConfig(address="http://localhost:2379"))
    ks = keyspace.KeySpace("/gazette/cluster", decode)
    await ks.load(client)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(ks.watch(client))
        result = await keyspace.apply_changes(
            client, ks.root, [("a/journal", spec.SerializeToString(), 0)]
        )
        await ks.wait_for_revision(result.revision)
        print(ks.search("/gazette/cluster/items/a/journal"))
"""

from gazette.keyspace import errors, options
from gazette.keyspace.apply import (
    ANY_REVISION,
    MUST_NOT_EXIST,
    ApplyResult,
    Change,
    apply_changes,
    item_key,
)
from gazette.keyspace.etcd import connect, reauthenticate
from gazette.keyspace.key_space import KeySpace, KeySpaceConfig, WatchResponse
from gazette.keyspace.key_values import (
    Decoder,
    Event,
    EventType,
    KeyValue,
    prefix_range_end,
)
from gazette.keyspace.options import DEFAULT_ADDRESS, EtcdConfig

__all__ = [
    "ANY_REVISION",
    "DEFAULT_ADDRESS",
    "MUST_NOT_EXIST",
    "ApplyResult",
    "Change",
    "Decoder",
    "EtcdConfig",
    "Event",
    "EventType",
    "KeySpace",
    "KeySpaceConfig",
    "KeyValue",
    "WatchResponse",
    "apply_changes",
    "connect",
    "errors",
    "item_key",
    "options",
    "prefix_range_end",
    "reauthenticate",
]
