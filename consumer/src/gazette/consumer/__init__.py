"""Gazette consumers: stateful applications over journals, exactly once.

Subpackages:

* :mod:`gazette.consumer.protocol` — the ``consumer.Shard`` protocol (ShardSpec,
  ConsumerSpec, ReplicaStatus, Checkpoint) with its validation (``pc``);
* :mod:`gazette.consumer.recoverylog` — recovery-log messages (FSMHints);
* :mod:`gazette.consumer.lag` — how far a shard is behind its sources (its primary's
  read-through offsets against write heads), for gazctl and the operator;
* :mod:`gazette.consumer.runtime` — the shard runtime, transactions and stores;
* :mod:`gazette.consumer.testing` — test seams (a real PostgreSQL server).

``python -m gazette.consumer --consumer.app pkg.module:App`` runs an
application (see :mod:`gazette.consumer.runtime`). Messages, their framing,
UUIDs, publisher and sequencer are in :mod:`gazette.message`.
"""
