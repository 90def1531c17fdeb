"""Fragments: validity, content names and paths, codecs, SHA1Sum (Gazette `fragment_extensions.go`).

A fragment's file is named ``%016x-%016x-%040x<ext>`` from its begin and end
offsets, the SHA-1 of its content and its codec, under
``<journal>/<path_postfix>/`` in a fragment store.
"""

from __future__ import annotations

import functools
import re
import struct

from gazette.broker.protocol import protocol_pb2
from gazette.broker.protocol.errors import ValidationError, within
from gazette.broker.protocol.gotext import go_quote
from gazette.broker.protocol.tokens import (
    MAX_JOURNAL_NAME_LEN,
    path_clean,
    validate_journal,
    validate_path_component,
)
from gazette.broker.protocol.urls import URLError, parse_url

__all__ = [
    "CODEC_EXTENSIONS",
    "codec_from_extension",
    "codec_to_extension",
    "fragment_content_name",
    "fragment_path",
    "parse_fragment_path",
    "sha1sum_from_digest",
    "sha1sum_hex",
    "sha1sum_to_digest",
    "validate_codec",
    "validate_endpoint",
    "validate_fragment",
    "validate_fragment_store",
]

Fragment = protocol_pb2.Fragment
SHA1Sum = protocol_pb2.SHA1Sum
CompressionCodec = protocol_pb2.CompressionCodec

_WRITE_EXT: dict[int, str] = {
    protocol_pb2.NONE: ".raw",
    protocol_pb2.GZIP: ".gz",
    protocol_pb2.ZSTANDARD: ".zst",
    protocol_pb2.SNAPPY: ".sz",
    # Gazette plans ".gzod" and already reads it, but still writes no extension.
    protocol_pb2.GZIP_OFFLOAD_DECOMPRESSION: "",
}

CODEC_EXTENSIONS: dict[str, int] = {
    ".raw": protocol_pb2.NONE,
    ".gz": protocol_pb2.GZIP,
    ".gzip": protocol_pb2.GZIP,
    ".zst": protocol_pb2.ZSTANDARD,
    ".zstandard": protocol_pb2.ZSTANDARD,
    ".sz": protocol_pb2.SNAPPY,
    ".snappy": protocol_pb2.SNAPPY,
    "": protocol_pb2.GZIP_OFFLOAD_DECOMPRESSION,
    ".gzod": protocol_pb2.GZIP_OFFLOAD_DECOMPRESSION,
}
"""Every extension accepted when parsing (matched case-insensitively), to its codec."""

_SHA1 = struct.Struct(">QQI")


def codec_name(codec: int) -> str:
    """Go's String() of a CompressionCodec: its name, or its number if unknown."""
    try:
        return CompressionCodec.Name(codec)  # type: ignore[arg-type]
    except ValueError:
        return str(codec)


def validate_codec(codec: int) -> None:
    """One of NONE, GZIP, ZSTANDARD, SNAPPY, GZIP_OFFLOAD_DECOMPRESSION."""
    if codec not in _WRITE_EXT:
        raise ValidationError(f"invalid value ({codec_name(codec)})")


def codec_to_extension(codec: int) -> str:
    """The extension written for `codec` (GZIP_OFFLOAD_DECOMPRESSION writes none)."""
    try:
        return _WRITE_EXT[codec]
    except KeyError:
        raise ValueError(f"invalid CompressionCodec ({codec_name(codec)})") from None


def codec_from_extension(ext: str) -> CompressionCodec.ValueType:
    """The codec of a file extension (with its dot, any case); `""` is GZIP_OFFLOAD_DECOMPRESSION."""
    codec = CODEC_EXTENSIONS.get(ext.lower())
    if codec is None:
        raise ValidationError(f"unrecognized compression extension: {ext}")
    return CompressionCodec.ValueType(codec)


def sha1sum_from_digest(digest: bytes) -> SHA1Sum:
    """A SHA1Sum of a 20-byte digest (big-endian parts)."""
    if len(digest) != 20:
        raise ValueError(f"expected a 20-byte SHA-1 digest, not {len(digest)} bytes")
    p1, p2, p3 = _SHA1.unpack(digest)
    return SHA1Sum(part1=p1, part2=p2, part3=p3)


