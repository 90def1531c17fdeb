"""Go duration text, both ways (Go's own time package cases), and protobuf Duration helpers."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gazette.broker import protocol as pb

NS, US, MS, S, M, H = 1, 1_000, 1_000_000, 1_000_000_000, 60_000_000_000, 3_600_000_000_000


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("0s", 0),
        ("1ns", 1),
        ("1.1µs", 1100),
        ("2.2ms", 2_200_000),
        ("3.3s", 3_300_000_000),
        ("4m5s", 4 * M + 5 * S),
        ("4m5.001s", 4 * M + 5001 * MS),
        ("5h6m7.001s", 5 * H + 6 * M + 7001 * MS),
        ("8m0.000000001s", 8 * M + 1),
        ("1m0s", M),
        ("720h0m0s", 720 * H),
        ("1.5s", 1500 * MS),
        ("100ms", 100 * MS),
        ("2562047h47m16.854775807s", (1 << 63) - 1),
        ("-2562047h47m16.854775808s", -(1 << 63)),
        ("-1s", -S),
    ],
)
def test_format(text: str, nanos: int) -> None:
    assert pb.format_duration_nanos(nanos) == text
    assert pb.format_duration(pb.duration_from_nanos(nanos)) == text
    assert pb.parse_duration_nanos(text) == nanos


def test_format_seconds() -> None:
    assert pb.format_duration(60) == "1m0s"
    assert pb.format_duration(1.5) == "1.5s"
    assert pb.format_duration(0.1) == "100ms"
    assert pb.format_duration(0) == "0s"
    assert pb.format_duration(30 * 24 * 3600) == "720h0m0s"


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("0", 0),
        ("5s", 5 * S),
        ("30s", 30 * S),
        ("1478s", 1478 * S),
        ("-5s", -5 * S),
        ("+5s", 5 * S),
        ("-0", 0),
        ("+0", 0),
        ("5.0s", 5 * S),
        ("5.6s", 5 * S + 600 * MS),
        ("5.s", 5 * S),
        (".5s", 500 * MS),
        ("1.004s", 1004 * MS),
        ("100.00100s", 100 * S + 1 * MS),
        ("10ns", 10),
        ("11us", 11 * US),
        ("12µs", 12 * US),
        ("12μs", 12 * US),
        ("13ms", 13 * MS),
        ("15m", 15 * M),
        ("16h", 16 * H),
        ("1h30m", 90 * M),
        ("500ms", 500 * MS),
        ("10.5s4m", 4 * M + 10 * S + 500 * MS),
        ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
        ("1h2m3s4ms5us6ns", H + 2 * M + 3 * S + 4 * MS + 5 * US + 6),
        ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
        ("52763797000ns", 52763797000),
        ("0.3333333333333333333h", 20 * M),
        ("9007199254740993ns", (1 << 53) + 1),
        ("9223372036854775807ns", (1 << 63) - 1),
        ("9223372036854775.807us", (1 << 63) - 1),
        ("9223372036s854ms775us807ns", (1 << 63) - 1),
        ("-9223372036854775808ns", -(1 << 63)),
        ("-9223372036854775.808us", -(1 << 63)),
        ("0.100000000000000000000h", 6 * M),
        ("0.830103483285477580700h", 49 * M + 48 * S + 372539827),
    ],
)
def test_parse(text: str, nanos: int) -> None:
    assert pb.parse_duration_nanos(text) == nanos
    assert pb.parse_duration(text) == nanos / 1e9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("3", 'time: missing unit in duration "3"'),
        ("-", 'time: invalid duration "-"'),
        ("s", 'time: invalid duration "s"'),
        (".", 'time: invalid duration "."'),
        ("-.", 'time: invalid duration "-."'),
        (".s", 'time: invalid duration ".s"'),
        ("+.s", 'time: invalid duration "+.s"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("1é", 'time: unknown unit "\\xc3\\xa9" in duration "1\\xc3\\xa9"'),
        ("9223372036854775810ns", 'time: invalid duration "9223372036854775810ns"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'),
        ("9223372036854776us", 'time: invalid duration "9223372036854776us"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
        ("9223372036854775.808us", 'time: invalid duration "9223372036854775.808us"'),
        ("9223372036854ms775us808ns", 'time: invalid duration "9223372036854ms775us808ns"'),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        pb.parse_duration(text)
    assert str(info.value) == message


def test_protobuf_durations() -> None:
    d = pb.duration_from_seconds(1.5)
    assert (d.seconds, d.nanos) == (1, 500_000_000)
    d = pb.duration_from_nanos(-1_500_000_000)
    assert (d.seconds, d.nanos) == (-1, -500_000_000)
    assert pb.duration_nanos(d) == -1_500_000_000
    assert pb.duration_seconds(d) == -1.5


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_round_trip(nanos: int) -> None:
    text = pb.format_duration_nanos(nanos)
    assert pb.parse_duration_nanos(text) == nanos
    assert pb.duration_nanos(pb.duration_from_nanos(nanos)) == nanos


@given(st.integers(0, 10**6), st.integers(0, 59), st.integers(0, 59), st.integers(0, 999))
def test_parse_composites(h: int, m: int, s: int, ms: int) -> None:
    text = f"{h}h{m}m{s}s{ms}ms"
    nanos = h * H + m * M + s * S + ms * MS
    assert pb.parse_duration_nanos(text) == nanos
    assert pb.parse_duration_nanos(pb.format_duration_nanos(nanos)) == nanos
