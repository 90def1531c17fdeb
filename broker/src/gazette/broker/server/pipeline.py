"""A primary's replication pipeline (Gazette ``broker/pipeline.go``).

A pipeline holds the primary's spool and one ``Replicate`` stream to every
other route member. ``scatter`` sends a request to every peer and applies it
to the local spool; ``gather_*`` read one response per peer. Appends are
pipelined: the next append streams content while earlier ones still await
acknowledgements, and :meth:`Pipeline.barrier` hands the receive side over in
send order (a chain of futures, each append waiting on its predecessor's).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from gazette.broker import protocol as pb
from gazette.broker.protocol import protocol_pb2 as pb2
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import errors

log = logging.getLogger(__name__)

_OK = pb2.Status.OK  # Enum attributes resolve through Python code: not once per chunk.


class LocalSpool(Protocol):
    @property
    def spec(self) -> pb2.Fragment: ...
    @property
    def registers(self) -> pb2.LabelSet: ...
    async def apply(
        self, req: pb2.ReplicateRequest, *, primary: bool = False
    ) -> pb2.ReplicateResponse: ...


# How long a peer may take to take a Replicate message or to answer one. A peer
# behind a network partition neither fails nor answers (TCP retransmits for many
# minutes): without a bound, an append to it would hang until its client's
# deadline, and its journal with it. Peers answer in milliseconds; a replica whose
# spool disk is stuck fails its write after --broker.spool-write-timeout (10 s).
REPLICATION_TIMEOUT = 15.0

StubFor = Callable[[pb2.ProcessSpec.ID, str], pb2_grpc.JournalStub]
"""Returns a Journal stub dialed to (member id, endpoint)."""


def _id_str(pid: pb2.ProcessSpec.ID) -> str:
    return f"{pid.zone}/{pid.suffix}"


class _Bound:
    """``asyncio.timeout`` that stays in ``waits`` while entered (see Pipeline.interrupt)."""

    __slots__ = ("_timeout", "_waits")

    def __init__(self, waits: set[asyncio.Timeout], delay: float) -> None:
        self._waits = waits
        self._timeout = asyncio.timeout(delay)

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()
        self._waits.add(self._timeout)

    async def __aexit__(self, *exc: Any) -> None:
        self._waits.discard(self._timeout)
        await self._timeout.__aexit__(*exc)


class Pipeline:
    def __init__(
        self,
        header: pb2.Header,
        spool: Any,
        return_spool: Callable[[Any], None],
        stub_for: StubFor,
        metadata: tuple[tuple[str, str], ...] = (),
        *,
        timeout: float = REPLICATION_TIMEOUT,
    ) -> None:
        """``metadata`` goes with every Replicate call (the broker's own token, if any);
        ``timeout`` bounds each write to and read from a peer (see REPLICATION_TIMEOUT)."""
        self.timeout = timeout
        route = header.route
        assert route.primary != -1, "a pipeline needs a primary"
        self.header = header
        self.spool = spool
        self._return_spool = return_spool
        self._spool_returned = False
        n = len(route.members)
        self._streams: list[Any | None] = [None] * n
        self._send_errs: list[BaseException | None] = [None] * n
        self._recv_errs: list[BaseException | None] = [None] * n
        self._recv: list[pb2.ReplicateResponse | None] = [None] * n
        # Set once a proposal could not be sent safely (see break_off): nothing more is.
        self._broken: BaseException | None = None
        loop = asyncio.get_running_loop()
        self._read_barrier: asyncio.Future[None] = loop.create_future()
        self._read_barrier.set_result(None)
        # The bounds of the peer writes and reads under way (see interrupt), and why
        # they were cut short, if they were.
        self._waits: set[asyncio.Timeout] = set()
        self._interrupted: str | None = None
        for i, member in enumerate(route.members):
            if i == route.primary:
                continue
            endpoint = route.endpoints[i] if i < len(route.endpoints) else ""
            try:
                self._streams[i] = stub_for(member, endpoint).Replicate(metadata=metadata or None)
            except Exception as e:  # noqa: BLE001  # recorded; surfaces via send_err()
                self._send_errs[i] = e

    def _member(self, i: int) -> str:
        return _id_str(self.header.route.members[i])

    @property
    def members(self) -> list[pb2.ProcessSpec.ID]:
        return list(self.header.route.members)

    def _bounded(self) -> _Bound:
        """A peer write or read: bounded by ``timeout``, cut short by :meth:`interrupt`."""
        return _Bound(self._waits, 0.0 if self._interrupted is not None else self.timeout)

    def interrupt(self, why: str) -> None:
        """Stop waiting on peers: every write or read under way, or to come, fails with ``why``.

        For a route that lost a member: a peer cut off by a partition neither
        answers nor fails, and the appends waiting on it would hold the journal
        until ``timeout``, long after etcd gave the journal a new route.
        """
        if self._interrupted is not None:
            return
        self._interrupted = why
        now = asyncio.get_running_loop().time()
        for bound in self._waits:
            bound.reschedule(now)

    async def scatter(self, req: pb2.ReplicateRequest) -> None:
        if self._broken is not None:
            return
        for i, call in enumerate(self._streams):
            if call is None or self._send_errs[i] is not None:
                continue
            msg = req
            if req.HasField("header"):
                msg = pb2.ReplicateRequest()
                msg.CopyFrom(req)
                msg.header.process_id.CopyFrom(self.header.route.members[i])
            try:
                async with self._bounded():
                    await call.write(msg)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
                self._send_errs[i] = e
            except TimeoutError:
                self._send_errs[i] = errors.PipelineError(
                    self._interrupted or f"took no message for {self.timeout:g}s (partitioned?)"
                )
                call.cancel()
        p = self.header.route.primary
        if self._send_errs[p] is None:
            try:
                resp = await self.spool.apply(req, primary=True)
            except Exception as e:  # noqa: BLE001  # local spool failure fails the pipeline
                self._send_errs[p] = e
                return
            if resp.status != _OK:
                # The primary proposes only what its own spool accepts.
                raise AssertionError(f"local spool rejected primary proposal: {resp}")

    async def acknowledged(self) -> BaseException | None:
        """Wait until every earlier proposal was acknowledged; its failure, if any.

        Proposals are sent one at a time: a replica takes the arrival of a
        proposal to mean that every member committed the one before (see
        :meth:`gazette.broker.fragment.spool.Spool.confirm`), so the next one
        may go only once all acknowledgements of the last one are in, and not
        at all if one of them failed (:meth:`break_off`). Content still streams
        ahead of those acknowledgements.
        """
        await asyncio.shield(self._read_barrier)
        return self.failure()

    async def note_ended_peers(self) -> None:
        """Record, as failed, every peer whose stream has already ended.

        A replica ends its stream before our EOF only by failing (its spool disk
        stalled, say) or by leaving the route. Checked before a commit goes out: a
        commit no peer can take is not sent, so the append fails knowing it is not
        in the journal (else the primary's own copy of it would be). The error says
        nothing of commits: an append whose commit went out before the peer ended
        reads it too (the append says whether its own commit was sent).
        """
        for i, call in enumerate(self._streams):
            if call is None or self._recv_errs[i] is not None or not call.done():
                continue
            code = await call.code()
            details = await call.details()
            self._recv_errs[i] = errors.PipelineError(errors.describe_status(code, details))

    def local_err(self) -> BaseException | None:
        """How the primary's own spool failed (a stalled or full disk), if it did."""
        return self._send_errs[self.header.route.primary]

    def failure(self) -> BaseException | None:
        """What broke the pipeline, cause before consequence: the primary's own spool
        (its peers then see the pipeline close: EOF), then what a peer answered (a
        send to a peer that already failed fails too), then a failed send."""
        if self._broken is not None:
            return self._broken
        return self.local_err() or self.recv_err() or self.send_err()

    def idle(self) -> bool:
        """No acknowledgement is awaited and nothing has failed."""
        return self._read_barrier.done() and self.send_err() is None and self.recv_err() is None

    async def confirm_replicas(self) -> None:
        """Repeat the committed fragment to every peer, asking no answer (see Replica).

        Only while :meth:`idle` and held by the caller (no content in flight): the
        fragment is then confirmed, and a replica reads any proposal as saying so.
        """
        if not self.idle():
            return
        frag = pb2.Fragment()
        frag.CopyFrom(self.spool.spec)
        await self.scatter(
            pb2.ReplicateRequest(proposal=frag, registers=self.spool.registers, acknowledge=False)
        )

    def break_off(self, err: BaseException) -> None:
        """Send nothing more: a peer failed an earlier proposal (the pipeline is done)."""
        if self._broken is None:
            self._broken = err

    def send_err(self) -> BaseException | None:
        """The first failure to send (or, at the primary, to apply locally), if any.

        The primary's own spool comes first and as it is (a stalled or full disk
        says so): its peers' failures that follow (they see the pipeline closed)
        are consequences.
        """
        if self._broken is not None:
            return self._broken
        if (local := self.local_err()) is not None:
            return local
        for i, e in enumerate(self._send_errs):
            if e is not None:
                return errors.PipelineError(f"send: {errors.describe(e)}", peer=self._member(i))
        return None

    def recv_err(self) -> BaseException | None:
        for i, e in enumerate(self._recv_errs):
            if e is not None:
                return errors.PipelineError(f"recv: {errors.describe(e)}", peer=self._member(i))
        return None

    async def _give_back_spool(self) -> None:
        """Roll back local partial content and return the spool to its replica (once)."""
        if self._spool_returned:
            return
        self._spool_returned = True
        frag = pb2.Fragment()
        frag.CopyFrom(self.spool.spec)
        await self.spool.apply(
            pb2.ReplicateRequest(proposal=frag, registers=self.spool.registers), primary=True
        )
        self._return_spool(self.spool)

    async def abort(self) -> None:
        """Tear down at once, without the EOF handshake (the owning RPC was cancelled)."""
        for call in self._streams:
            if call is not None:
                call.cancel()
        await self._give_back_spool()

    async def close_send(self) -> None:
        """Roll back local partial content, return the spool, half-close every stream."""
        await self._give_back_spool()
        for i, call in enumerate(self._streams):
            if call is not None and self._send_errs[i] is None:
                try:
                    await call.done_writing()
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
                    self._send_errs[i] = e

    def barrier(self) -> tuple[asyncio.Future[None], asyncio.Future[None]]:
        wait_for = self._read_barrier
        self._read_barrier = asyncio.get_running_loop().create_future()
        return wait_for, self._read_barrier

    async def _read_each(self) -> list[tuple[int, Any]]:
        """One read of every live peer stream: (peer index, response or EOF).

        A peer whose read fails is recorded as failed and left out.
        """
        out: list[tuple[int, Any]] = []
        for i, call in enumerate(self._streams):
            if call is None or self._recv_errs[i] is not None:
                continue
            try:
                async with self._bounded():
                    out.append((i, await call.read()))
            except grpc.aio.AioRpcError as e:
                self._recv_errs[i] = e
            except TimeoutError:
                self._recv_errs[i] = errors.PipelineError(
                    self._interrupted or f"no answer for {self.timeout:g}s (partitioned?)"
                )
                call.cancel()
        return out

    async def _gather(self) -> None:
        for i, resp in await self._read_each():
            if resp is grpc.aio.EOF:
                self._recv_errs[i] = errors.PipelineError("unexpected EOF")
            else:
                self._recv[i] = resp

    async def gather_ok(self) -> None:
        await self._gather()
        for i, call in enumerate(self._streams):
            if call is None or self._recv_errs[i] is not None:
                continue
            resp = self._recv[i]
            if resp is None or resp.status != pb2.Status.OK:
                self._recv_errs[i] = errors.PipelineError(f"unexpected !OK response: {resp}")

    async def gather_sync(self) -> tuple[int, pb2.LabelSet | None, int]:
        """Gather sync acks: (roll-to offset, its registers, revision to read through)."""
        await self._gather()
        roll_to, roll_regs, read_through = 0, None, 0
        spool_end = self.spool.spec.end
        for i, call in enumerate(self._streams):
            if call is None or self._recv_errs[i] is not None:
                continue
            resp = self._recv[i]
            assert resp is not None
            if resp.status == pb2.Status.OK:
                continue
            if resp.status == pb2.Status.WRONG_ROUTE:
                if (
                    not pb.route_equivalent(resp.header.route, self.header.route)
                    and resp.header.etcd.revision > self.header.etcd.revision
                ):
                    read_through = max(read_through, resp.header.etcd.revision)
                else:
                    self._recv_errs[i] = errors.PipelineError(
                        f"unexpected WRONG_ROUTE: {resp.header}"
                    )
            elif resp.status == pb2.Status.PROPOSAL_MISMATCH:
                frag = resp.fragment
                if frag.end > spool_end:
                    if frag.end > roll_to:
                        roll_to, roll_regs = frag.end, resp.registers
                elif frag.end == spool_end and frag.begin == frag.end:
                    roll_to = max(roll_to, frag.end)
                else:
                    self._recv_errs[i] = errors.PipelineError(
                        f"unexpected PROPOSAL_MISMATCH: {frag}, {resp.registers}"
                    )
            else:
                self._recv_errs[i] = errors.PipelineError(
                    f"unexpected Status: {pb2.Status.Name(resp.status)}"
                )
        return roll_to, roll_regs, read_through

    async def gather_eof(self) -> None:
        for i, resp in await self._read_each():
            if resp is not grpc.aio.EOF:
                self._recv_errs[i] = errors.PipelineError(f"unexpected response: {resp}")

    async def shutdown(self, expect_err: bool) -> None:
        wait_for, close_after = self.barrier()
        await self.close_send()
        if not expect_err and (e := self.send_err()) is not None:
            log.warning("tearing down pipeline: failed to close send: %s", e)
        try:
            await wait_for
            await self.gather_eof()
            if not expect_err and (e := self.recv_err()) is not None:
                log.warning("tearing down pipeline: failed to gather EOF: %s", e)
        finally:
            close_after.set_result(None)
            for call in self._streams:
                if call is not None:
                    call.cancel()