def sha1sum_to_digest(s: SHA1Sum) -> bytes:
    """The 20-byte digest of a SHA1Sum."""
    return _SHA1.pack(s.part1, s.part2, s.part3)


def sha1sum_hex(s: SHA1Sum) -> str:
    """40 lowercase hex digits of a SHA1Sum (all zeros for an empty fragment)."""
    return f"{s.part1:016x}{s.part2:016x}{s.part3:08x}"


def fragment_content_name(f: Fragment) -> str:
    """``<begin:016x>-<end:016x>-<sha1:040x><ext>``."""
    return (
        f"{f.begin:016x}-{f.end:016x}-{sha1sum_hex(f.sum)}{codec_to_extension(f.compression_codec)}"
    )


def fragment_path(f: Fragment) -> str:
    """``<journal>/<path_postfix>/<content name>`` (an empty postfix vanishes), as Go's path.Join."""
    return path_clean(
        "/".join(p for p in (f.journal, f.path_postfix, fragment_content_name(f)) if p)
    )


def validate_fragment(f: Fragment) -> None:
    """Journal valid, begin <= end, codec valid, path_postfix a path component of 0..512 bytes."""
    with within("Journal"):
        validate_journal(f.journal)
    if f.begin > f.end:
        raise ValidationError(f"expected Begin <= End (have {f.begin}, {f.end})")
    with within("CompressionCodec"):
        validate_codec(f.compression_codec)
    with within("PathPostfix"):
        validate_path_component(f.path_postfix, 0, MAX_JOURNAL_NAME_LEN)


_HEX_INT = re.compile(r"[+-]?[0-9a-fA-F]+")


