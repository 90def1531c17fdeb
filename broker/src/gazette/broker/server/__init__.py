"""The broker server: Gazette's ``protocol.Journal`` service over grpc.aio.

A broker process announces itself in etcd, runs the allocator, keeps a
*replica* for each journal assigned to it, and serves the seven RPCs of
``protocol.Journal``. Appends run through :mod:`append_fsm`, an explicit state
machine that synchronises a replication pipeline (Replicate streams to every
peer) before streaming content; :mod:`flow_control` bounds append rates.

Modules:

* :mod:`config` — flags / environment of ``python -m gazette.broker`` (frozen dataclasses).
* :mod:`errors` — the error hierarchy and its single mapping to gRPC outcomes.
* :mod:`flow_control` — minimum / maximum append rates.
* :mod:`append_fsm` — the append state machine.

Usage::

    from gazette.broker.server import config
    cfg = config.parse(["--etcd.address", "http://127.0.0.1:2379"])
"""

from gazette.broker.server import append_fsm, config, errors, flow_control

__all__ = ["append_fsm", "config", "errors", "flow_control"]
