"""Writes the golden recoverable spools that `core/tests/spool_format.rs` compares Rust with.

Run once, by hand, from broker/dataplane/core/tests/data/spool (cargo test never runs it):

    ../../../../../../.venv/bin/python make_golden.py

It drives the Python spool (gazette.broker.fragment.spool) exactly as a primary does,
so the files under spools/ are what a SIGKILLed Python broker leaves behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import shutil

from gazette.broker import protocol as pb
from gazette.broker.fragment import spool

HERE = pathlib.Path(__file__).resolve().parent

# (case, journal, begin, codec, committed-and-confirmed writes, committed-unconfirmed, pending)
CASES = [
    ("plain", "a/journal", 0, pb.NONE, [b"hello, ", b"world\n"], [b"unconfirmed\n"], b""),
    (
        "quoted",
        "ex/\u00e4 b~c.d_e-f;x%",
        0x1234567,
        pb.GZIP,
        [b"first\n", b"second\n", b"third\n"],
        [],
        b"pending, never committed\n",
    ),
]


class Nobody:
    def spool_commit(self, fragment: object) -> None: ...

    def spool_complete(self, sp: object, primary: bool) -> None: ...


async def one(
    spools: pathlib.Path, case: str, journal, begin, codec, confirmed, unconfirmed, pending
):
    config = spool.SpoolConfig(directory=str(spools), recoverable=True)
    sp = spool.Spool(journal, Nobody(), config=config)
    roll = pb.Fragment(journal=journal, begin=begin, end=begin, compression_codec=codec)
    assert (await sp.apply(pb.ReplicateRequest(proposal=roll), primary=True)).status == pb.OK
    first = True
    for data in confirmed + unconfirmed:
        await sp.apply(pb.ReplicateRequest(content=data, content_delta=sp.delta), primary=True)
        if first:
            # The record as create_recoverable wrote it: confirmed end == begin.
            assert sp.file is not None and sp.file.record is not None
            shutil.copyfile(sp.file.record.path, HERE / f"{case}.record.initial")
            first = False
        req = pb.ReplicateRequest(proposal=sp.next())
        req.registers.CopyFrom(sp.registers)
        assert (await sp.apply(req, primary=True)).status == pb.OK
        if data in confirmed:
            sp.confirm(sp.end)
            await sp.record_confirmed()
            confirmed_end, confirmed_sum = sp.end, pb.sha1sum_hex(sp.spec.sum)
    if pending:
        await sp.apply(pb.ReplicateRequest(content=pending, content_delta=sp.delta), primary=True)
    assert sp.file is not None and sp.file.path is not None
    path = pathlib.Path(sp.file.path)
    content = b"".join(confirmed + unconfirmed) + pending
    assert path.read_bytes() == content
    manifest = {
        "journal": journal,
        "begin": begin,
        "codec": codec,
        "confirmed_end": confirmed_end,
        "confirmed_sum": confirmed_sum,
        "committed_end": sp.end,
        "committed_sum": pb.sha1sum_hex(sp.spec.sum),
        "file_end": begin + len(content),
        "dir": path.parent.name,
        "file": path.name,
        "content_sha1": hashlib.sha1(content).hexdigest(),
    }
    with open(HERE / f"{case}.manifest", "w") as f:
        for k, v in manifest.items():
            f.write(f"{k}={v}\n")
    sp.config.workers.close()


async def main() -> None:
    spools = HERE / "spools"
    shutil.rmtree(spools, ignore_errors=True)
    for case in CASES:
        await one(spools, *case)
    for p in spools.rglob("*"):
        if p.is_file():
            os.chmod(p, 0o644)  # Spool files are 0600; the repository keeps them readable.


asyncio.run(main())
