"""stream-sum: an exactly-once check of the consumer framework (Gazette ``examples/stream-sum``).

A **chunker** writes many streams of chunks, interleaved, each chunk
committed on its own (``publish_committed``) to one of the chunk journals
(mapped by the stream id). A stream is ``SeqNo`` 1, 2, ... with 32 random
bytes each, ended by a chunk without data.

The **summer** (a consumer application: one shard per chunk journal) folds
each stream's chunks into a running CRC-64/ECMA, kept with the shard's
checkpoint: in PostgreSQL (the fenced SQL store), or, for shards with a
recovery log, in a JSON file recorded into that log (replayed by standbys). It checks that every chunk is the
next of its stream: a chunk delivered twice, or one lost, is fatal (the shard
fails). At a stream's end it publishes its Sum inside the consumer
transaction (``publish_uncommitted``): the Sum is read by others only once
that transaction committed, and exactly once.

The chunker reads the committed Sums back and checks each against the value
it computed: a wrong, missing or repeated Sum fails the run. Restarts,
fail-overs and broker faults happen while it checks.

Journals (``journals.yaml``): ``examples/stream-sum/chunks/part-NNN`` and
``examples/stream-sum/sums``, JSON lines. Shards (``shards.yaml``):
``chunks-part-NNN``, one source each.

Run the summer::

    PYTHONPATH=examples/stream_sum python -m gazette.consumer \\
        --consumer.app stream_sum:Summer --etcd.prefix /gazette/consumers/stream-sum \\
        -- --postgres postgresql://postgres@127.0.0.1:5432/postgres

and the chunker: ``PYTHONPATH=examples/stream_sum python -m stream_sum chunker --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import logging
import os
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

import fastcrc

from gazette import message
from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.consumer import runtime
from gazette.consumer.runtime import store_json_file, store_sql

log = logging.getLogger("stream_sum")

CHUNK_TYPE = "stream_sum.Chunk"
SUM_TYPE = "stream_sum.Sum"
SUMS_JOURNAL = "examples/stream-sum/sums"
CHUNKS_SELECTOR = f"app.gazette.dev/message-type={CHUNK_TYPE}"
CHUNK_SIZE = 32

_U64 = (1 << 64) - 1


def update_sum(value: int, data: bytes) -> int:
    """Go's ``crc64.Update(value, crc64.MakeTable(crc64.ECMA), data)`` (fastcrc's ``initial``
    is the running checksum, as Go's ``crc``)."""
    return int(fastcrc.crc64.xz(data, value))


def _id_of(doc: Any) -> bytes:
    # Go encodes a [16]byte as an array of 16 numbers.
    return bytes(doc)


class Chunk(message.JSONMessage):
    """``{"UUID", "ID": [16 numbers], "SeqNo", "Data": base64}`` (Go's encoding of stream_sum.Chunk)."""

    @classmethod
    def of(cls, stream: bytes, seq_no: int, data: bytes) -> Chunk:
        return cls(
            {
                "UUID": "",
                "ID": list(stream),
                "SeqNo": seq_no,
                "Data": base64.b64encode(data).decode() if data else None,
            }
        )

    @property
    def stream(self) -> bytes:
        return _id_of(self.doc["ID"])

    @property
    def seq_no(self) -> int:
        return int(self.doc["SeqNo"])

    @property
    def data(self) -> bytes:
        d = self.doc.get("Data")
        return base64.b64decode(d) if d else b""


class Sum(message.JSONMessage):
    """``{"UUID", "ID", "SeqNo", "Value"}`` (Go's stream_sum.Sum)."""

    @classmethod
    def of(cls, stream: bytes, seq_no: int, value: int) -> Sum:
        return cls({"UUID": "", "ID": list(stream), "SeqNo": seq_no, "Value": value})

    @property
    def stream(self) -> bytes:
        return _id_of(self.doc["ID"])

    @property
    def seq_no(self) -> int:
        return int(self.doc["SeqNo"])

    @property
    def value(self) -> int:
        return int(self.doc["Value"])


def sums_mapping(_msg: Any) -> tuple[str, str]:
    return SUMS_JOURNAL, "application/x-ndjson"


# -- the summer ---------------------------------------------------------------------

DDL = """
CREATE TABLE IF NOT EXISTS stream_sums (
    id     BYTEA  PRIMARY KEY NOT NULL,
    seq_no BIGINT NOT NULL,
    value  BIGINT NOT NULL  -- the uint64 CRC, as its two's complement
);
"""


class ChainError(Exception):
    """A chunk that is not the next of its stream: a duplicate or a gap."""


