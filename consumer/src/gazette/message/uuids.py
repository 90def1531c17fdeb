"""Message UUIDs, Clocks and producer IDs, in Gazette's exact bit layout.

A Gazette message UUID is an RFC 4122 version 1 UUID whose fields carry
(Gazette `message/uuid.go`):

* the **Clock**: a 60-bit timestamp (100 ns units since 1582-10-15) in the
  time fields, extended by a 4-bit sequence counter kept in bits 13..10 of
  the clock sequence;
* the transaction **flags** in the low 10 bits of the clock sequence
  (:class:`Flags`), under the RFC 4122 variant bits ``0b10``;
* the **producer ID**: 6 random bytes with the multicast bit set, as node.

Clock values compare in producer order: every publish ticks the clock by one
microsecond (160 units), and :meth:`Clock.update` only moves it forward.
The helpers work on :class:`uuid.UUID` through its 128-bit integer, so that
``uuid.UUID`` and Gazette agree: ``u.version == 1``, ``u.time == clock >> 4``,
``u.node`` is the producer and ``u.clock_seq == ((clock & 0xF) << 10) | flags``.
"""

from __future__ import annotations

import enum
import os
import re
import uuid

from gazette.message import errors

__all__ = [
    "CLOCK_TICK",
    "GREGORIAN_OFFSET",
    "ZERO_UUID",
    "Clock",
    "Flags",
    "build_uuid",
    "get_clock",
    "get_flags",
    "get_producer",
    "new_producer_id",
    "parse_uuid",
    "uuid_texts",
]

#: 100 ns intervals from 1582-10-15T00:00:00Z (RFC 4122's epoch) to the Unix epoch.
GREGORIAN_OFFSET = 122192928000000000
#: What :meth:`Clock.tick` adds: one microsecond (10 units of 100 ns, above 4 sequence bits).
CLOCK_TICK = 160
#: The all-zero UUID: "no UUID" (its messages are processed at least once).
ZERO_UUID = uuid.UUID(int=0)

_MASK64 = (1 << 64) - 1
_MASK48 = (1 << 48) - 1


class Flags(enum.IntEnum):
    """Transaction semantics of a message, the low 10 bits of its UUID's clock sequence."""

    #: Not part of a transaction: committed by itself.
    OUTSIDE_TXN = 0x0
    #: Pending: commits when an ACK_TXN of its producer with a larger clock is read.
    CONTINUE_TXN = 0x1
    #: Commits its producer's pending messages with clocks up to its own; rolls back larger ones.
    ACK_TXN = 0x2


def flags_label(flags: int) -> str:
    """Gazette's text for ``flags`` (metric labels, logs)."""
    if flags == 0:
        return "OUTSIDE_TXN"
    if flags == 1:
        return "CONTINUE_TXN"
    if flags == 2:
        return "ACK_TXN"
    return f"Flags({flags:x})"


