"""Go's text formatting of values, where Gazette's error messages embed them."""

from __future__ import annotations

from typing import Any

from google.protobuf import text_format
from google.protobuf.message import Message

__all__ = ["enum_text", "go_quote", "message_text"]

_SIMPLE_ESCAPES = {7: "\\a", 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t", 11: "\\v"}


def go_quote(s: str) -> str:
    """Go's ``%q`` of a string: double-quoted, printable runes kept, others escaped."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    out = ['"']
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[code])
            elif code < 0x80:
                out.append(f"\\x{code:02x}")
            elif code <= 0xFFFF:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def enum_text(wrapper: Any, value: int) -> str:
    """Go's String() of an enum value: its name, or its number when unknown."""
    try:
        return str(wrapper.Name(value))
    except ValueError:
        return str(value)


def message_text(msg: Message) -> str:
    """A one-line text form of a message (stands in for Go's compact text format)."""
    return text_format.MessageToString(msg, as_one_line=True)
