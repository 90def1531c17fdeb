"""Fragment storage benchmark: spool write+commit, and each codec's compression.

(a) Ceiling: a raw sequential write of the same bytes (os.pwrite to an
unlinked temp file, the spool's own kind of file, in the same chunk sizes).
(a') The same writes each also SHA-1 hashed: the floor of a spool's own work.
(b) Spool write+commit: per append, a content request (pwrite + SHA-1) and
a commit proposal (Next() with the running SHA-1, proposal check, index
commit), for 32 KiB and 128 KiB appends, codec NONE.
(c) Each codec's compression of the same bytes, streaming in 1 MiB blocks as
the spool does (GZIP closing a member per batch), with its size ratio.
(d) Small appends: the cost of a 1 KiB write's hop to the spool directory's
writer thread (a stalled disk must not freeze the event loop), as microseconds
per write: the pwrite inline on the loop (what the spool did before), the same
pwrite through ``files.DiskWorker.run``, and a whole spool write+commit.

Figures are MB/s (10^6 bytes) and each as a ratio to the ceiling measured in
this run.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import random
import statistics
import time

from gazette.broker import protocol as pb
from gazette.broker.fragment import codecs, cover_set, files, index, spool

TOTAL = 128 << 20  # Bytes written per measurement.
CHUNKS = (32 << 10, 128 << 10)
JOURNAL = "bench/journal"


def sample(n: int) -> bytes:
    """JSON-ish records with random fields: compressible, but not trivially."""
    rnd = random.Random(7)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta"]
    lines = []
    size = 0
    while size < n:
        line = b'{"id":%d,"user":"%s","score":%.4f,"tags":["%s","%s"],"ts":%d}\n' % (
            rnd.getrandbits(40),
            rnd.randbytes(6).hex().encode(),
            rnd.random() * 1000,
            rnd.choice(words),
            rnd.choice(words),
            1_700_000_000 + rnd.getrandbits(20),
        )
        lines.append(line)
        size += len(line)
    return b"".join(lines)[:n]


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6


def raw_write(data: bytes, chunk: int) -> float:
    f = files.SpoolFile.create()
    try:
        view = memoryview(data)
        start = time.perf_counter()
        written = 0
        while written < TOTAL:
            off = written % len(data)
            f.pwrite(view[off : off + chunk], written)
            written += chunk
        return mbps(written, time.perf_counter() - start)
    finally:
        f.close()


def raw_write_sha1(data: bytes, chunk: int) -> float:
    """The floor of a spool's own work: the same writes, each also hashed."""
    f = files.SpoolFile.create()
    try:
        view = memoryview(data)
        h = hashlib.sha1()
        start = time.perf_counter()
        written = 0
        while written < TOTAL:
            off = written % len(data)
            piece = view[off : off + chunk]
            f.pwrite(piece, written)
            h.update(piece)
            written += chunk
        return mbps(written, time.perf_counter() - start)
    finally:
        f.close()


class _Observer:
    def __init__(self) -> None:
        self.index = index.Index()

    def spool_commit(self, fragment: cover_set.Fragment) -> None:
        self.index.spool_commit(fragment)

    def spool_complete(self, sp: spool.Spool, primary: bool) -> None:
        pass


async def spool_write_commit(data: bytes, chunk: int) -> float:
    obv = _Observer()
    sp = spool.Spool(JOURNAL, obv)
    await sp.apply(
        pb.ReplicateRequest(proposal=pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE))
    )
    # Pre-slice the appends: requests arrive as bytes off the wire.
    pieces = [data[o : o + chunk] for o in range(0, len(data) - chunk + 1, chunk)]
    registers = pb.LabelSet()
    start = time.perf_counter()
    written = 0
    i = 0
    while written < TOTAL:
        piece = pieces[i % len(pieces)]
        i += 1
        await sp.apply(pb.ReplicateRequest(content=piece, content_delta=0), primary=True)
        req = pb.ReplicateRequest(proposal=sp.next(), registers=registers)
        resp = await sp.apply(req, primary=True)
        assert resp.status == pb.OK
        written += len(piece)
    elapsed = time.perf_counter() - start
    assert sp.content_length == written
    return mbps(written, elapsed)


SMALL = 1 << 10  # (d): bytes per small append
SMALL_WRITES = 20_000  # (d): appends per measurement
SMALL_RUNS = 5  # (d): measurements; the median is shown


