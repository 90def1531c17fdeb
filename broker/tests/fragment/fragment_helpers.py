"""Shared helpers of the fragment tests (imported by name: no conftest, no fixtures)."""

from __future__ import annotations

import datetime

from gazette.broker import protocol as pb
from gazette.broker.fragment import codecs, cover_set, spool

JOURNAL = "a/journal"


class RecordingObserver:
    """Records spool commits and completions (a SpoolObserver)."""

    def __init__(self) -> None:
        self.commits: list[cover_set.Fragment] = []
        self.completes: list[tuple[spool.Spool, bool]] = []

    def spool_commit(self, fragment: cover_set.Fragment) -> None:
        self.commits.append(fragment)

    def spool_complete(self, sp: spool.Spool, primary: bool) -> None:
        self.completes.append((sp, primary))


class FixedClock:
    def __init__(self, when: datetime.datetime) -> None:
        self.when = when

    def __call__(self) -> datetime.datetime:
        return self.when


def labels(**kv: str) -> pb.LabelSet:
    return pb.label_set(kv)


def proposal(frag: pb.Fragment, registers: pb.LabelSet | None = None) -> pb.ReplicateRequest:
    req = pb.ReplicateRequest(proposal=frag)
    if registers is not None:
        req.registers.CopyFrom(registers)
    return req


def content(data: bytes, delta: int) -> pb.ReplicateRequest:
    return pb.ReplicateRequest(content=data, content_delta=delta)


def local_content(sp: spool.Spool) -> bytes:
    assert sp.file is not None
    return sp.file.pread(sp.content_length, 0)


def compressed_bytes(sp: spool.Spool) -> bytes:
    assert sp.compressed_file is not None
    return sp.compressed_file.pread(sp.compressed_length, 0)


def decoded(sp: spool.Spool) -> bytes:
    codec = sp.spec.compression_codec
    enc = "gzip" if codec == pb.GZIP_OFFLOAD_DECOMPRESSION else ""
    return codecs.decompress(codec, compressed_bytes(sp), content_encoding=enc)


async def commit(
    sp: spool.Spool, data: bytes, registers: pb.LabelSet | None = None, *, primary: bool = False
) -> None:
    """Append ``data`` and commit it (with ``registers``, default: the spool's own)."""
    await sp.apply(content(data, sp.delta), primary=primary)
    regs = registers if registers is not None else sp.registers
    resp = await sp.apply(proposal(sp.next(), regs), primary=primary)
    assert resp.status == pb.OK, resp
