"""Errors of the broker server, and the one place they become gRPC outcomes.

Hierarchy::

    BrokerServerError                 base of everything raised here
    ├── StreamError                   the client's request stream was malformed
    │   ├── UnexpectedEOF             append stream ended without its commit chunk
    │   ├── ExpectedEOF               a message arrived after the commit chunk
    │   ├── ExpectedContentChunk      a later message carried a journal name
    │   └── RegisterUpdateWithEmptyAppend
    ├── FlowControlUnderflow          client didn't sustain the minimum append rate
    ├── PipelineError                 a replication peer failed or disagreed
    ├── ResolutionError               header from a foreign cluster / process, or stopping
    ├── Cancelled                     the client went away mid-RPC
    ├── ReplicaStopped                the local replica was shut down under the RPC
    └── LeaseInDoubt                  etcd unreachable past our lease: no writes served

Application outcomes (journal not found, wrong offset, ...) are never
exceptions: they travel as a ``protocol.Status`` in the response. Exceptions
become gRPC errors through :func:`grpc_status_of`: Gazette returns plain Go
errors, which reach clients as ``UNKNOWN`` with the error text, and ends client
cancellation as ``CANCELLED``; request validation failures likewise surface as
``UNKNOWN`` so Go clients see the same thing from us as from a Go broker.
"""

from __future__ import annotations

import asyncio

import grpc


class BrokerServerError(Exception):
    """Base class of broker server errors."""


class StreamError(BrokerServerError):
    """The client's stream of requests broke the RPC's framing rules."""


class UnexpectedEOF(StreamError):
    def __init__(self) -> None:
        super().__init__("unexpected EOF")


class ExpectedEOF(StreamError):
    def __init__(self) -> None:
        super().__init__("expected EOF after empty Content chunk")


class ExpectedContentChunk(StreamError):
    def __init__(self) -> None:
        super().__init__("expected Content chunk")


class RegisterUpdateWithEmptyAppend(StreamError):
    def __init__(self) -> None:
        super().__init__("register modification requires non-empty Append")


class FlowControlUnderflow(BrokerServerError):
    """Raised when an append stream falls below ``--broker.min-append-rate``."""

    def __init__(self) -> None:
        super().__init__("client stream didn't sustain the minimum append data rate")


class PipelineError(BrokerServerError):
    """A replication peer failed, or answered in a way the primary can't accept."""

    def __init__(self, message: str, *, peer: str = "") -> None:
        super().__init__(f"{message} (peer {peer})" if peer else message)
        self.peer = peer


class ResolutionError(BrokerServerError):
    """A request header doesn't belong to this cluster or process."""


class Cancelled(BrokerServerError):
    """The RPC's client went away (or a pulse ran out of time) before it finished."""

    def __init__(self) -> None:
        super().__init__("context canceled")


class ReplicaStopped(BrokerServerError):
    """The local replica of a journal was shut down while an RPC used it."""

    def __init__(self, journal: str) -> None:
        super().__init__(f"replica of {journal} was stopped")
        self.journal = journal


class LeaseInDoubt(BrokerServerError):
    """This broker's etcd lease may have expired (etcd unreachable): it serves no writes.

    Its assignments may already be another broker's; appending or replicating
    now could fork the journal. Clients see UNAVAILABLE and retry.
    """

    def __init__(self) -> None:
        super().__init__("broker's etcd lease may have expired (etcd unreachable); retry")


def grpc_status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """Map an exception escaping an RPC to the gRPC (code, details) to end it with.

    This is the single mapping used by every handler of the servicer.
    """
    if isinstance(exc, asyncio.CancelledError | Cancelled):
        return grpc.StatusCode.CANCELLED, "context canceled"
    if isinstance(exc, TimeoutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded"
    if isinstance(exc, LeaseInDoubt):
        return grpc.StatusCode.UNAVAILABLE, str(exc)
    return grpc.StatusCode.UNKNOWN, str(exc) or type(exc).__name__