def _parse_hex_int64(text: str) -> int:
    # Go's strconv.ParseInt(text, 16, 64), with its messages.
    if _HEX_INT.fullmatch(text) is None:
        raise ValidationError(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    v = int(text, 16)
    if v < -(1 << 63) or v > (1 << 63) - 1:
        raise ValidationError(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return v


def _rune_text(b: int) -> str:
    # Go's %#U of a byte taken as a rune.
    ch = chr(b)
    return f"U+{b:04X} '{ch}'" if ch.isprintable() else f"U+{b:04X}"


def _decode_hex(text: str) -> bytes:
    # Go's hex.DecodeString, with its messages.
    raw = text.encode("utf-8", "surrogatepass")
    valid = b"0123456789abcdefABCDEF"
    for i in range(0, len(raw) - 1, 2):
        for b in (raw[i], raw[i + 1]):
            if b not in valid:
                raise ValidationError(f"encoding/hex: invalid byte: {_rune_text(b)}")
    if len(raw) % 2 == 1:
        if raw[-1] not in valid:
            raise ValidationError(f"encoding/hex: invalid byte: {_rune_text(raw[-1])}")
        raise ValidationError("encoding/hex: odd length hex string")
    return bytes.fromhex(text)


def parse_fragment_path(path: str, *, journal: str | None = None) -> Fragment:
    """Parse a fragment file path back into a (validated) Fragment.

    - With `journal`: `path` is relative to ``<journal>/``, exactly as a store
      lists it (``[<postfix>/]<content name>``); the directory part is the
      postfix. This is Gazette's `ParseFragmentFromRelativePath`.
    - Without `journal`: `path` is a whole content path ``<journal>/<content name>``
      and the postfix is empty. A path with a postfix cannot be split without
      knowing the journal, so pass `journal` for those.

    So ``parse_fragment_path(fragment_path(f))`` gives back `f` when it has no
    postfix, and ``parse_fragment_path(fragment_path(f)[len(f.journal) + 1:],
    journal=f.journal)`` always does (both up to `backing_store` and
    `mod_time`, which a name does not carry).

    Raises ValidationError (`wrong Fragment format: ...`, ``Begin: strconv.ParseInt: ...``,
    ``Sum: encoding/hex: ...``, `unrecognized compression extension: ...`, or a
    Fragment validation error).
    """
    slash = path.rfind("/")
    if slash == -1:
        directory, name = ".", path
    else:
        directory, name = path_clean(path[:slash] or "/"), path[slash + 1 :]
    if journal is None:
        if directory == ".":
            raise ValidationError(f"wrong Fragment path (expected <journal>/<name>): {path}")
        journal, postfix = directory, ""
    else:
        postfix = "" if directory == "." else directory

    dot = name.rfind(".")
    ext = name[dot:] if dot != -1 else ""
    stem = name[: len(name) - len(ext)]

    fields = stem.split("-")
    if len(fields) != 3:
        raise ValidationError(f"wrong Fragment format: {stem}")
    with within("Begin"):
        begin = _parse_hex_int64(fields[0])
    with within("End"):
        end = _parse_hex_int64(fields[1])
    with within("Sum"):
        digest = _decode_hex(fields[2])
    if len(digest) != 20:
        raise ValidationError(f"invalid SHA1Sum length: {digest.hex()}")
    codec = codec_from_extension(ext)

    frag = Fragment(
        journal=journal,
        begin=begin,
        end=end,
        sum=sha1sum_from_digest(digest),
        compression_codec=codec,
        path_postfix=postfix,
    )
    validate_fragment(frag)
    return frag


def validate_fragment_store(url: str) -> None:
    """An absolute s3/gs/azure/azure-ad/file URL whose path ends in ``/`` (Gazette `fragment_store.go`)."""
    reason = _fragment_store_error(url)
    if reason is not None:
        raise ValidationError(reason)


def validate_endpoint(url: str) -> None:
    """An absolute URL with a host (Gazette `endpoint.go`)."""
    reason = _endpoint_error(url)
    if reason is not None:
        raise ValidationError(reason)


# Stores and endpoints are few and repeat on every spec and header: remember verdicts.
@functools.lru_cache(maxsize=4096)
def _fragment_store_error(url: str) -> str | None:
    try:
        _check_fragment_store(url)
    except ValidationError as e:
        return str(e)
    return None


@functools.lru_cache(maxsize=4096)
def _endpoint_error(url: str) -> str | None:
    try:
        _check_endpoint(url)
    except ValidationError as e:
        return str(e)
    return None


def _check_fragment_store(url: str) -> None:
    try:
        u = parse_url(url)
    except URLError as e:
        raise ValidationError(str(e)) from None
    if not u.is_abs():
        raise ValidationError(f"not absolute ({url})")
    scheme = u.scheme
    if scheme in ("s3", "gs", "azure"):
        if u.host == "":
            raise ValidationError(f"missing bucket ({url})")
    elif scheme == "azure-ad":
        parts = u.path[1:].split("/")
        if u.host == "":
            raise ValidationError(f"missing tenant ID ({url})")
        if parts[0] == "":
            raise ValidationError(f"missing storage account ({url})")
        if len(parts) < 2 or parts[1] == "":
            raise ValidationError(f"missing storage container ({url})")
    elif scheme == "file":
        if u.host != "":
            raise ValidationError(f"file scheme cannot have host ({url})")
    else:
        raise ValidationError(f"invalid scheme ({scheme})")
    if not u.path.endswith("/"):
        raise ValidationError(f"path component doesn't end in '/' ({u.path})")


def _check_endpoint(url: str) -> None:
    try:
        u = parse_url(url)
    except URLError as e:
        raise ValidationError(str(e)) from None
    if not u.is_abs():
        raise ValidationError(f"not absolute: {url}")
    if u.host == "":
        raise ValidationError(f"missing host: {url}")


def endpoint_grpc_addr(url: str) -> str:
    """The address gRPC dials for an endpoint (``unix:///path``, ``host:80``, ``host:443``, ``host:port``)."""
    validate_endpoint(url)
    u = parse_url(url)
    if u.scheme == "unix":
        return "unix://" + u.path
    if u.port() == "" and u.scheme == "https":
        return u.host + ":443"
    if u.port() == "" and u.scheme == "http":
        return u.host + ":80"
    return u.host


def endpoint_uses_tls(url: str) -> bool:
    """Whether a valid endpoint is dialed with TLS: ``https://`` is; ``http://`` and ``unix://`` aren't."""
    return parse_url(url).scheme == "https"


def fragment_store_scheme(url: str) -> str:
    """The (lower-cased) scheme of a valid fragment store URL."""
    return parse_url(url).scheme
