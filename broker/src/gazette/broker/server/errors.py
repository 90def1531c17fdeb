"""Errors of the broker server, and the one place they become gRPC outcomes.

Hierarchy::

    BrokerServerError                 base of everything raised here
    ├── StreamError                   the client's request stream was malformed
    │   ├── UnexpectedEOF             append stream ended without its commit chunk
    │   ├── ExpectedEOF               a message arrived after the commit chunk
    │   ├── ExpectedContentChunk      a later message carried a journal name
    │   └── RegisterUpdateWithEmptyAppend
    ├── FlowControlUnderflow          client didn't sustain the minimum append rate
    ├── MessageTooLarge               a request over --broker.max-grpc-recv-size
    ├── PipelineError                 a replication peer failed or disagreed
    ├── ResolutionError               header from a foreign cluster / process
    │   └── ResolverStopped           this broker is stopping: it serves no local replica
    ├── Cancelled                     the client went away mid-RPC
    ├── ReplicaStopped                the local replica was shut down under the RPC
    └── LeaseInDoubt                  etcd unreachable past our lease: no writes served
        └── CutOff                    no peer answers: we gave our journals up

Application outcomes (journal not found, wrong offset, ...) are never
exceptions: they travel as a ``protocol.Status`` in the response. Exceptions
become gRPC errors through :func:`grpc_status_of`, the one mapping:

=================================================  ======================
exception                                          gRPC code
=================================================  ======================
``CancelledError``, :class:`Cancelled`             ``CANCELLED``
``TimeoutError``                                   ``DEADLINE_EXCEEDED``
``pb.AuthorizationError`` (a refused token)        ``UNAUTHENTICATED``
:class:`MessageTooLarge`                           ``RESOURCE_EXHAUSTED``
:class:`PipelineError`, :class:`LeaseInDoubt`,     ``UNAVAILABLE``
:class:`ResolverStopped`, :class:`ReplicaStopped`,
a spool write that failed (a stalled or full disk)
an etcd ``INVALID_ARGUMENT`` (e.g. a txn too big)  ``INVALID_ARGUMENT``
a gRPC error of a peer                             the peer's code
anything else (validation, stream framing, ...)    ``UNKNOWN``
=================================================  ======================

Gazette returns plain Go errors, which reach clients as ``UNKNOWN`` with the
error text; we keep that for validation and framing errors, so Go clients see
the same thing from us as from a Go broker, and give a specific code where a
client acts on it (retry, or shrink its request): a broker that is stopping, or
whose replica stopped under the RPC, answers ``UNAVAILABLE`` (Gazette: an
``UNKNOWN`` text) so that a client retries on the journal's new route, as it
would if the broker were gone. Details are always short
text: :func:`describe` renders a gRPC error as ``CODE: details``, never as the
multi-line ``AioRpcError`` repr (which a tester found relayed to clients).
"""

from __future__ import annotations

import asyncio
import re

import grpc

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.broker.fragment.errors import SpoolWriteError
from gazette.broker.protocol import dial


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


class MessageTooLarge(BrokerServerError):
    """A request message is larger than ``--broker.max-grpc-recv-size``.

    Were grpc core to enforce the limit, it would reset the stream while the
    client still writes it, and grpcio's asyncio client then reports its own
    ``INTERNAL: Internal error from Core`` instead of our status. So the broker
    checks sizes itself, drains the client's stream, and answers with this.
    """

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} of {size} bytes is larger than --broker.max-grpc-recv-size ({limit} bytes)"
        )
        self.size = size
        self.limit = limit


class PipelineError(BrokerServerError):
    """A replication peer failed, or answered in a way the primary can't accept."""

    def __init__(self, message: str, *, peer: str = "") -> None:
        super().__init__(f"replication peer {peer} failed: {message}" if peer else message)
        self.peer = peer


class ResolutionError(BrokerServerError):
    """A request header doesn't belong to this cluster or process."""


class ResolverStopped(ResolutionError):
    """This broker is stopping: it no longer serves its local replicas."""

    def __init__(self) -> None:
        super().__init__("resolver has stopped serving local replicas")


class Cancelled(BrokerServerError):
    """The RPC's client went away (or a pulse ran out of time) before it finished."""

    def __init__(self) -> None:
        super().__init__("context canceled")


class ReplicaStopped(BrokerServerError):
    """The local replica of a journal was shut down while an RPC used it."""

    def __init__(self, journal: str) -> None:
        super().__init__(f"replica of {journal} was stopped")
        self.journal = journal


#: Ends the message of an append that failed after its commit went out: some members
#: may hold it committed, and the route's next primary goes on from their content.
OUTCOME_UNKNOWN = (
    "; its commit was sent, so it may still be in the journal (a retry may append it twice)"
)

#: Ends the message of an append that failed before its commit went out (a peer had
#: already failed): nothing of it was committed anywhere, so it is not in the journal.
NOT_COMMITTED = " (before the commit was sent)"