@dataclasses.dataclass
class _Partial:
    seq_no: int
    value: int


class Summer:
    """The stream-sum consumer application (PostgreSQL store)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        # Per store (a primary assignment): sums read or updated, and those to write.
        self._cache: dict[int, tuple[dict[bytes, _Partial], set[bytes]]] = {}

    @classmethod
    def from_args(cls, args: Sequence[str]) -> Summer:
        parser = argparse.ArgumentParser(prog="stream_sum:Summer")
        parser.add_argument(
            "--postgres",
            default=os.environ.get("STREAM_SUM_POSTGRES", ""),
            help="PostgreSQL DSN of the sums and checkpoints [$STREAM_SUM_POSTGRES]",
        )
        ns = parser.parse_args(list(args))
        if not ns.postgres:
            parser.error("--postgres (or $STREAM_SUM_POSTGRES) is required")
        return cls(ns.postgres)

    async def new_store(self, shard: runtime.Shard) -> runtime.Store:
        recorder = shard.recorder
        if recorder is not None:
            # The shard has a recovery log: sums in a JSON file recorded into it,
            # {"<stream id hex>": [seq_no, value]}.
            return store_json_file.JSONFileStore(recorder.directory, {}, recorder)
        await store_sql.ensure_schema(self.dsn, DDL)
        return await store_sql.SQLStore.open(self.dsn, shard)

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        return Chunk()

    def _state(self, store: Any) -> tuple[dict[bytes, _Partial], set[bytes]]:
        key = id(store)
        st = self._cache.get(key)
        if st is None:
            st = self._cache[key] = ({}, set())
        return st

    async def consume_message(
        self,
        shard: runtime.Shard,
        store: runtime.Store,
        envelope: message.Envelope,
        publisher: message.Publisher,
    ) -> None:
        chunk = envelope.message
        assert isinstance(chunk, Chunk)
        if message.get_flags(chunk.get_uuid()) == message.Flags.ACK_TXN:
            return  # An acknowledgement carries no chunk.
        cache, dirty = self._state(store)
        stream = chunk.stream
        part = cache.get(stream)
        if part is None:
            part = cache[stream] = await self._load(store, stream)
        if chunk.seq_no != part.seq_no + 1:
            raise ChainError(
                f"{envelope.journal.name}@{envelope.begin}: stream {stream.hex()} chunk SeqNo"
                f" {chunk.seq_no} follows {part.seq_no} (a duplicated or lost chunk)"
            )
        data = chunk.data
        part.seq_no = chunk.seq_no
        if data:
            part.value = update_sum(part.value, data)
        else:
            publisher.publish_uncommitted(sums_mapping, Sum.of(stream, part.seq_no, part.value))
        dirty.add(stream)

    async def _load(self, store: Any, stream: bytes) -> _Partial:
        if isinstance(store, store_json_file.JSONFileStore):
            seq_no, value = store.state.get(stream.hex(), (0, 0))
            return _Partial(int(seq_no), int(value))
        conn = await store.transaction()
        cur = await conn.execute("SELECT seq_no, value FROM stream_sums WHERE id = %s", (stream,))
        row = await cur.fetchone()
        if row is None:
            return _Partial(0, 0)
        return _Partial(int(row[0]), int(row[1]) & _U64)

    async def finalize_txn(
        self, shard: runtime.Shard, store: runtime.Store, publisher: message.Publisher
    ) -> None:
        cache, dirty = self._state(store)
        if not dirty:
            return
        if isinstance(store, store_json_file.JSONFileStore):
            for stream in dirty:
                store.state[stream.hex()] = [cache[stream].seq_no, cache[stream].value]
            dirty.clear()
            return
        conn = await store.transaction()  # type: ignore[attr-defined]
        rows = []
        for stream in dirty:
            p = cache[stream]
            signed = p.value - (1 << 64) if p.value >= 1 << 63 else p.value
            rows.append((stream, p.seq_no, signed))
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO stream_sums (id, seq_no, value) VALUES (%s, %s, %s)"
                " ON CONFLICT (id) DO UPDATE SET seq_no = EXCLUDED.seq_no, value = EXCLUDED.value",
                rows,
            )
        dirty.clear()


# -- the chunker --------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    streams: int = 0
    chunks: int = 0
    sums: int = 0
    correct: int = 0
    mismatched: int = 0
    duplicates: int = 0
    missing: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.mismatched == 0 and self.duplicates == 0 and self.missing == 0


@dataclasses.dataclass
class _Stream:
    id: bytes
    chunks: int
    sent: int = 0
    value: int = 0
    done_at: float = 0.0
    summed: bool = False


async def run_chunker(
    jc: client.JournalClient,
    *,
    streams: int = 100,
    chunks_per_stream: int = 100,
    concurrent: int = 20,
    sum_timeout: float = 40.0,
    seed: int | None = None,
    pace: float = 0.0,
) -> Report:
    """Write ``streams`` interleaved streams and check every Sum; returns the counts.

    ``pace`` seconds pass between chunks (0: as fast as appends go); ``sum_timeout``
    is how long, after the last chunk, the sums may take to arrive.
    """
    rng = random.Random(seed)
    started = time.monotonic()
    report = Report(streams=streams)
    parts = await client.list_journals(jc, CHUNKS_SELECTOR)
    if not parts.journals:
        raise RuntimeError(f"no chunk journals match {CHUNKS_SELECTOR}")
    listing = parts
    mapping = message.ModuloMapping(lambda m: m.stream, lambda: listing)
    barrier = await client.append(jc, SUMS_JOURNAL, b"")
    expected: dict[bytes, _Stream] = {}
    done = asyncio.Event()

    async def check_sums() -> None:
        request = pb.ReadRequest(journal=SUMS_JOURNAL, offset=barrier.commit.end, block=True)
        seq = message.Sequencer({}, [], 1024)
        async with message.ReadCommittedIter(jc, request, lambda _s: Sum(), seq) as it:
            async for env in it:
                s = env.message
                if message.get_flags(s.get_uuid()) == message.Flags.ACK_TXN:
                    continue
                st = expected.get(s.stream)
                if st is None:
                    continue  # Another chunker's stream.
                report.sums += 1
                if st.summed:
                    report.duplicates += 1
                    log.error("stream %s: a second Sum at %d", st.id.hex(), env.begin)
                elif s.seq_no != st.chunks + 1 or s.value != st.value:
                    report.mismatched += 1
                    log.error(
                        "stream %s: mis-matched sum (%d, %x) expected (%d, %x)",
                        st.id.hex(),
                        s.seq_no,
                        s.value,
                        st.chunks + 1,
                        st.value,
                    )
                else:
                    report.correct += 1
                st.summed = True
                if all(x.summed for x in expected.values()) and len(expected) == streams:
                    done.set()

    async with client.AppendService(jc) as appends, asyncio.TaskGroup() as tg:
        publisher = message.Publisher(appends)
        checker = tg.create_task(check_sums())
        active: list[_Stream] = []
        made = 0
        while made < streams or active:
            while made < streams and len(active) < concurrent:
                st = _Stream(rng.randbytes(16), chunks_per_stream)
                expected[st.id] = st
                active.append(st)
                made += 1
            st = rng.choice(active)
            st.sent += 1
            if st.sent <= st.chunks:
                data = rng.randbytes(CHUNK_SIZE)
                st.value = update_sum(st.value, data)
            else:
                data = b""
            publisher.publish_committed(mapping, Chunk.of(st.id, st.sent, data))
            report.chunks += 1
            if st.sent > st.chunks:
                active.remove(st)
                st.done_at = time.monotonic()
            if pace:
                await asyncio.sleep(pace)
            elif report.chunks % 500 == 0:
                await asyncio.sleep(0)  # Let appends go out.
        for op in appends.pending_except(""):
            await op
        try:
            async with asyncio.timeout(sum_timeout):
                await done.wait()
        except TimeoutError:
            pass
        checker.cancel()
    report.missing = sum(1 for st in expected.values() if not st.summed)
    report.seconds = time.monotonic() - started
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stream_sum")
    sub = parser.add_subparsers(dest="cmd", required=True)
    ch = sub.add_parser("chunker", help="write streams of chunks and check their sums")
    ch.add_argument("--broker.address", dest="broker", default="http://localhost:8080")
    ch.add_argument("--streams", type=int, default=100)
    ch.add_argument("--chunks", type=int, default=100, help="chunks per stream")
    ch.add_argument("--concurrent", type=int, default=20, help="streams written at once")
    ch.add_argument("--timeout", type=float, default=40.0, help="seconds to wait for the sums")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)

    async def go() -> Report:
        async with client.JournalClient(client.ClientConfig(address=ns.broker)) as jc:
            return await run_chunker(
                jc,
                streams=ns.streams,
                chunks_per_stream=ns.chunks,
                concurrent=ns.concurrent,
                sum_timeout=ns.timeout,
            )

    report = asyncio.run(go())
    print(dataclasses.asdict(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
