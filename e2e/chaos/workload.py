"""The recording appenders: concurrent writers that remember every acknowledged append.

:class:`Workload` runs ``writers`` asyncio tasks. Each builds an append of one
to a few :mod:`~chaos.records` records, sends it (as a few content chunks) to
one broker, and on any failure retries the very same bytes on the next broker
until it is acknowledged: a record may therefore land twice (an attempt that
committed but whose answer was lost), which Gazette allows, but it must never
be missing once acknowledged. Every acknowledgement is kept as an
:class:`Ack`: journal, the commit's ``[begin, end)``, the record ids, and when.

:meth:`Workload.abort_appends` opens appends and abandons them half-way
(cancelled streams, and streams closed without the commit chunk): none of their
records may ever be read. :meth:`Workload.unavailability` turns the ack times
into the longest gap between acknowledgements around each marked fault.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence

import grpc

from chaos.records import RecordId, record
from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import errors

__all__ = ["Ack", "Channels", "Endpoints", "Fault", "Workload", "WorkloadConfig"]

#: The gRPC addresses (``host:port``) of the brokers as they are now.
Endpoints = Callable[[], Sequence[str]]

_MAX_MESSAGE = 64 << 20
_DIGITS = re.compile(r"\d+")


class Channels:
    """One grpc.aio channel per broker address, made on first use."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, address: str) -> pb2_grpc.JournalAsyncStub:
        ch = self._channels.get(address)
        if ch is None:
            ch = dial.channel(
                address if "://" in address else f"http://{address}",
                dial.DialConfig(max_message_size=_MAX_MESSAGE),
            )
            self._channels[address] = ch
        return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            await ch.close()


@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    journals: tuple[str, ...]
    writers: int = 3
    #: Records per append: 1 to this many.
    max_records: int = 3
    #: A writer's pause between acknowledged appends (keeps the 2 cores for the brokers).
    pause_s: float = 0.01
    #: Client deadline of one append attempt: one that reaches it *hung*.
    append_timeout_s: float = 10.0
    #: Pause before retrying a failed attempt on the next broker.
    retry_backoff_s: float = 0.1
    seed: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    """An acknowledged append: these records are at ``[begin, end)`` of ``journal``."""

    journal: str
    begin: int
    end: int
    ids: tuple[RecordId, ...]
    at: float


@dataclasses.dataclass(frozen=True, slots=True)
class Fault:
    label: str
    at: float


