"""The ``protocol.Journal`` gRPC service: the seven RPCs of a broker.

Every handler first verifies the RPC's bearer token for the capability it
needs (LIST, APPLY, READ, APPEND, REPLICATE; ListFragments and
FragmentStoreHealth need READ), then validates its request at the edge
(``pb.validate``), resolves the journal where it has one (a journal the
token's selector doesn't select is not found), and either serves locally,
proxies to the right peer (Append to the primary, Read and ListFragments to
a member, unless ``do_not_proxy``) under a token of its own narrowed to that
journal, or answers a ``Status`` with a valid header. As in Gazette, an RPC
ends when its token expires (but a Replicate stream, once it holds the
replica's spool, does not). Exceptions become gRPC errors in one place
(:func:`errors.grpc_status_of`; a refused token is ``UNAUTHENTICATED``);
errors of a proxied call are relayed with the peer's code and text.

Gazette references: ``broker/append_api.go``, ``replicate_api.go``,
``read_api.go``, ``list_apply_api.go``, ``fragments_api.go``,
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

from gazette import keyspace, task
from gazette.broker import protocol as pb
from gazette.broker.fragment import errors as frag_errors
from gazette.broker.fragment import spool
from gazette.broker.protocol import auth, dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import (
    append_fsm,
    errors,
    metadata_api,
    metrics,
    read_api,
    replica,
    resolver,
    service,
)

log = logging.getLogger(__name__)

# How long a Replicate stream that read EOF waits to learn whether its RPC was
# cancelled instead (see _replicate).
_EOF_GRACE = 0.05

T = TypeVar("T")

MAX_JOURNALS_PER_LIST_RESPONSE = 25
DEFAULT_FRAGMENTS_PAGE_LIMIT = 1000
DELETE_PROBE_TIMEOUT = 60.0
# How long an append refused for an oversized message keeps reading (and dropping)
# the client's remaining messages before answering. Answering while the client
# still writes makes grpcio's asyncio client report its own "INTERNAL: Internal
# error from Core" instead of our status (test_oversized_chunk_is_resource_exhausted).
DRAIN_TIMEOUT = 10.0
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


class _SizeGuard:
    """Passes a stream of requests through, failing at the first one over ``limit`` bytes.

    The failure is kept in :attr:`error` (it may be raised inside grpc's own
    task, when the stream is proxied), and the stream under it stays readable
    so the caller can drain it.
    """

    def __init__(self, source: AsyncIterator[pb.AppendRequest], limit: int) -> None:
        self._source = source
        self._limit = limit
        self.error: errors.MessageTooLarge | None = None

    def __aiter__(self) -> _SizeGuard:
        return self

    async def __anext__(self) -> pb.AppendRequest:
        if self.error is not None:
            raise self.error
        req = await anext(self._source)
        size = req.ByteSize()
        if size > self._limit:
            self.error = errors.MessageTooLarge("AppendRequest", size, self._limit)
            raise self.error
        return req


async def _drain(source: AsyncIterator[Any]) -> None:
    """Read and drop what is left of ``source``, for at most :data:`DRAIN_TIMEOUT`."""
    with contextlib.suppress(TimeoutError, grpc.RpcError, errors.BrokerServerError):
        async with asyncio.timeout(DRAIN_TIMEOUT):
            async for _ in source:
                pass


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
        *,
        bound_by_claims: bool = True,
        on_refusal: Callable[[], Awaitable[None]] | None = None,
    ) -> T:
        """Verify the RPC's token for ``require``, then ``run(claims, context)``.

        With ``bound_by_claims`` the RPC is cut (DEADLINE_EXCEEDED) when its
        claims expire, as Gazette bounds the request's context by them; ``run``
        then gets a context whose writes the cut doesn't interrupt half-way.
        ``on_refusal`` runs before a refused token is answered.
        """
        metrics.server_started.inc(op)
        try:
            try:
                claims = self.svc.auth.verify(context.invocation_metadata(), require)
            except pb.AuthorizationError:
                if on_refusal is not None:
                    await on_refusal()
                raise
            if bound_by_claims and claims.expires_at is not None:
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

    # -- Append -------------------------------------------------------------------------

    async def Append(
        self,
        request_iterator: AsyncIterator[pb.AppendRequest],
        context: grpc.aio.ServicerContext[pb.AppendRequest, pb.AppendResponse],
    ) -> pb.AppendResponse:
        out = metrics.Outcome()
        return await self._edge(
            "Append",
            context,
            auth.Capability.APPEND,
            lambda claims, _ctx: self._append(request_iterator, claims, out),
            out,
            # Answered while it still writes, grpcio's asyncio client (the HTTP
            # gateway's, for one) reports "Internal error from Core" rather than
            # why (test_a_selector_limited_token_sees_only_its_journals): drain first.
            on_refusal=lambda: _drain(request_iterator),
        )

    async def _append(
        self,
        requests: AsyncIterator[pb.AppendRequest],
        claims: auth.Claims,
        out: metrics.Outcome,
    ) -> pb.AppendResponse:
        it = aiter(requests)
        try:
            first = await anext(it)
        except StopAsyncIteration:
            raise errors.StreamError("append stream: unexpected EOF") from None
        pb.validate(first)
        if not first.journal:
            # An AppendRequest without a journal is a valid content chunk, so
            # validation alone lets it through and it then resolves as
            # JOURNAL_NOT_FOUND. The first message must name its journal: reject
            # it with the text Read gives an empty journal (test_bad_input).
            try:
                pb.validate_journal(first.journal)
            except pb.ValidationError as e:
                raise e.within("Journal") from None
        guard = _SizeGuard(it, self.svc.config.max_message_size)
        fsm = append_fsm.AppendFSM(
            self.svc, first, clock=self.svc.clock, authorized=_authorizer(claims)
        )
        total, delayed = await fsm.run(guard)
        res = fsm.resolved

        if fsm.state == append_fsm.State.PROXY:
            assert isinstance(res, resolver.Resolution)
            try:
                return await self._proxy_append(first, res, guard)
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                # grpc cancels a call whose request iterator raised: that is our
                # guard's verdict, unless this task itself is being cancelled.
                task = asyncio.current_task()
                if guard.error is None or (task is not None and task.cancelling()):
                    raise
            await _drain(it)
            raise guard.error
        if fsm.state == append_fsm.State.FINISHED:
            assert res is not None and fsm.client_fragment is not None
            metrics.write_head.labels(fsm.client_fragment.journal).set(fsm.client_fragment.end)
            resp = pb.AppendResponse(status=pb.OK, total_chunks=total, delayed_chunks=delayed)
            resp.header.CopyFrom(res.header)
            resp.commit.CopyFrom(fsm.client_fragment)
            resp.registers.CopyFrom(fsm.registers)
            return resp
        assert fsm.state == append_fsm.State.ERROR
        if res is not None and res.status != pb.OK:
            out.set(res.status)
            resp = pb.AppendResponse(status=_st(res.status))
            resp.header.CopyFrom(res.header)
            if res.status == pb.REGISTER_MISMATCH:
                resp.registers.CopyFrom(fsm.registers)
            if res.status == pb.FRAGMENT_STORE_UNHEALTHY:
                resp.store_health_error = str(fsm.err)
            return resp
        if guard.error is not None:
            # The FSM rolled back; answer once the client is done writing.
            await _drain(it)
            raise guard.error
        raise fsm.err or errors.BrokerServerError("append failed without a cause")

    async def _proxy_append(
        self,
        first: pb.AppendRequest,
        res: resolver.Resolution,
        rest: AsyncIterator[pb.AppendRequest],
    ) -> pb.AppendResponse:
        self.svc.check_reachable()
        primary, endpoint = service.pick_member(res, require_primary=True)
        fwd = pb.AppendRequest()
        fwd.CopyFrom(first)
        fwd.header.CopyFrom(res.header)
        committed = False

        async def requests() -> AsyncIterator[pb.AppendRequest]:
            nonlocal committed
            yield fwd
            async for req in rest:
                committed = committed or not req.content
                yield req

        call = self.svc.peers.stub(endpoint).Append(
            requests(),
            metadata=self.svc.peer_metadata(auth.Capability.APPEND, first.journal) or None,
        )
        # A primary cut off by a partition neither answers nor fails: once etcd gives
        # the journal another primary, stop waiting on the old one (the client retries).
        moved = asyncio.Event()
        watch = asyncio.create_task(
            self.svc.resolver.wait_primary_moved(first.journal, primary, moved),
            name=f"proxied append primary watch {first.journal}",
        )
        try:
            resp, interrupted = await task.race(call, moved)
        finally:
            watch.cancel()
        if interrupted or resp is None:
            call.cancel()
            where = f"{primary.zone}/{primary.suffix}"
            raise errors.PipelineError(
                f"the primary of {first.journal} moved away from {where} while this append "
                "was proxied to it"
                + (errors.OUTCOME_UNKNOWN if committed else errors.NOT_COMMITTED)
            )
        assert isinstance(resp, pb.AppendResponse)
        return resp

    # -- Replicate ----------------------------------------------------------------------

    async def Replicate(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[pb.ReplicateRequest],
        context: grpc.aio.ServicerContext[pb.ReplicateRequest, pb.ReplicateResponse],
    ) -> None:
        out = metrics.Outcome()
        await self._edge(
            "Replicate",
            context,
            auth.Capability.REPLICATE,
            lambda claims, ctx: self._replicate(ctx, claims, out),
            out,
            bound_by_claims=False,  # Only until the spool is ours: see _replicate.
        )

    async def _replicate(
        self,
        context: grpc.aio.ServicerContext[pb.ReplicateRequest, pb.ReplicateResponse],
        claims: auth.Claims,
        out: metrics.Outcome,
    ) -> None:
        req = await context.read()
        if req is grpc.aio.EOF:
            raise errors.StreamError("unexpected EOF")
        assert isinstance(req, pb.ReplicateRequest)
        pb.validate(req)
        if not req.HasField("header"):
            raise errors.StreamError("expected first ReplicateRequest to have Header")
        self.svc.check_lease()  # A replica past its lease must not help an old primary commit.

        # Gazette bounds the wait for the spool by the token's expiry, but not the
        # stream that follows: a pipeline outlives the token that opened it.
        # (Nor, here, a write: the deadline covers resolving and waiting alone.)
        deadline = None if claims.expires_at is None else _loop_deadline(claims.expires_at)
        refusal: pb.ReplicateResponse | None = None
        async with asyncio.timeout_at(deadline):
            while True:
                res = await self.svc.resolve(
                    req.proposal.journal,
                    may_proxy=False,
                    require_primary=False,
                    proxy_header=req.header,
                    authorized=_authorizer(claims),
                )
                if res.status != pb.OK:
                    refusal = pb.ReplicateResponse(status=_st(res.status), header=res.header)
                    break
                if not pb.route_equivalent(res.header.route, req.header.route):
                    refusal = pb.ReplicateResponse(status=pb.WRONG_ROUTE, header=res.header)
                    break
                if res.replica is None:
                    raise errors.ReplicaStopped(req.proposal.journal)
                slot = res.replica.spool_slot
                got, changed = await task.race(
                    slot.get(), res.invalidated, give_back=slot.put_nowait
                )
                if not changed:
                    assert got is not None
                    sp = got
                    break
        if refusal is not None:
            out.set(refusal.status)
            await context.write(refusal)
            return

        rep = res.replica
        assert rep is not None
        watch = _RouteWatch(self.svc, req.proposal.journal, req.header.route, res, rep)
        try:
            async with asyncio.TaskGroup() as tg:
                watcher = tg.create_task(watch.run(), name=f"route watch {rep.journal}")
                try:
                    await self._replicate_with(context, req, res, rep, sp, watch)
                finally:
                    watcher.cancel()
        except asyncio.CancelledError:
            if not watch.cut:
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            raise errors.ReplicaStopped(
                f"{rep.journal}: the route of this replication stream is no longer the"
                " journal's (its primary was replaced)"
            ) from None
        except BaseExceptionGroup as group:
            # The task group wraps the stream's own failure (a stalled spool write, say):
            # unwrapped, it is answered with its status and message, not as UNKNOWN.
            if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
                raise group.exceptions[0] from None
            raise

    async def _replicate_with(
        self,
        context: grpc.aio.ServicerContext[pb.ReplicateRequest, pb.ReplicateResponse],
        req: pb.ReplicateRequest,
        res: resolver.Resolution,
        rep: replica.Replica,
        sp: spool.Spool,
        watch: _RouteWatch,
    ) -> None:
        """Serve a Replicate stream that holds ``rep``'s spool ``sp`` (see _replicate)."""
        broken = True  # Until the primary's EOF: see Replica.return_spool.
        # Until the first content, proposals are the pipeline's synchronisation, whose
        # rolls are stored at once (see Replica.storing_at_once); rolls amid appends
        # wait out the persister's replica delay, as the primary normally stores first.
        synchronising = True
        # What this stream tells of the journal (see Spool.confirm): the primary sends a
        # proposal only once every member accepted the previous one, so a proposal
        # confirms the last one we accepted (``accepted``). When the primary rolls us at
        # the end we told it in a PROPOSAL_MISMATCH (``reported_end``), the route goes on
        # from our content, held back until then (``adopt_at``; Replica.settle_held).
        accepted: pb.Fragment | None = None
        reported_end = -1
        adopt_at = -1
        try:
            header: pb.Header | None = res.header
            while True:
                is_proposal = req.HasField("proposal")
                synchronising = synchronising and is_proposal
                if is_proposal and accepted is not None:
                    sp.confirm(accepted.end)
                    await sp.record_confirmed(wait=False)
                    rep.settle_held(
                        adopt_at if adopt_at >= 0 else sp.spec.begin, adopt=adopt_at >= 0
                    )
                    accepted, adopt_at = None, -1
                with rep.storing_at_once() if synchronising else contextlib.nullcontext():
                    resp = await sp.apply(req, primary=False)
                if is_proposal:
                    if resp.status == pb.OK:
                        accepted = req.proposal
                        if accepted.begin == accepted.end == reported_end:
                            adopt_at = reported_end
                    else:
                        reported_end = resp.fragment.end
                if req.acknowledge:
                    if header is not None:
                        resp.header.CopyFrom(header)  # Only the first response carries it.
                        header = None
                    await context.write(resp)
                elif resp.status != pb.OK:
                    raise errors.PipelineError(f"no ack requested but status != OK: {resp}")
                if watch.changed:
                    raise errors.ReplicaStopped(
                        f"{rep.journal}: the route of this replication stream is no longer"
                        " the journal's (its primary was replaced)"
                    )
                watch.reading = True
                try:
                    nxt = await context.read()
                finally:
                    watch.reading = False
                if nxt is grpc.aio.EOF:
                    # grpc.aio reads a dropped connection (the primary was killed) as
                    # a clean EOF too, and cancels this handler just after (0.1 ms here):
                    # a short wait tells the two apart, so that a broken stream stores
                    # its copy at once (test_a_roll_of_a_pipeline_synchronisation_is_stored_at_once).
                    await asyncio.sleep(_EOF_GRACE)
                    broken = False
                    return
                assert isinstance(nxt, pb.ReplicateRequest)
                req = nxt
                pb.validate(req)
        finally:
            # Whatever ended the stream, uncommitted content is rolled back.
            await rep.return_spool(sp, broken=broken)

    # -- Read ---------------------------------------------------------------------------

    async def Read(  # type: ignore[override]
        self,
        request: pb.ReadRequest,
        context: grpc.aio.ServicerContext[pb.ReadRequest, pb.ReadResponse],
    ) -> None:
        out = metrics.Outcome()
        await self._edge(
            "Read",
            context,
            auth.Capability.READ,
            lambda claims, ctx: self._read(request, ctx, claims, out),
            out,
        )

    async def _read(
        self,
        req: pb.ReadRequest,
        context: grpc.aio.ServicerContext[pb.ReadRequest, pb.ReadResponse],
        claims: auth.Claims,
        out: metrics.Outcome,
    ) -> None:
        pb.validate(req)
        res = await self.svc.resolve(
            req.journal,
            may_proxy=not req.do_not_proxy,
            require_primary=False,
            min_etcd_revision=req.min_etcd_revision,
            proxy_header=req.header if req.HasField("header") else None,
            authorized=_authorizer(claims),
        )
        if res.status != pb.OK:
            out.set(res.status)
            await context.write(pb.ReadResponse(status=_st(res.status), header=res.header))
            return
        assert res.journal_spec is not None
        if not pb.journal_may_read(res.journal_spec):
            out.set(pb.NOT_ALLOWED)
            await context.write(pb.ReadResponse(status=pb.NOT_ALLOWED, header=res.header))
            return
        if not res.is_local:
            await self._proxy_read(req, res, context)
            return
        if res.replica is None:
            raise errors.ReplicaStopped(req.journal)
        await self._serve_read(req, res.header, res.replica.index, context)

    async def _proxy_read(
        self,
        req: pb.ReadRequest,
        res: resolver.Resolution,
        context: grpc.aio.ServicerContext[pb.ReadRequest, pb.ReadResponse],
    ) -> None:
        self.svc.check_reachable()
        _, endpoint = service.pick_member(res, require_primary=False)
        fwd = pb.ReadRequest()
        fwd.CopyFrom(req)
        fwd.header.CopyFrom(res.header)
        call = self.svc.peers.stub(endpoint).Read(
            fwd, metadata=self.svc.peer_metadata(auth.Capability.READ, req.journal) or None
        )
        try:
            while True:
                resp, stopping = await task.race(call.read(), self.svc.stop_proxy_reads)
                if stopping:
                    return  # This broker is shutting down: end the relay with a clean EOF.
                if resp is grpc.aio.EOF:
                    return
                await context.write(resp)
        finally:
            call.cancel()

    async def _serve_read(
        self,
        req: pb.ReadRequest,
        header: pb.Header,
        index_: Any,
        context: grpc.aio.ServicerContext[pb.ReadRequest, pb.ReadResponse],
    ) -> None:
        await read_api.serve_read(req, header, index_, self.svc.registry, context.write)

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