class Unfenced(BrokerServerError):
    """An append every member committed could not be acknowledged: its fence stayed low.

    The append *is* in the journal (it will be read back at ``[begin, end)``),
    but the primary could not raise the journal's acknowledgement fence in
    etcd (see gazette.broker.server.fences) to cover it, so it does not
    acknowledge it. A client that retries appends it again.
    """

    def __init__(self, journal: str, begin: int, end: int, why: str) -> None:
        super().__init__(
            f"append to {journal} was committed at [{begin}, {end}) and is in the journal,"
            f" but is not acknowledged: its acknowledgement fence could not be raised ({why})"
        )


class LeaseInDoubt(BrokerServerError):
    """This broker's etcd lease may have expired (etcd unreachable): it serves no writes.

    Its assignments may already be another broker's; appending or replicating
    now could fork the journal. Clients see UNAVAILABLE and retry.
    """

    def __init__(
        self, message: str = "broker's etcd lease may have expired (etcd unreachable); retry"
    ) -> None:
        super().__init__(message)


class CutOff(LeaseInDoubt):
    """No other broker answers this one (see gazette.broker.server.isolation): it gave
    its lease and journals up, and proxies nothing (the call would hang). Clients see
    UNAVAILABLE and retry, best through another broker."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"this broker is cut off from the others ({why}); retry through another broker"
        )


# The repr of a grpc error (``grpc.aio.AioRpcError``, ``grpc._channel._InactiveRpcError``
# and kin), as ``str(e)`` gives it: several lines, and a debug string that may hold
# unescaped quotes. Group 1 is the code's name, group 2 the details.
_RPC_ERROR_REPR = re.compile(
    r"<\w+ of RPC that terminated with:\s*status = StatusCode\.(\w+)\s*"
    r'details = "(.*?)"(?:\s*debug_error_string = ".*?")?\s*>',
    re.DOTALL,
)


def _without_reprs(text: str) -> str:
    return _RPC_ERROR_REPR.sub(lambda m: f"{m.group(1)}: {m.group(2)}", text)


def describe(e: BaseException) -> str:
    """Short text of an exception for messages and logs: a gRPC error as ``CODE: details``.

    Pipelines wrap their peers' exceptions with it (``PipelineError(f"send:
    {describe(e)}")``): ``str()`` of a grpc error is a multi-line repr with a
    debug string, which must never reach a client. Reprs already embedded in
    another exception's text are rewritten the same way.
    """
    if isinstance(e, grpc.RpcError) and callable(getattr(e, "code", None)):
        details = e.details() if callable(getattr(e, "details", None)) else None
        return describe_status(e.code(), details)
    return _without_reprs(str(e)) or type(e).__name__


def describe_status(code: grpc.StatusCode, details: str | None) -> str:
    """A call's final status as short text, ``CODE: details`` (see :func:`describe`)."""
    name = code.name if isinstance(code, grpc.StatusCode) else str(code)
    if code == grpc.StatusCode.INTERNAL and details == _CORE_LOST_STATUS:
        details = _CORE_LOST_STATUS_SAID
    return f"{name}: {details}" if details else name


# What grpc-python's asyncio client reports for a stream that broke while a write of
# ours was under way (see dial.rpc_code): the peer went away, or ended the stream with
# a status of its own that is then lost (grpc/grpc#36066). Said so, not relayed as is.
_CORE_LOST_STATUS = dial.CORE_TRANSPORT_FAILURE
_CORE_LOST_STATUS_SAID = (
    "the stream broke while we wrote to it: the peer went away, or ended it with an"
    " answer gRPC lost (grpc/grpc#36066); the peer's log says which"
)


def grpc_status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """Map an exception escaping an RPC to the gRPC (code, details) to end it with.

    This is the single mapping used by every handler of the servicer (see the
    module docstring for the table). Details never carry a Python repr.
    """
    if isinstance(exc, asyncio.CancelledError | Cancelled):
        return grpc.StatusCode.CANCELLED, "context canceled"
    if isinstance(exc, TimeoutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded"
    if isinstance(exc, grpc.aio.AioRpcError):
        code = dial.rpc_code(exc)
        return code, exc.details() or code.name
    details = describe(exc)
    if isinstance(exc, pb.AuthorizationError):
        # Gazette answers every refusal so, a missing capability included.
        return grpc.StatusCode.UNAUTHENTICATED, details
    if isinstance(exc, MessageTooLarge):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, details
    if isinstance(
        exc, PipelineError | LeaseInDoubt | ResolverStopped | ReplicaStopped | SpoolWriteError
    ):
        return grpc.StatusCode.UNAVAILABLE, details
    if isinstance(exc, keyspace.errors.EtcdError) and exc.code == "INVALID_ARGUMENT":
        return grpc.StatusCode.INVALID_ARGUMENT, details
    return grpc.StatusCode.UNKNOWN, details