class Workload:
    """The writers, and what they saw; see the module docstring."""

    def __init__(
        self,
        cfg: WorkloadConfig,
        endpoints: Endpoints,
        channels: Channels,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.endpoints = endpoints
        self.channels = channels
        self.clock = clock
        self.acks: list[Ack] = []
        self.faults: list[Fault] = []
        self.attempts = 0
        #: Failed attempts by gRPC code or Gazette status.
        self.errors: collections.Counter[str] = collections.Counter()
        #: Failed attempts by what the broker said (digits blanked, so alike ones count as one).
        self.details: collections.Counter[str] = collections.Counter()
        #: Every append begun, by its first record: (journal, failed attempts that may
        #: have landed). An attempt answered with a Gazette status, or an error saying
        #: its commit never went out, may not (see :func:`chaos.checker.verify`).
        self.sent: dict[RecordId, tuple[str, int]] = {}
        #: Attempts that got no answer within ``append_timeout_s``.
        self.hung = 0
        #: Acks whose commit span doesn't match the bytes sent (a broker bug).
        self.bad_acks: list[str] = []
        #: Records of abandoned appends: never to be read.
        self.aborted: set[RecordId] = set()
        self._abort_seq = 0
        self._failed_for_sure = False
        self.started_at = clock()
        self.stopped_at: float | None = None
        self.ended_at: float | None = None

    def mark_fault(self, label: str) -> None:
        self.faults.append(Fault(label, self.clock()))

    def mark_end(self) -> None:
        """The faults are over: the last fault's window ends here (not when writers wind down)."""
        self.ended_at = self.clock()

    async def run(self, stop: asyncio.Event) -> None:
        """Append until ``stop`` is set (each writer finishes its attempt in flight)."""
        self.started_at = self.clock()
        try:
            async with asyncio.TaskGroup() as tg:
                for w in range(self.cfg.writers):
                    tg.create_task(self._writer(w, stop), name=f"writer-{w}")
        finally:
            self.stopped_at = self.clock()

    async def _writer(self, w: int, stop: asyncio.Event) -> None:
        rng = random.Random(f"{self.cfg.seed}/{w}")
        turn = rng.randrange(1 << 16)
        seq = 0
        while not stop.is_set():
            journal = rng.choice(self.cfg.journals)
            n = rng.randint(1, self.cfg.max_records)
            ids = tuple(RecordId(f"w{w}", seq + k) for k in range(n))
            seq += n
            data = b"".join(record(i) for i in ids)
            uncertain = 0
            while not stop.is_set():
                endpoints = self.endpoints()
                self.sent[ids[0]] = (journal, uncertain)
                resp = await self._attempt(endpoints[turn % len(endpoints)], journal, data, rng)
                if resp is not None:
                    self._ack(journal, resp, ids, len(data))
                    break
                uncertain += not self._failed_for_sure
                self.sent[ids[0]] = (journal, uncertain)
                turn += 1  # The next attempt goes to another broker.
                await asyncio.sleep(self.cfg.retry_backoff_s)
            await asyncio.sleep(self.cfg.pause_s)

    async def _attempt(
        self, address: str, journal: str, data: bytes, rng: random.Random
    ) -> pb.AppendResponse | None:
        self.attempts += 1
        self._failed_for_sure = False
        cuts = sorted(rng.randrange(len(data)) for _ in range(2))
        chunks = [data[: cuts[0]], data[cuts[0] : cuts[1]], data[cuts[1] :]]
        try:
            resp = await testing.append(
                self.channels.stub(address),
                journal,
                [c for c in chunks if c],
                deadline=self.cfg.append_timeout_s,
            )
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                self.hung += 1
            self.errors[e.code().name] += 1
            self.details[f"{e.code().name}: {_DIGITS.sub('N', e.details() or '')[:300]}"] += 1
            self._failed_for_sure = errors.NOT_COMMITTED in (e.details() or "")
            return None
        if resp.status != pb.OK:
            self.errors[pb.Status.Name(resp.status)] += 1
            self._failed_for_sure = True  # A Gazette status: nothing was appended.
            return None
        return resp

    def _ack(
        self, journal: str, resp: pb.AppendResponse, ids: tuple[RecordId, ...], n: int
    ) -> None:
        begin, end = resp.commit.begin, resp.commit.end
        if end - begin != n:
            self.bad_acks.append(
                f"{journal}: {ids[0]}.. ({n} bytes) acknowledged as [{begin}, {end})"
            )
        self.acks.append(Ack(journal, begin, end, ids, self.clock()))

    # --- Abandoned appends -------------------------------------------------------

    async def abort_appends(self, count: int, rng: random.Random) -> collections.Counter[str]:
        """Open ``count`` appends and abandon each half-way; returns how each ended.

        Even ones cancel the stream after half their content was sent; odd ones
        close it cleanly but without the commit chunk (a rollback).
        """
        outcomes: collections.Counter[str] = collections.Counter()
        for n in range(count):
            ids = tuple(RecordId("x", self._abort_seq + k) for k in range(4))
            self._abort_seq += len(ids)
            self.aborted.update(ids)
            data = b"".join(record(i) for i in ids)
            half = len(data) // 2
            journal = rng.choice(self.cfg.journals)
            endpoints = self.endpoints()
            stub = self.channels.stub(endpoints[rng.randrange(len(endpoints))])
            if n % 2:
                outcomes["rollback:" + await self._rollback(stub, journal, data[:half])] += 1
            else:
                outcomes["cancel:" + await self._cancel(stub, journal, data[:half])] += 1
        return outcomes

    async def _rollback(self, stub: pb2_grpc.JournalAsyncStub, journal: str, part: bytes) -> str:
        try:
            resp = await testing.append(stub, journal, [part], commit=False, deadline=10)
        except grpc.aio.AioRpcError as e:
            return str(e.code().name)
        return pb.Status.Name(resp.status)

    async def _cancel(self, stub: pb2_grpc.JournalAsyncStub, journal: str, part: bytes) -> str:
        sent = asyncio.Event()
        never = asyncio.Event()

        async def requests() -> AsyncIterator[pb.AppendRequest]:
            yield pb.AppendRequest(journal=journal)
            yield pb.AppendRequest(content=part)
            sent.set()
            await never.wait()  # The commit chunk never comes.

        call = stub.Append(requests(), timeout=10)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sent.wait(), 5)
        # Let the content reach the broker (and its replicas) before walking away.
        await asyncio.sleep(0.2)
        call.cancel()
        code = await call.code()
        return str(code.name)

    # --- Figures ------------------------------------------------------------------

    def unavailability(self) -> list[tuple[str, float]]:
        """Per marked fault: the longest gap between acks of any one journal around it.

        A fault's window runs from its mark to the next mark (the last to the
        workload's stop). Its gap starts at the journal's last ack before the
        mark, so an outage that began with this fault counts in full.
        """
        end = self.ended_at or self.stopped_at or self.clock()
        times: dict[str, list[float]] = {j: [] for j in self.cfg.journals}
        for a in self.acks:
            times[a.journal].append(a.at)
        for ts in times.values():
            ts.sort()
        out = []
        for i, fault in enumerate(self.faults):
            w_end = self.faults[i + 1].at if i + 1 < len(self.faults) else end
            worst = 0.0
            for ts in times.values():
                before = [t for t in ts if t < fault.at]
                points = [before[-1] if before else self.started_at]
                points += [t for t in ts if fault.at <= t < w_end]
                points.append(w_end)
                worst = max(worst, *(b - a for a, b in itertools.pairwise(points)))
            out.append((fault.label, worst))
        return out
