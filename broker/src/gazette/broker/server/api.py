"""The ``protocol.Journal`` RPCs the Python broker serves behind the native front door.

Append, Replicate and Read never reach this service: the data plane serves them
(``broker/dataplane``; the door answers them itself). The rest land here.
Every handler first verifies the RPC's bearer token for the capability it
needs (LIST, APPLY, READ; ListFragments and FragmentStoreHealth need READ),
then validates its request at the edge (``pb.validate``), resolves the
journal where it has one (a journal the token's selector doesn't select is
not found), and either serves locally, proxies to a member (ListFragments,
unless ``do_not_proxy``) under a token of its own narrowed to that journal,
or answers a ``Status`` with a valid header. As in
Gazette, an RPC ends when its token expires. Exceptions become gRPC errors in one place
(:func:`errors.grpc_status_of`; a refused token is ``UNAUTHENTICATED``);
errors of a proxied call are relayed with the peer's code and text.

Gazette references: ``broker/list_apply_api.go``, ``fragments_api.go``,
``fragment_store_health_api.go``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.broker.fragment import errors as frag_errors
from gazette.broker.protocol import auth, dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import (
    errors,
    metadata_api,
    metrics,
    service,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# What Append, Replicate and Read answer should one reach this service (they never do through
# the front door).
_NATIVE_ONLY = "{} is served by the broker's native data plane, on its gRPC port"
MAX_JOURNALS_PER_LIST_RESPONSE = 25
DEFAULT_FRAGMENTS_PAGE_LIMIT = 1000
DELETE_PROBE_TIMEOUT = 60.0
# How long an RPC cut by its token's expiry waits for a write in flight (_WholeWrites).
WRITE_SETTLE_TIMEOUT = 5.0

_EXPECTED_ERRORS = (
    pb.ValidationError,
    pb.AuthorizationError,
    errors.BrokerServerError,
    frag_errors.FragmentError,
    keyspace.errors.KeySpaceError,
    TimeoutError,
)


def core_receive_limit(max_message_size: int) -> int:
    """The ``grpc.max_receive_message_length`` of a broker's gRPC server.

    Larger than ``--broker.max-grpc-recv-size`` (``max_message_size``) on
    purpose: handlers enforce that limit themselves (:class:`errors.MessageTooLarge`)
    so a client gets a clear ``RESOURCE_EXHAUSTED`` rather than a reset stream,
    and a Replicate message carrying a client chunk of exactly the limit (plus a
    few bytes of framing) still reaches its peers. Messages above this hard
    ceiling are refused by grpc core itself, which bounds the memory one message
    can take.
    """
    return max(4 * max_message_size, 64 << 20)


class JournalServicer(pb2_grpc.JournalServicer):
    """Implements ``protocol.Journal`` over a :class:`service.Service`."""

    def __init__(self, svc: service.Service) -> None:
        self.svc = svc

    # -- The edge -----------------------------------------------------------------------

    async def _edge(
        self,
        op: str,
        context: grpc.aio.ServicerContext[Any, Any],
        require: int,
        run: Callable[[auth.Claims, Any], Awaitable[T]],
        out: metrics.Outcome,
    ) -> T:
        """Verify the RPC's token for ``require``, then ``run(claims, context)``.

        The RPC is cut (DEADLINE_EXCEEDED) when its claims expire, as Gazette
        bounds the request's context by them; ``run`` then gets a context whose
        writes the cut doesn't interrupt half-way.
        """
        metrics.server_started.inc(op)
        try:
            claims = self.svc.auth.verify(context.invocation_metadata(), require)
            if claims.expires_at is not None:
                stream = _WholeWrites(context)
                try:
                    async with asyncio.timeout_at(_loop_deadline(claims.expires_at)):
                        result = await run(claims, stream)
                finally:
                    await stream.settle()
            else:
                result = await run(claims, context)
        except grpc.aio.AioRpcError as e:
            # A proxied call failed: relay the peer's outcome.
            metrics.server_completed.inc(op, "<error>")
            log.warning("proxied %s RPC failed: %s", op, e.details())
            code = dial.rpc_code(e)
            if code == grpc.StatusCode.CANCELLED and not context.cancelled():
                # The broker proxied to cancelled it (it was stopping), not our client,
                # who would not retry a CANCELLED (twice in the chaos suite's SIGTERM runs).
                code = grpc.StatusCode.UNAVAILABLE
            await context.abort(code, e.details() or code.name)
            raise  # Not reached: abort raises.
        except _EXPECTED_ERRORS as e:
            metrics.server_completed.inc(op, "<error>")
            code, details = errors.grpc_status_of(e)
            if code != grpc.StatusCode.CANCELLED:
                log.warning("served %s RPC failed: %s", op, details)
            await context.abort(code, details)
            raise  # Not reached: abort raises.
        except asyncio.CancelledError:
            metrics.server_completed.inc(op, "<error>")
            raise
        except Exception as e:
            # Anything else must end here too: an exception left to grpc makes it
            # answer with the exception's repr and, when the client is already gone
            # (a cancelled Replicate stream), log "Exception not handled by
            # _handle_exceptions" as it is cancelled while sending that answer.
            metrics.server_completed.inc(op, "<error>")
            if context.cancelled():
                raise asyncio.CancelledError from e  # The client went away: nobody to answer.
            code, details = errors.grpc_status_of(e)
            log.exception("served %s RPC failed unexpectedly: %s", op, details)
            await context.abort(code, details)
            raise  # Not reached: abort raises.
        metrics.server_completed.inc(op, out.status)
        return result

    # -- Append and Replicate -------------------------------------------------------------

    async def Append(
        self,
        request_iterator: AsyncIterator[pb.AppendRequest],
        context: grpc.aio.ServicerContext[pb.AppendRequest, pb.AppendResponse],
    ) -> pb.AppendResponse:
        """Never reached through the front door, which hands appends to the data plane."""
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, _NATIVE_ONLY.format("Append"))
        raise AssertionError("not reached: abort raises")

    async def Replicate(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[pb.ReplicateRequest],
        context: grpc.aio.ServicerContext[pb.ReplicateRequest, pb.ReplicateResponse],
    ) -> None:
        """Never reached through the front door, which hands replication to the data plane."""
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, _NATIVE_ONLY.format("Replicate"))

    async def Read(  # type: ignore[override]
        self,
        request: pb.ReadRequest,
        context: grpc.aio.ServicerContext[pb.ReadRequest, pb.ReadResponse],
    ) -> None:
        """Never reached through the front door, which hands reads to the data plane."""
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, _NATIVE_ONLY.format("Read"))

    # -- List and Apply -----------------------------------------------------------------

    async def List(  # type: ignore[override]
        self,
        request: pb.ListRequest,
        context: grpc.aio.ServicerContext[pb.ListRequest, pb.ListResponse],
    ) -> None:
        out = metrics.Outcome()
        await self._edge(
            "List",
            context,
            auth.Capability.LIST,
            lambda claims, ctx: metadata_api.list_journals(self.svc, request, claims, ctx),
            out,
        )

    async def Apply(
        self,
        request: pb.ApplyRequest,
        context: grpc.aio.ServicerContext[pb.ApplyRequest, pb.ApplyResponse],
    ) -> pb.ApplyResponse:
        out = metrics.Outcome()
        return await self._edge(
            "Apply",
            context,
            auth.Capability.APPLY,
            lambda claims, _ctx: metadata_api.apply(self.svc, request, claims, out),
            out,
        )

    # -- ListFragments ------------------------------------------------------------------

    async def ListFragments(
        self,
        request: pb.FragmentsRequest,
        context: grpc.aio.ServicerContext[pb.FragmentsRequest, pb.FragmentsResponse],
    ) -> pb.FragmentsResponse:
        out = metrics.Outcome()
        return await self._edge(
            "ListFragments",
            context,
            auth.Capability.READ,
            lambda claims, _ctx: metadata_api.list_fragments(self.svc, request, claims, out),
            out,
        )

    # -- FragmentStoreHealth ------------------------------------------------------------

    async def FragmentStoreHealth(
        self,
        request: pb.FragmentStoreHealthRequest,
        context: grpc.aio.ServicerContext[
            pb.FragmentStoreHealthRequest, pb.FragmentStoreHealthResponse
        ],
    ) -> pb.FragmentStoreHealthResponse:
        out = metrics.Outcome()
        resp = await self._edge(
            "FragmentStoreHealth",
            context,
            auth.Capability.READ,  # Gazette's; a store no spec names needs more (see there).
            lambda _claims, ctx: metadata_api.store_health(
                self.svc, request, ctx.invocation_metadata(), out
            ),
            out,
        )
        if request.check_delete and resp.status == pb.OK:
            # The echo that a delete probe ran: Gazette brokers that predate the
            # probe ignore check_delete and answer OK without one, and clients tell.
            context.set_trailing_metadata(((DELETE_PROBE_TRAILER, "done"),))
        return resp


_st = metadata_api.st
_authorizer = metadata_api.authorizer


class _WholeWrites:
    """The ServicerContext of an RPC its claims' expiry may cut: writes are not cut in half.

    Cancelled in the middle of ``context.write``, grpc keeps the send in flight
    and then can't end the RPC (``abort`` fails with
    GRPC_CALL_ERROR_TOO_MANY_OPERATIONS, and the client hangs:
    test_an_rpc_ends_when_its_token_expires). So each write runs shielded, and
    :meth:`settle` lets an interrupted one finish before the RPC ends.
    Everything else is the context's own.
    """

    __slots__ = ("_context", "_pending")

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self._context = context
        self._pending: asyncio.Future[None] | None = None

    async def write(self, message: Any) -> None:
        pending = self._pending = asyncio.ensure_future(self._context.write(message))
        await asyncio.shield(pending)

    async def settle(self) -> None:
        """Wait (a little) for a write that a cut interrupted."""
        pending, self._pending = self._pending, None
        if pending is None or pending.done():
            return
        with contextlib.suppress(Exception):  # The RPC's outcome is decided elsewhere.
            async with asyncio.timeout(WRITE_SETTLE_TIMEOUT):
                await pending
        if not pending.done():
            pending.cancel()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def _loop_deadline(expires_at: float) -> float:
    """The event loop's time at Unix time ``expires_at``."""
    return asyncio.get_running_loop().time() + (expires_at - time.time())


#: Trailing metadata of a FragmentStoreHealth whose delete probe ran.
DELETE_PROBE_TRAILER = "gazette-delete-probe"
