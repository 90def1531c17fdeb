"""Go's text formatting of values, where Gazette's error messages embed them."""

from __future__ import annotations

from typing import Any

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
    """Go's compact text form of a message (``proto.CompactTextString``, which is
    also what ``%v`` and gogo's ``String()`` print): ``name:value `` per set field
    in declaration order, nested messages as ``name:<...> ``, each field followed
    by a space (the last one too)."""
    out: list[str] = []
    _compact(msg, out)
    return "".join(out)


def _compact(msg: Message, out: list[str]) -> None:
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        if field.is_repeated:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                key_f, value_f = (
                    field.message_type.fields_by_name["key"],
                    field.message_type.fields_by_name["value"],
                )
                for k in sorted(value):
                    out.append(f"{field.name}:<")
                    _compact_value(key_f, k, out)
                    _compact_value(value_f, value[k], out)
                    out.append("> ")
                continue
            for item in value:
                _compact_value(field, item, out)
        elif field.message_type is not None or field.has_presence:
            if msg.HasField(field.name):
                _compact_value(field, value, out)
        elif value:  # proto3 scalars: zero values are not written.
            _compact_value(field, value, out)


def _compact_value(field: Any, value: Any, out: list[str]) -> None:
    if field.message_type is not None:
        out.append(f"{field.name}:<")
        _compact(value, out)
        out.append("> ")
        return
    if field.type == field.TYPE_STRING:
        text = _text_quote(value.encode())
    elif field.type == field.TYPE_BYTES:
        text = _text_quote(value)
    elif field.type == field.TYPE_BOOL:
        text = "true" if value else "false"
    elif field.enum_type is not None:
        text = enum_text(_EnumNames(field.enum_type), value)
    else:
        text = str(value)
    out.append(f"{field.name}:{text} ")


class _EnumNames:
    """An enum descriptor seen as a wrapper with ``Name`` (for :func:`enum_text`)."""

    def __init__(self, descriptor: Any) -> None:
        self._d = descriptor

    def Name(self, number: int) -> str:
        v = self._d.values_by_number.get(number)
        if v is None:
            raise ValueError(number)
        return str(v.name)


def _text_quote(b: bytes) -> str:
    """The text format's quoting of a string: C escapes, other bytes outside ASCII
    printables in octal."""
    out = ['"']
    for c in b:
        if c == 0x0A:
            out.append("\\n")
        elif c == 0x0D:
            out.append("\\r")
        elif c == 0x09:
            out.append("\\t")
        elif c == 0x22:
            out.append('\\"')
        elif c == 0x5C:
            out.append("\\\\")
        elif 0x20 <= c < 0x7F:
            out.append(chr(c))
        else:
            out.append(f"\\{c:03o}")
    out.append('"')
    return "".join(out)