class Clock:
    """A producer's monotonic UUID clock: ``(timestamp_60 << 4) | sequence_4``.

    Mutable and shared by reference (a consumer shard hands one to its
    Publisher and updates it once per transaction). Not locked: it belongs
    to one event loop, as everything else here.
    """

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value

    @classmethod
    def from_unix_ns(cls, unix_ns: int) -> Clock:
        clock = cls()
        clock.update(unix_ns)
        return clock

    def update(self, unix_ns: int) -> None:
        """Move the clock to ``unix_ns`` (resetting the sequence bits), unless that is a step back."""
        nxt = ((unix_ns // 100 + GREGORIAN_OFFSET) << 4) & _MASK64
        if nxt > self.value:
            self.value = nxt

    def tick(self) -> int:
        """Advance one microsecond and return the new value."""
        self.value = value = (self.value + CLOCK_TICK) & _MASK64
        return value

    def as_unix_ns(self) -> int:
        """The wall-clock time of this value, in nanoseconds since the Unix epoch (100 ns precision)."""
        return ((self.value >> 4) - GREGORIAN_OFFSET) * 100

    def __repr__(self) -> str:
        return f"Clock({self.value})"


def new_producer_id() -> bytes:
    """Six random bytes with the multicast bit set (so it is never a real MAC address)."""
    b = bytearray(os.urandom(6))
    b[0] |= 0x01
    return bytes(b)


_new = object.__new__
_set = object.__setattr__
_UNKNOWN = uuid.SafeUUID.unknown


def uuid_of_int(i: int) -> uuid.UUID:
    """``uuid.UUID(int=i)`` for a valid 128-bit ``i``, without re-checking it.

    Every message read parses one UUID and every publish builds one: this
    fills the UUID's two slots directly, which takes half the time of its
    validating constructor.
    """
    u = _new(uuid.UUID)
    _set(u, "int", i)
    _set(u, "is_safe", _UNKNOWN)
    return u


if uuid_of_int(1 << 100) != uuid.UUID(int=1 << 100) or repr(uuid_of_int(5)) != repr(
    uuid.UUID(int=5)
):  # pragma: no cover - a future uuid.UUID with other slots.

    def uuid_of_int(i: int) -> uuid.UUID:
        return uuid.UUID(int=i)


def build_uuid(producer: bytes, clock: int, flags: int) -> uuid.UUID:
    """The version 1 UUID of ``producer`` (6 bytes) at ``clock`` with ``flags`` (10 bits)."""
    if not 0 <= flags <= 0x3FF:
        raise ValueError(f"only 10 low bits may be used for flags ({flags:#x})")
    if len(producer) != 6:
        raise ValueError(f"producer ID must be 6 bytes (got {len(producer)})")
    return uuid_of_int(_build_int(int.from_bytes(producer, "big"), clock & _MASK64, flags))


def uuid_texts(producer: bytes, flags: int, first: int, count: int) -> list[bytes]:
    """Texts of ``build_uuid(producer, c, flags)`` for ``count`` clocks ``c`` from ``first``.

    The clocks rise by :data:`CLOCK_TICK` (as :meth:`Clock.tick` moves them):
    the canonical hyphenated form as ASCII bytes, made without UUID objects and
    with the parts that ticks leave alone formatted once per run of them, for
    writing many UUIDs of one producer (``gazctl attach-uuids``).
    """
    build_uuid(producer, 0, flags)  # The same checks of its arguments.
    node = b"%012x" % int.from_bytes(producer, "big")
    out: list[bytes] = []
    clock = first & _MASK64
    while len(out) < count:
        # Ticks move time_low alone until it wraps (every 429 s of clock).
        low = (clock >> 4) & 0xFFFFFFFF
        n = min(count - len(out), (0xFFFFFFFF - low) // (CLOCK_TICK >> 4) + 1)
        tail = b"-%04x-%04x-%04x-%s" % (
            (clock >> 36) & 0xFFFF,
            ((clock >> 52) & 0x0FFF) | 0x1000,
            0x8000 | ((clock & 0xF) << 10) | flags,
            node,
        )
        step = CLOCK_TICK >> 4
        out += [b"%08x%s" % (t, tail) for t in range(low, low + step * n, step)]
        clock = (clock + CLOCK_TICK * n) & _MASK64
    return out


def _build_int(producer: int, clock: int, flags: int) -> int:
    return (
        ((clock >> 4) & 0xFFFFFFFF) << 96  # time_low: timestamp bits 0..31
        | ((clock >> 36) & 0xFFFF) << 80  # time_mid: timestamp bits 32..47
        | (((clock >> 52) & 0x0FFF) | 0x1000) << 64  # time_hi: bits 48..59, and version 1
        | (0x8000 | ((clock & 0xF) << 10) | flags) << 48  # variant, sequence, flags
        | producer
    )


def clock_of_int(i: int) -> int:
    """The Clock of a UUID's 128-bit integer (the inverse of the layout of :func:`build_uuid`)."""
    return (
        ((i >> 92) & 0xFFFFFFFF0)  # time_low, to bits 4..35
        | ((i >> 44) & 0xFFFF000000000)  # time_mid, to bits 36..51
        | ((i >> 12) & 0xFFF0000000000000)  # time_hi without its version, to bits 52..63
        | ((i >> 58) & 0xF)  # sequence counter
    )


def get_clock(u: uuid.UUID) -> int:
    return clock_of_int(u.int)


def get_producer(u: uuid.UUID) -> bytes:
    return (u.int & _MASK48).to_bytes(6, "big")


def get_flags(u: uuid.UUID) -> int:
    return (u.int >> 48) & 0x3FF


_HEX36 = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"
)
_HEX32 = re.compile(r"[0-9a-fA-F]{32}\Z")


def parse_uuid(text: str) -> uuid.UUID:
    """Parse a UUID's text as Go's ``uuid.Parse`` does (and with its error wording).

    Accepted: ``xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``, the same in braces or
    after ``urn:uuid:``, and 32 bare hex digits.
    """
    n = len(text)
    if n == 36:
        body = text
    elif n == 38:
        if text[0] != "{" or text[37] != "}":
            raise errors.InvalidUUID("invalid UUID format")
        body = text[1:37]
    elif n == 45:
        if text[:9].lower() != "urn:uuid:":
            raise errors.InvalidUUID(f"invalid urn prefix: {text[:9]!r}")
        body = text[9:]
    elif n == 32:
        if _HEX32.match(text) is None:
            raise errors.InvalidUUID("invalid UUID format")
        return uuid_of_int(int(text, 16))
    else:
        raise errors.InvalidUUID(f"invalid UUID length: {n}")
    if _HEX36.match(body) is None:
        raise errors.InvalidUUID("invalid UUID format")
    return uuid_of_int(int(body.replace("-", ""), 16))
