"""JSON lines (``application/x-ndjson``): one JSON document per line.

Gazette `message/json_framing.go`. A frame is the document followed by one
``\\n``. Decoding reads through the first newline: content ending before a
newline is an unexpected EOF, and a line that is not JSON is consumed whole
(the next frame starts after its newline).

:func:`encode_json` writes what Go's ``json.Encoder`` writes for the same
document: compact separators, non-ASCII text as UTF-8, and ``<``, ``>``,
``&``, U+2028 and U+2029 escaped as ``\\u003c`` and so on. Floats are written as Go writes a ``float64``
(``1`` not ``1.0``, ``1e-7`` not ``1e-07``, no exponent from 1e-6 up to
1e21). Object keys keep their insertion order: a Go struct's field order
(Go sorts the keys of a map).
"""

from __future__ import annotations

import decimal
import json
import re
from typing import Any

from gazette.broker import protocol as pb
from gazette.message import errors, framing

__all__ = ["JSONFraming", "decode_json", "encode_json", "go_float"]


def _no_constants(name: str) -> Any:
    raise ValueError(f"invalid JSON literal {name}")  # NaN and Infinity aren't JSON (nor Go's).


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_DECODE = json.JSONDecoder(parse_constant=_no_constants).decode


def _go_text(s: str) -> str:
    # Only inside strings can these characters appear in JSON text, so replacing
    # them in the whole document escapes exactly what Go's encoder escapes.
    if "<" in s:
        s = s.replace("<", "\\u003c")
    if ">" in s:
        s = s.replace(">", "\\u003e")
    if "&" in s:
        s = s.replace("&", "\\u0026")
    if "\u2028" in s:
        s = s.replace("\u2028", "\\u2028")
    if "\u2029" in s:
        s = s.replace("\u2029", "\\u2029")
    return s


# A float can only follow one of these in a JSON object; finding none (the usual
# case) proves there is no float to reformat, without tokenizing the document.
_FLOATISH = re.compile(r"[:,\[]-?\d+[.e]")
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:e[-+]\d+)?')


def go_float(text: str) -> str:
    """Python's repr of a float, rewritten as Go's encoding/json writes that float64."""
    f = float(text)
    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        # Exponent form; Go shortens a two-digit negative exponent (e-07 -> e-7).
        if "e-0" in text:
            text = text.replace("e-0", "e-")
        return text
    out = format(decimal.Decimal(text), "f")
    return out[:-2] if out.endswith(".0") else out


def _go_number(m: re.Match[str]) -> str:
    tok = m.group(0)
    if tok[0] == '"' or ("." not in tok and "e" not in tok):
        return tok
    return go_float(tok)


def encode_json(doc: Any) -> bytes:
    """``doc`` as Go's ``json.Encoder`` would write it, without the trailing newline."""
    try:
        text = _go_text(_ENCODE(doc))
    except (TypeError, ValueError) as e:
        raise errors.FramingError(f"json: {e}") from e
    if _FLOATISH.search(text) is not None:
        text = _TOKENS.sub(_go_number, text)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates: Go, meeting invalid UTF-8, writes U+FFFD instead.
        fixed = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
        return fixed.encode("utf-8")


def decode_json(data: bytes) -> Any:
    """Parse one JSON document (invalid UTF-8 becomes U+FFFD, as in Go)."""
    try:
        return _DECODE(data.decode("utf-8", "replace"))
    except ValueError as e:
        raise errors.FramingError(f"invalid JSON: {e}") from e


class JSONFraming:
    """The ``application/x-ndjson`` framing of :class:`~gazette.message.framing.JSONFrameable` messages."""

    content_type = pb.CONTENT_TYPE_JSON_LINES

    def marshal(self, msg: Any) -> bytes:
        marshal_json = getattr(msg, "marshal_json", None)
        if marshal_json is None:
            raise errors.FramingError(
                f"{type(msg).__name__} is not JSON-frameable (no marshal_json)"
            )
        data: bytes = marshal_json()
        if b"\n" in data:
            raise errors.FramingError("marshalled JSON document contains a newline")
        return data + b"\n"

    def new_decoder(self) -> _JSONDecoder:
        return _JSONDecoder()


class _JSONDecoder:
    __slots__ = ()

    def decode(self, buf: bytes, pos: int, final: bool, msg: Any) -> int:
        nl = buf.find(b"\n", pos)
        if nl < 0:
            if final:
                if pos == len(buf):
                    return framing.CLEAN_END
                raise errors.UnexpectedEOF("unexpected EOF", resume=len(buf))
            return framing.NEED_MORE
        end = nl + 1
        try:
            msg.unmarshal_json(buf[pos:end])
        except errors.FramingError as e:
            e.resume = end
            raise
        except Exception as e:
            raise errors.FramingError(f"unmarshal_json: {e!r}", resume=end) from e
        return end
