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
* :mod:`append_fsm` — the append state machine.
* :mod:`pipeline` — a primary's Replicate streams to its peers.
* :mod:`resolver` — journal -> route, status, local replica, invalidation.
* :mod:`replica` — per-journal spool / pipeline slots, index refresh and pulse daemons.
* :mod:`service` — the Service: replicas, resolution, peers, the FSM's collaborators.
* :mod:`api` — the gRPC servicer of the seven RPCs.
* :mod:`process` — a whole broker process (etcd lease, allocator, serving, graceful exit).
* :mod:`metrics` — Prometheus metrics (served at ``/debug/metrics`` by
  ``gazette.broker.http_gateway``).

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
