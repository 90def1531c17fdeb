"""The broker server: Gazette's ``protocol.Journal`` service over grpc.aio.

A broker process announces itself in etcd, runs the allocator, keeps a
*replica* for each journal assigned to it, and serves the seven RPCs of
``protocol.Journal`` through a native front door. Appends, replication, spools
and flow control run in the Rust data plane (``broker/dataplane``), which
:mod:`native` connects to this control plane; the other RPCs are served here.

Modules:

* :mod:`config` — flags / environment of ``python -m gazette.broker`` (frozen dataclasses).
* :mod:`errors` — the error hierarchy and its single mapping to gRPC outcomes.
* :mod:`native` — the data plane's host: what it publishes to the plane, the
  plane's outbox (completed fragments, asks) it drains.
* :mod:`resolver` — journal -> route, status, local replica, invalidation.
* :mod:`replica` — per-journal fragment index, its refresh daemon, and the
  primary's acknowledgement fence (:mod:`fences`).
* :mod:`service` — the Service: wiring of replicas, resolution, peers and the
  answers to the data plane's asks.
* :mod:`api` — the gRPC edge; :mod:`metadata_api` — List, Apply, ListFragments,
  FragmentStoreHealth (Append, Replicate and Read are the data plane's).
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
    config,
    errors,
    metrics,
    native,
    process,
    replica,
    resolver,
    service,
)

__all__ = [
    "api",
    "config",
    "errors",
    "metrics",
    "native",
    "process",
    "replica",
    "resolver",
    "service",
]
