"""Reading a persisted fragment's content back from its store (Gazette `broker/fragment/stores.go` `Open`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gazette.broker import protocol as pb
from gazette.broker.fragment import codecs, errors, files, stores


async def read_fragment(
    registry: stores.StoreRegistry,
    fragment: pb.Fragment,
    offset: int | None = None,
    *,
    block_size: int = files.COPY_BLOCK,
) -> AsyncIterator[bytes]:
    """Decoded content of a persisted ``fragment`` from ``offset`` (default: its begin).

    Chunks are whatever decoding yields (not sized for the wire). The object
    must decode to exactly ``[begin, end)``: a short one raises
    FragmentReadError("unexpected EOF"), a long one FragmentReadError("did not
    read EOF at expected Fragment.End"). Decoding runs in a worker thread.
    """
    begin, end = fragment.begin, fragment.end
    pos = begin if offset is None else offset
    if not begin <= pos <= end:
        raise ValueError(f"offset {pos} outside fragment [{begin}, {end})")
    name = pb.fragment_path(fragment)
    codec = fragment.compression_codec
    active = registry.get(fragment.backing_store)
    async with await active.get(name) as raw:
        encoding = raw.content_encoding
        if encoding is None:
            # Stored bytes come back verbatim: a GZIP_OFFLOAD object is still gzip.
            encoding = "gzip" if codec == pb.GZIP_OFFLOAD_DECOMPRESSION else ""
        dec = codecs.new_decompressor(codec, content_encoding=encoding)
        identity = codec == pb.NONE or (
            codec == pb.GZIP_OFFLOAD_DECOMPRESSION and encoding != "gzip"
        )
        at = begin  # Journal offset of the next decoded byte.
        while True:
            chunk = await raw.read(block_size)
            if chunk:
                out = (
                    dec.decompress(chunk)
                    if identity
                    else await asyncio.to_thread(dec.decompress, chunk)
                )
            else:
                out = dec.finish()
            if out:
                if at + len(out) > end:
                    raise errors.FragmentReadError(
                        "did not read EOF at expected Fragment.End", fragment_name=name
                    )
                lo = pos - at
                at += len(out)
                if lo < len(out):
                    view = out[lo:] if lo > 0 else out
                    pos += len(view)
                    yield view
            if not chunk:
                break
        if at != end:
            raise errors.FragmentReadError(
                f"unexpected EOF reading fragment ({at - begin} of {end - begin} bytes)",
                fragment_name=name,
            )
