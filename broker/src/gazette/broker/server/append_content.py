"""The content phase of an append: the client's chunks, the commit and its acknowledgements.

Once :class:`~gazette.broker.server.append_fsm.AppendFSM` holds a synchronised
pipeline and the journal's preconditions hold (state STREAM_CONTENT), every
client message goes through :meth:`ContentPhase.on_stream_content`: content is
hashed, coalesced into Replicate messages of about
:data:`~gazette.broker.server.append_state.REPLICATE_CONTENT_BYTES` and
scattered; the empty chunk and the client's EOF commit it (or a failure rolls
it back), and READ_ACKNOWLEDGEMENTS waits, in pipeline order, for every
peer's verdict. This is a mixin of the FSM, split out because it is the one
phase that streams bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from gazette.broker import protocol as pb
from gazette.broker.protocol import protocol_pb2 as pb2
from gazette.broker.server import errors, flow_control, resolver
from gazette.broker.server import pipeline as pipeline_
from gazette.broker.server import replica as replica_
from gazette.broker.server.append_state import (
    _SUSPEND_WITHOUT_CONTENT,
    Deps,
    State,
    Status,
)


class ContentPhase:
    """STREAM_CONTENT and READ_ACKNOWLEDGEMENTS of the append FSM (a mixin)."""

    # Provided by AppendFSM.
    deps: Deps
    req: pb2.AppendRequest
    clock: Callable[[], float]
    state: State
    resolved: resolver.Resolution | None
    pln: pipeline_.Pipeline | None
    registers: pb2.LabelSet
    roll_to_offset: int
    err: BaseException | None
    aborted: asyncio.Event
    client_commit: bool
    client_fragment: pb2.Fragment | None
    client_summer: Any  # hashlib's SHA-1 object (no public type).
    pending: list[bytes]
    pending_size: int
    proposal: pb2.Fragment | None  # The commit (or rollback) whose acknowledgements we read.
    #: The commit reached the pipeline: a failure now leaves the outcome unknown.
    commit_sent: bool
    #: The client's stream ended, but the pipeline had failed: the append rolled back.
    rolled_back: bool
    replicate_content_bytes: int

    def must_state(self, state: State) -> None:
        raise NotImplementedError

    def _replica(self) -> replica_.Replica:
        raise NotImplementedError

    def _spec(self) -> pb2.JournalSpec:
        raise NotImplementedError

    def _pipeline(self) -> pipeline_.Pipeline:
        raise NotImplementedError

    async def release_pipeline(self) -> None:
        raise NotImplementedError

    async def _stream_client_content(
        self, requests: AsyncIterator[pb2.AppendRequest]
    ) -> tuple[int, int]:
        """Feed the client's content through flow control until it commits or fails."""
        res, spec = self.resolved, self._spec()
        assert res is not None and res.replica is not None
        flow = res.replica.flow
        flow.reset(spec.max_append_rate, self.deps.flow_limits, int(self.clock() * 1000))
        fc = flow_control.FlowControl(
            flow,
            requests,
            clock=self.clock,
            invalidated=res.invalidated.is_set,
            aborted=self.aborted.is_set,
        )
        try:
            while self.state == State.STREAM_CONTENT:
                msg: pb2.AppendRequest | None = None
                err: BaseException | None = None
                try:
                    msg = await fc.recv()
                except (errors.BrokerServerError, grpc.RpcError) as e:
                    err = e
                await self.on_stream_content(msg, err)
        finally:
            await fc.aclose()
        return flow.total_chunks, flow.delayed_chunks

    async def on_stream_content(
        self, req: pb2.AppendRequest | None, err: BaseException | None
    ) -> None:
        """Consume one client message; ``req=None, err=None`` is the client's EOF."""
        self.must_state(State.STREAM_CONTENT)
        res, pln, spec = self.resolved, self._pipeline(), self._spec()
        assert res is not None
        eof = req is None and err is None

        if self.client_fragment is None:
            # First call: maybe roll ahead of this append. The pipeline is synchronised,
            # so peers will agree and no acknowledgement is asked for.
            proposal = self.deps.maybe_roll(pln.spool, self.roll_to_offset, spec)
            if proposal != pln.spool.spec:
                await self._scatter_proposal(
                    pln,
                    pb2.ReplicateRequest(
                        proposal=proposal, registers=self.registers, acknowledge=False
                    ),
                )
            frag = pln.spool.spec
            self.client_fragment = pb2.Fragment(
                journal=frag.journal,
                begin=frag.end,
                end=frag.end,
                compression_codec=frag.compression_codec,
            )
            self.client_summer = hashlib.sha1()

        content = b""
        if req is not None and err is None:
            try:
                pb.validate(req)
            except pb.ValidationError as e:
                err = e
            else:
                if req.journal:
                    err = errors.ExpectedContentChunk()
                content = req.content  # Once: each access of a bytes field copies it.

        if eof and not self.client_commit:
            eof, err = False, errors.UnexpectedEOF()
        elif req is not None and err is None and self.client_commit:
            err = errors.ExpectedEOF()
        elif req is not None and err is None and len(content) == 0:
            self.client_commit = True  # EOF must follow, then we commit.
            await self._flush_content(pln)
            if pln.send_err() is None:
                return
        elif (
            req is not None
            and err is None
            and (not pb.journal_may_write(spec) or self.req.suspend in _SUSPEND_WITHOUT_CONTENT)
        ):
            res.status = Status.NOT_ALLOWED
        elif req is not None and err is None:
            n = len(content)
            if self.pending_size and self.pending_size + n > self.replicate_content_bytes:
                await self._flush_content(pln)
            self.pending.append(content)
            self.pending_size += n
            self.client_summer.update(content)
            self.client_fragment.end += n
            if self.pending_size >= self.replicate_content_bytes:
                await self._flush_content(pln)
            if pln.send_err() is None:
                return

        # Errored, or at the end of input. Content still pending is dropped: only a
        # commit (whose marker flushed it) replicates it.
        self.pending.clear()
        self.pending_size = 0
        frag = self.client_fragment
        frag.sum.CopyFrom(pb.sha1sum_from_digest(self.client_summer.digest()))
        if (
            eof
            and frag.end == frag.begin
            and (self.req.HasField("union_registers") or self.req.HasField("subtract_registers"))
        ):
            eof, err = False, errors.RegisterUpdateWithEmptyAppend()

        if eof:
            await pln.note_ended_peers()  # A peer that failed already can't take the commit.
        committing = eof and pln.failure() is None and res.status == Status.OK
        # At its end, but the pipeline already failed: only the rollback goes out.
        self.rolled_back = eof and not committing and pln.failure() is not None
        if committing:
            assert self.client_commit
            proposal = pln.spool.next()
            if self.req.HasField("subtract_registers"):
                self.registers = pb.subtract(self.registers, self.req.subtract_registers)
            if self.req.HasField("union_registers"):
                self.registers = pb.union(self.req.union_registers, self.registers)
        else:
            # Client or peer failure: the pipeline is sound, but partial content rolls back.
            proposal = pb2.Fragment()
            proposal.CopyFrom(pln.spool.spec)
            if err is not None:
                self.err = errors.StreamError(f"append stream: {err}")
        self.proposal = proposal
        sent = await self._scatter_proposal(
            pln, pb2.ReplicateRequest(proposal=proposal, registers=self.registers, acknowledge=True)
        )
        self.commit_sent = committing and sent
        self.state = State.READ_ACKNOWLEDGEMENTS

    async def _scatter_proposal(self, pln: pipeline_.Pipeline, req: pb2.ReplicateRequest) -> bool:
        """Scatter a proposal once every peer acknowledged the previous one (True: sent).

        If one did not, nothing is sent (the pipeline breaks off, and the
        append fails when it reads its acknowledgements): replicas read each
        proposal as confirming the one before it (Pipeline.acknowledged).
        """
        if (err := await pln.acknowledged()) is not None:
            pln.break_off(err)
            return False
        await pln.scatter(req)
        return True

    async def _flush_content(self, pln: pipeline_.Pipeline) -> None:
        """Scatter pending client content as one Replicate content message."""
        if not self.pending_size:
            return
        frag = self.client_fragment
        assert frag is not None
        size = self.pending_size
        pending = self.pending
        content = pending[0] if len(pending) == 1 else b"".join(pending)
        self.pending = []
        self.pending_size = 0
        await pln.scatter(
            pb2.ReplicateRequest(content=content, content_delta=frag.end - size - frag.begin)
        )

    async def _on_read_acknowledgements(self) -> None:
        self.must_state(State.READ_ACKNOWLEDGEMENTS)
        pln, res = self._pipeline(), self.resolved
        assert res is not None
        send_err = pln.send_err()
        wait_for, close_after = pln.barrier()
        if send_err is None:
            await self.release_pipeline()  # The next append may start sending now.
        else:
            await pln.close_send()
            self.pln = None
            await self.release_pipeline()  # Returns None: a new pipeline will be built.
        confirmed = False
        confirmed_file = None
        try:
            await wait_for  # Our turn to read ordered acknowledgements.
            await pln.gather_ok()
            if send_err is not None:
                await pln.gather_eof()
            elif pln.recv_err() is None and self.proposal is not None:
                # Every member committed it: it may be published whatever happens
                # next (before the next append may send its proposal).
                pln.spool.confirm(self.proposal.end)
                confirmed, confirmed_file = True, pln.spool.file
        finally:
            if not close_after.done():
                close_after.set_result(None)
        if confirmed:
            assert self.proposal is not None
            await pln.spool.record_confirmed(confirmed_file, self.proposal.end)
            self._replica().tell_confirmed_soon()
            fence = self._replica().fence
            if fence is not None and not fence.covers(self.proposal.end):
                try:
                    await fence.cover(self.proposal.end)
                except (TimeoutError, errors.BrokerServerError) as e:
                    # Committed by every member: it stays in the journal, unanswered.
                    span = self.client_fragment or self.proposal
                    self.err = errors.Unfenced(
                        self.req.journal,
                        span.begin,
                        span.end,
                        errors.describe(e) if str(e) else "etcd did not answer in time",
                    )

        recv_err = pln.recv_err()
        if send_err is not None or recv_err is not None:
            self._replica().request_flush()  # A member is failing: store our copy now.
        if self.err is not None or res.status != Status.OK:
            self.state = State.ERROR
        elif send_err is not None or recv_err is not None:
            # The cause, not its consequences (see Pipeline.failure). Once the commit
            # was sent, members that took it keep it: say the outcome is unknown.
            why = str(pln.failure())
            if self.commit_sent:
                why += errors.OUTCOME_UNKNOWN
            elif self.rolled_back:
                why += errors.NOT_COMMITTED
            self.err = errors.PipelineError(why)
            self.state = State.ERROR
        else:
            self.state = State.FINISHED