async def small_inline(data: bytes) -> float:
    """Microseconds per 1 KiB pwrite done on the loop, as an await point like the spool's."""
    f = files.SpoolFile.create()
    try:
        start = time.perf_counter()
        for i in range(SMALL_WRITES):
            f.pwrite(data[:SMALL], i * SMALL)
            await asyncio.sleep(0)
        return (time.perf_counter() - start) / SMALL_WRITES * 1e6
    finally:
        f.close()


async def small_hop(data: bytes) -> float:
    """Microseconds per 1 KiB pwrite through the directory's writer thread."""
    workers = files.DiskWorkers()
    worker = workers.for_directory(None)
    f = files.SpoolFile.create()
    try:
        start = time.perf_counter()
        for i in range(SMALL_WRITES):
            await worker.run(functools.partial(f.pwrite, data[:SMALL], i * SMALL), 10.0)
        return (time.perf_counter() - start) / SMALL_WRITES * 1e6
    finally:
        f.close()
        workers.close()


async def small_spool(data: bytes) -> float:
    """Microseconds per 1 KiB spool write+commit (content request, then its proposal)."""
    cfg = spool.SpoolConfig()
    sp = spool.Spool(JOURNAL, _Observer(), config=cfg)
    await sp.apply(
        pb.ReplicateRequest(proposal=pb.Fragment(journal=JOURNAL, compression_codec=pb.NONE))
    )
    pieces = [data[o : o + SMALL] for o in range(0, 256 * SMALL, SMALL)]
    registers = pb.LabelSet()
    try:
        start = time.perf_counter()
        for i in range(SMALL_WRITES):
            piece = pieces[i % len(pieces)]
            await sp.apply(pb.ReplicateRequest(content=piece, content_delta=0), primary=True)
            req = pb.ReplicateRequest(proposal=sp.next(), registers=registers)
            resp = await sp.apply(req, primary=True)
            assert resp.status == pb.OK
        return (time.perf_counter() - start) / SMALL_WRITES * 1e6
    finally:
        cfg.workers.close()


def compress(codec: int, data: bytes) -> tuple[float, float]:
    block = 1 << 20
    c = codecs.new_compressor(codec)
    out = 0
    start = time.perf_counter()
    for off in range(0, len(data), block):
        out += len(c.compress(data[off : off + block]))
        if codec == pb.GZIP:
            out += len(c.close())
    out += len(c.close())
    return mbps(len(data), time.perf_counter() - start), out / len(data)


def main() -> None:
    data = sample(32 << 20)
    print(
        f"spool write+commit, {TOTAL >> 20} MiB per run, codec NONE, SHA-1 (MB/s; ratio to raw write)"
    )
    ceilings = {}
    for chunk in CHUNKS:
        ceilings[chunk] = raw_write(data, chunk)
        hashed = raw_write_sha1(data, chunk)
        rate = asyncio.run(spool_write_commit(data, chunk))
        print(
            f"  {chunk >> 10:>4} KiB appends: raw write {ceilings[chunk]:8.1f}   "
            f"raw write+SHA-1 {hashed:8.1f} ({hashed / ceilings[chunk]:.2f}x)   "
            f"spool {rate:8.1f}   ratio {rate / ceilings[chunk]:.2f}x"
        )
    print(
        f"small appends of {SMALL} bytes, {SMALL_WRITES} per run, median of {SMALL_RUNS} runs "
        "(microseconds per append)"
    )
    inline, hop, whole = (
        statistics.median(asyncio.run(case(data)) for _ in range(SMALL_RUNS))
        for case in (small_inline, small_hop, small_spool)
    )
    print(
        f"  pwrite inline {inline:6.1f}   pwrite via writer thread {hop:6.1f} "
        f"(+{hop - inline:.1f})   spool write+commit {whole:6.1f}"
    )
    ceiling = ceilings[CHUNKS[-1]]
    print(
        f"codec compression of {len(data) >> 20} MiB in 1 MiB blocks (ceiling: raw write {ceiling:.1f} MB/s)"
    )
    for codec in (pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION):
        rate, ratio = compress(codec, data)
        name = pb.CompressionCodec.Name(codec)
        print(
            f"  {name:<27} {rate:8.1f} MB/s   ratio {rate / ceiling:.2f}x   size {ratio:.2f} of input"
        )


if __name__ == "__main__":
    main()