class _RouteWatch:
    """Ends a Replicate stream once its replica's route is not the stream's any more.

    A primary cut off from etcd keeps its streams to its peers, and each holds
    a peer's spool: without this, it would go on committing there after its
    lease, and the journal's next primary would wait for that spool (for the
    whole partition: the chaos suite's etcd-only cut). When the replica's
    resolution is invalidated and the route it resolves to differs, a read the
    stream is waiting on is cancelled (``cut``); a stream busy applying a
    request stops before its next read (``changed``). Cancelling only reads
    keeps a spool from being left half-way through a request.
    """

    def __init__(
        self,
        svc: service.Service,
        journal: str,
        route: pb.Route,
        res: resolver.Resolution,
        rep: replica.Replica,
    ) -> None:
        self._svc = svc
        self._journal = journal
        self._route = route
        self._res = res
        self._rep = rep
        self._task = asyncio.current_task()
        self.reading = False
        self.changed = False
        self.cut = False

    async def run(self) -> None:
        res = self._res
        while True:
            await res.invalidated.wait()
            try:
                res = await self._svc.resolve(self._journal, may_proxy=False, require_primary=False)
            except errors.BrokerServerError:
                break
            if (
                res.status != pb.OK
                or res.replica is not self._rep
                or not pb.route_equivalent(res.header.route, self._route)
            ):
                break
        self.changed = True
        if self.reading and self._task is not None:
            self.cut = True
            self._task.cancel()


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
