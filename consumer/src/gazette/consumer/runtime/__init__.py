"""The consumer runtime: shards of an application, served with exactly-once transactions.

Gazette's ``consumer`` package. An application (the :class:`Application`
protocol: ``new_store``, ``new_message``, ``consume_message``,
``finalize_txn``) runs in one or more processes started with
``python -m gazette.consumer --consumer.app pkg.module:App``. Its shards are
ShardSpecs under the application's etcd prefix; the generic allocator assigns
each to a primary process and its hot standbys, spread over zones.

A primary reads its source journals, sequences messages (duplicates and
rolled-back transactions dropped, :mod:`gazette.message`), hands committed ones
to the application within consumer transactions bounded by the spec's
min/max durations, and commits each transaction's state together with its
Checkpoint (read-through offsets, producer states, ACK intents) in the
application's store; the ACKs of what it published go out only after that
commit, and again after a fail-over. A store fences older primaries when it
restores, so exactly one transaction commits per input.

A shard whose spec names a recovery log keeps its store in a local directory
recorded into that journal (:mod:`gazette.consumer.recoverylog`): standbys
follow the log, and a promoted one hands it off and serves from its replay
(:mod:`~.recovery`). Each process serves ``consumer.Shard`` (:mod:`~.shard_api`).

Modules:

* :mod:`~.interfaces` — the Application, Store and Shard protocols;
* :mod:`~.transaction` — the transaction state machine;
* :mod:`~.shard` — one assigned shard (standby, primary, status in etcd);
* :mod:`~.service` — the local shards, following etcd assignments;
* :mod:`~.process` — the process: flags (:mod:`~.config`), etcd session, drain;
* :mod:`~.shards` — shards as allocator items (decoder, consistency);
* :mod:`~.recovery` — recovery-log playback, hand-off and hints in etcd;
* :mod:`~.shard_api` — the ``consumer.Shard`` gRPC service;
* :mod:`~.resolver` — a shard's local store, or its primary's endpoint (for the
  application's own RPCs);
* :mod:`~.checkpoints` — Checkpoint building and its Go JSON;
* stores: :mod:`~.store_sql` (PostgreSQL, fenced), :mod:`~.store_json_file`
  (recorded into the recovery log when the shard has one), :mod:`~.store_sqlite`
  (an embedded SQLite database recorded into the recovery log through a VFS),
  :mod:`~.store_rocksdb` (an embedded RocksDB recorded by a consistent directory
  diff at each commit).

Usage::

    from gazette import message
    from gazette.consumer import runtime
    from gazette.consumer.runtime import store_json_file

    class Counter:
        async def new_store(self, shard):   # the spec names a recovery log
            rec = shard.recorder
            return store_json_file.JSONFileStore(rec.directory, {}, rec)
        def new_message(self, spec):
            return message.JSONMessage()
        async def consume_message(self, shard, store, env, publisher):
            # Acknowledgements of producers' transactions are delivered too (as in
            # Gazette): they are not records of the input.
            if message.get_flags(env.message.get_uuid()) == message.Flags.ACK_TXN:
                return
            store.state["n"] = store.state.get("n", 0) + 1
        async def finalize_txn(self, shard, store, publisher):
            pass

    # python -m gazette.consumer --consumer.app mymodule:Counter --etcd.prefix /gazette/consumers/counter
"""

from gazette.consumer.runtime.interfaces import (
    DEFER,
    Application,
    BeginFinisher,
    Consumed,
    ServiceRegistrar,
    Shard,
    Store,
)

__all__ = [
    "DEFER",
    "Application",
    "BeginFinisher",
    "Consumed",
    "ServiceRegistrar",
    "Shard",
    "Store",
]
