"""Go `time.Duration` text, and google.protobuf.Duration helpers.

Gazette prints durations in its messages and YAML the way Go does
(``1m0s``, ``720h0m0s``, ``1.5s``, ``100ms``, ``0s``); these functions speak the
same text in both directions.
"""

from __future__ import annotations

from google.protobuf import duration_pb2

__all__ = [
    "Duration",
    "duration_from_nanos",
    "duration_from_seconds",
    "duration_nanos",
    "duration_seconds",
    "format_duration",
    "format_duration_nanos",
    "parse_duration",
    "parse_duration_nanos",
]

Duration = duration_pb2.Duration

NANOSECOND = 1
MICROSECOND = 1_000
MILLISECOND = 1_000_000
SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_MAX_INT64 = (1 << 63) - 1
_UNITS: dict[str, int] = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # micro sign
    "\u03bcs": MICROSECOND,  # Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}


def duration_nanos(d: Duration) -> int:
    """Nanoseconds of a protobuf Duration (exact)."""
    return d.seconds * SECOND + d.nanos


def duration_seconds(d: Duration) -> float:
    """Seconds of a protobuf Duration, as a float."""
    return d.seconds + d.nanos / SECOND


def duration_from_nanos(nanos: int) -> Duration:
    """A protobuf Duration of `nanos` nanoseconds (seconds and nanos share a sign)."""
    seconds, rem = divmod(abs(nanos), SECOND)
    sign = -1 if nanos < 0 else 1
    return Duration(seconds=sign * seconds, nanos=sign * rem)


def duration_from_seconds(seconds: float) -> Duration:
    """A protobuf Duration of `seconds`, rounded to the nanosecond."""
    return duration_from_nanos(round(seconds * SECOND))


def _frac(v: int, prec: int) -> tuple[str, int]:
    # The fraction of v / 10**prec as ".ddd" without trailing zeros, and the integer part.
    q, r = divmod(v, 10**prec)
    digits = f"{r:0{prec}d}".rstrip("0") if prec else ""
    return ("." + digits if digits else ""), q


def format_duration_nanos(nanos: int) -> str:
    """Go's `time.Duration.String` of `nanos` nanoseconds."""
    if nanos == 0:
        return "0s"
    neg = nanos < 0
    u = -nanos if neg else nanos
    if u < SECOND:
        if u < MICROSECOND:
            prec, unit = 0, "ns"
        elif u < MILLISECOND:
            prec, unit = 3, "\u00b5s"
        else:
            prec, unit = 6, "ms"
        frac, q = _frac(u, prec)
        text = f"{q}{frac}{unit}"
    else:
        frac, q = _frac(u, 9)
        text = f"{q % 60}{frac}s"
        q //= 60
        if q > 0:
            text = f"{q % 60}m" + text
            q //= 60
            if q > 0:
                text = f"{q}h" + text
    return "-" + text if neg else text


def format_duration(value: float | Duration) -> str:
    """Go's `time.Duration.String` of seconds (int or float) or a protobuf Duration."""
    if isinstance(value, Duration):
        return format_duration_nanos(duration_nanos(value))
    if isinstance(value, int):
        return format_duration_nanos(value * SECOND)
    return format_duration_nanos(round(value * SECOND))


def _leading_int(s: str, i: int) -> tuple[int, int, bool]:
    # Digits from s[i:]: (value, new index, overflowed).
    x, j = 0, i
    while j < len(s) and "0" <= s[j] <= "9":
        x = x * 10 + (ord(s[j]) - 48)
        if x > _MAX_INT64 + 1:
            return 0, j, True
        j += 1
    return x, j, False


def _time_quote(s: str) -> str:
    # Go's time.quote: non-ASCII and control characters as \x escapes of their UTF-8 bytes.
    out = ['"']
    for ch in s:
        if ch >= "\x80" or ch < " ":
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
        elif ch in '"\\':
            out.append("\\" + ch)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def parse_duration_nanos(text: str) -> int:
    """Parse Go duration syntax (``1h30m``, ``500ms``, ``-1.5s``, ``0``) to nanoseconds.

    Raises ValueError with Go's message (e.g. ``time: invalid duration "x"``).
    """
    quoted = _time_quote(text)
    i, n = 0, len(text)
    neg = False
    if i < n and text[i] in "-+":
        neg = text[i] == "-"
        i += 1
    if text[i:] == "0":
        return 0
    if i == n:
        raise ValueError(f"time: invalid duration {quoted}")
    total = 0
    while i < n:
        if not (text[i] == "." or "0" <= text[i] <= "9"):
            raise ValueError(f"time: invalid duration {quoted}")
        start = i
        v, i, over = _leading_int(text, i)
        if over:
            raise ValueError(f"time: invalid duration {quoted}")
        pre = i != start
        post = False
        f, scale = 0, 1.0
        if i < n and text[i] == ".":
            i += 1
            fstart = i
            overflow = False
            while i < n and "0" <= text[i] <= "9":
                if not overflow:
                    y = f * 10 + (ord(text[i]) - 48)
                    if f > _MAX_INT64 // 10 or y > 1 << 63:
                        overflow = True  # Further digits can't add precision.
                    else:
                        f = y
                        scale *= 10
                i += 1
            post = i != fstart
        if not pre and not post:
            raise ValueError(f"time: invalid duration {quoted}")
        ustart = i
        while i < n and text[i] != "." and not ("0" <= text[i] <= "9"):
            i += 1
        if ustart == i:
            raise ValueError(f"time: missing unit in duration {quoted}")
        u = text[ustart:i]
        unit = _UNITS.get(u)
        if unit is None:
            raise ValueError(f"time: unknown unit {_time_quote(u)} in duration {quoted}")
        if v > (1 << 63) // unit:
            raise ValueError(f"time: invalid duration {quoted}")
        v *= unit
        if f > 0:
            # Go computes the fraction in float64 too, to stay exact for hours.
            v += int(float(f) * (float(unit) / scale))
            if v > 1 << 63:
                raise ValueError(f"time: invalid duration {quoted}")
        total += v
        if total > 1 << 63:
            raise ValueError(f"time: invalid duration {quoted}")
    if neg:
        return -total
    if total > _MAX_INT64:
        raise ValueError(f"time: invalid duration {quoted}")
    return total


def parse_duration(text: str) -> float:
    """Parse Go duration syntax to float seconds (see `parse_duration_nanos`)."""
    return parse_duration_nanos(text) / SECOND
