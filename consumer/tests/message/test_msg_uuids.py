"""UUIDs, Clocks and producer IDs: Gazette's vectors (message/uuid_test.go) and Python's uuid fields."""

from __future__ import annotations

import uuid

import pytest

from gazette import message
from gazette.message import errors, uuids

NS = 1_000_000_000


def unix(secs: int, nanos: int) -> int:
    return secs * NS + nanos


def test_producer_ids_are_random_and_multicast() -> None:
    ids = {message.new_producer_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(p) == 6 and p[0] & 0x01 for p in ids)


def test_clock_ticks_and_updates() -> None:
    clock = message.Clock()
    # Each tick is one microsecond: 10 units of 100 ns, above 4 sequence bits.
    assert clock.tick() == 160
    assert clock.tick() == 320

    clock.update(unix(12, 300))
    # Precision is 100 ns.
    assert clock.value == message.Clock.from_unix_ns(unix(12, 399)).value
    assert clock.as_unix_ns() == unix(12, 300)
    assert clock.value < message.Clock.from_unix_ns(unix(12, 400)).value
    assert clock.value > message.Clock.from_unix_ns(unix(12, 299)).value

    clock.tick()
    assert clock.as_unix_ns() == unix(12, 1300)
    assert clock.value > message.Clock.from_unix_ns(unix(12, 1299)).value
    assert clock.value < message.Clock.from_unix_ns(unix(12, 1400)).value

    clock.update(unix(11, 100))  # Never backwards.
    assert clock.as_unix_ns() == unix(12, 1300)

    clock.update(unix(12, 5000))  # Forward: the sequence bits reset.
    assert clock.value == message.Clock.from_unix_ns(unix(12, 5000)).value
    assert clock.value & 0xF == 0


def test_clock_of_a_time_is_the_rfc4122_timestamp() -> None:
    c = message.Clock.from_unix_ns(unix(1567304621, 981273734))
    assert c.value == ((1567304621 * NS + 981273734) // 100 + 0x01B21DD213814000) << 4


def test_building_against_go_vectors_and_python_uuid() -> None:
    producer = message.new_producer_id()
    clock = message.Clock.from_unix_ns(unix(1567304621, 981273734))
    clock.tick()
    clock.tick()
    flags = 682  # 0b1010101010

    u = message.build_uuid(producer, clock.value, flags)
    assert message.get_clock(u) == clock.value
    assert message.get_producer(u) == producer
    assert message.get_flags(u) == flags

    # Python's uuid agrees on every field.
    assert u.version == 1
    assert u.variant == uuid.RFC_4122
    assert u.node == int.from_bytes(producer, "big")
    assert u.time == clock.value >> 4
    assert u.clock_seq == ((clock.value & 0xF) << 10) | flags
    # Two ticks of one microsecond after 981273734 ns (kept to 100 ns): 981275700.
    unix_ns = (u.time - uuids.GREGORIAN_OFFSET) * 100
    assert divmod(unix_ns, NS) == (1567304621, 981275700)


def test_the_exact_bytes() -> None:
    producer = bytes.fromhex("010203040506")
    # Clock 160 (one tick from zero), OUTSIDE_TXN: time_low 0xa.
    assert str(message.build_uuid(producer, 160, 0)) == "0000000a-0000-1000-8000-010203040506"
    # Clock 320, ACK_TXN.
    assert str(message.build_uuid(producer, 320, 2)) == "00000014-0000-1000-8002-010203040506"
    # Sequence bits land in bits 13..10 of the clock sequence.
    assert str(message.build_uuid(producer, 0x15, 1)) == "00000001-0000-1000-9401-010203040506"
    # Every field of a full-range clock, built independently with Python's uuid.
    clock = 0x1E9CC5F83FC2F95A
    ts = clock >> 4
    expect = uuid.UUID(
        fields=(
            ts & 0xFFFFFFFF,
            (ts >> 32) & 0xFFFF,
            ((ts >> 48) & 0x0FFF) | 0x1000,
            0x80 | ((clock & 0xF) << 2) | (0x3FF >> 8),
            0x3FF & 0xFF,
            0x010203040506,
        )
    )
    got = message.build_uuid(producer, clock, 0x3FF)
    assert got == expect
    assert message.get_clock(expect) == clock
    assert message.get_flags(expect) == 0x3FF


def test_zero_uuid_and_bad_arguments() -> None:
    assert message.get_clock(message.ZERO_UUID) == 0
    assert message.get_producer(message.ZERO_UUID) == bytes(6)
    assert message.get_flags(message.ZERO_UUID) == 0
    with pytest.raises(ValueError, match="10 low bits"):
        message.build_uuid(bytes(6), 1, 0x400)
    with pytest.raises(ValueError, match="6 bytes"):
        message.build_uuid(bytes(5), 1, 0)


def test_flags() -> None:
    assert (message.Flags.OUTSIDE_TXN, message.Flags.CONTINUE_TXN, message.Flags.ACK_TXN) == (
        0,
        1,
        2,
    )
    assert [uuids.flags_label(f) for f in (0, 1, 2, 0x100)] == [
        "OUTSIDE_TXN",
        "CONTINUE_TXN",
        "ACK_TXN",
        "Flags(100)",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "0000000a-0000-1000-8000-010203040506",
        "0000000A-0000-1000-8000-010203040506",
        "{0000000a-0000-1000-8000-010203040506}",
        "urn:uuid:0000000a-0000-1000-8000-010203040506",
        "0000000a000010008000010203040506",
    ],
)
def test_parse_uuid_forms(text: str) -> None:
    assert message.parse_uuid(text) == uuid.UUID("0000000a-0000-1000-8000-010203040506")


@pytest.mark.parametrize(
    ("text", "err"),
    [
        ("not-a-uuid", "invalid UUID length: 10"),
        ("", "invalid UUID length: 0"),
        ("0000000a-0000-1000-8000_010203040506", "invalid UUID format"),
        ("0000000a-0000-1000-8000-01020304050g", "invalid UUID format"),
        ("+000000a000010008000010203040506", "invalid UUID format"),
        ("[0000000a-0000-1000-8000-010203040506]", "invalid UUID format"),
        ("urn:uuie:0000000a-0000-1000-8000-010203040506", "invalid urn prefix: 'urn:uuie:'"),
    ],
)
def test_parse_uuid_errors(text: str, err: str) -> None:
    with pytest.raises(errors.InvalidUUID) as exc:
        message.parse_uuid(text)
    assert str(exc.value) == err


def test_uuid_texts_are_those_of_ticking_build_uuid() -> None:
    producer = uuids.new_producer_id()
    for flags in (uuids.Flags.OUTSIDE_TXN, uuids.Flags.ACK_TXN, 0x3FF):
        for start in (
            uuids.Clock.from_unix_ns(1_700_000_000_123_456_789).value + 7,  # Sequence bits set.
            (0xFFFFFFFF - 25 * 10) << 4,  # time_low wraps within the run.
            ((1 << 64) - 1) - 40 * uuids.CLOCK_TICK,  # The whole clock wraps too.
        ):
            texts = uuids.uuid_texts(producer, flags, start, 60)
            clock = uuids.Clock(start - uuids.CLOCK_TICK)
            want = [
                str(uuids.build_uuid(producer, clock.tick(), flags)).encode() for _ in range(60)
            ]
            assert texts == want
    with pytest.raises(ValueError, match="flags"):
        uuids.uuid_texts(producer, 0x400, 0, 1)
