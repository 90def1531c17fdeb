"""The broker server: Gazette's ``protocol.Journal`` service over grpc.aio.

A broker process announces itself in etcd, runs the allocator, keeps a
*replica* for each journal assigned to it, and serves the seven RPCs of
``protocol.Journal``. Appends run through :mod:`append_fsm`, an explicit state
machine that synchronises a replication :mod:`pipeline` (Replicate streams to
every peer) before streaming content; :mod:`flow_control` bounds append rates.

Modules:

* :mod:`config` — flags / environment of ``python -m gazette.broker`` (frozen dataclasses).
* :mod:`errors` — the error hierarchy and its single mapping to gRPC outcomes.
* :mod:`flow_control` — minimum / maximum append rates.
* :mod:`append_fsm` — the append state machine, which runs its own loop
  (``AppendFSM.run``); :mod:`append_state` holds its states, constants and
  ``Deps``, and :mod:`append_content` its content phase.
* :mod:`pipeline` — a primary's Replicate streams to its peers.
* :mod:`resolver` — journal -> route, status, local replica, invalidation.
* :mod:`replica` — per-journal spool / pipeline slots; index refresh, pulse and
  flush daemons; recovery of a journal whose unpersisted tail was lost.
* :mod:`service` — the Service: wiring of replicas, resolution, peers and the
  FSM's collaborators.
* :mod:`api` — the gRPC edge and the data RPCs (Append, Replicate, Read);
  :mod:`metadata_api` — List, Apply, ListFragments, FragmentStoreHealth;
  :mod:`read_api` — a local Read's content from spools and stores, in large
  chunks read one ahead in worker threads.
* :mod:`process` — a whole broker process (etcd lease, allocator, serving,
  bounded drain and persisting on SIGTERM).
* :mod:`metrics` — Prometheus metrics (served at ``/debug/metrics`` by
  ``gazette.broker.http_gateway``).
* :mod:`testing` — :class:`~gazette.broker.server.testing.InProcessCluster`,
  brokers in the caller's event loop (a test seam).

Usage::

    from gazette.broker.server import config, process
    cfg = config.parse(["--etcd.address", "http://127.0.0.1:2379", "--broker.port", "8080"])
    process.run(cfg)          # what `python -m gazette.broker` does
"""

from gazette.broker.server import (
    api,
    append_fsm,
    config,
    errors,
    flow_control,
    metrics,
    pipeline,
    process,
    replica,
    resolver,
    service,
)

__all__ = [
    "api",
    "append_fsm",
    "config",
    "errors",
    "flow_control",
    "metrics",
    "pipeline",
    "process",
    "replica",
    "resolver",
    "service",
]
