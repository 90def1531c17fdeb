"""A restricted evaluator of Go `text/template`, for `JournalSpec.Fragment.path_postfix_template`.

Gazette renders the postfix template of a journal (with Go's text/template)
when it persists a fragment, and stores the fragment under
``<journal>/<postfix>/``. Users write simple templates; this module evaluates
those and rejects the rest with a ValidationError, rather than guessing:

- literal text, with ``{{-`` / ``-}}`` whitespace trimming and ``{{/* comments */}}``;
- field paths over the data Gazette passes: ``{{ .Spool.Journal }}``,
  ``{{ .Spool.Begin }}``, ``{{ .Name }}``, ``{{ .Replication }}``,
  ``{{ .Fragment.Length }}``, ...
  (``.Spool`` is the fragment being persisted plus ``FirstAppendTime`` and
  ``Registers``; the top level is the JournalSpec);
- time methods on ``.Spool.FirstAppendTime``: ``Format "2006-01-02"`` with Go's
  layout language (``2006 06 01 1 Jan January 02 2 _2 002 15 03 3 04 4 05 5
  PM pm Mon Monday MST -0700 -07:00 Z07:00 .000 .999`` ...), and ``UTC``,
  ``Year``, ``Month``, ``Day``, ``Hour``, ``Minute``, ``Second``, ``YearDay``,
  ``Weekday``, ``Unix``, ``UnixMilli``, ``Nanosecond``, ``String``.

Not supported (rejected): pipelines ``|``, functions (``printf``, ``index``...),
variables, and control actions (``if``, ``range``, ``with``, ``define``...).

    parts = compile_template('date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}')
    render_postfix_template(tpl, spec, fragment, first_append_time, registers)
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Callable, Mapping
from typing import Any

import regex

from gazette.broker.protocol import protocol_pb2
from gazette.broker.protocol.durations import duration_nanos, format_duration_nanos
from gazette.broker.protocol.errors import ValidationError

__all__ = [
    "GoTemplate",
    "compile_template",
    "format_go_time",
    "render_postfix_template",
    "validate_postfix_template",
]

_UTC = datetime.UTC
_ZERO_TIME = datetime.datetime(1, 1, 1, tzinfo=_UTC)
_GO_EPOCH_OFFSET = 62135596800  # Seconds from 0001-01-01 to 1970-01-01.

_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July",
    "August", "September", "October", "November", "December",
]  # fmt: skip
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _err(msg: str, line: int = 1) -> ValidationError:
    # Go's text/template names the template and line ("template: postfix:1: ...").
    return ValidationError(f"template: postfix:{line}: {msg}")


# ---------------------------------------------------------------------------
# Go time layouts.


@dataclasses.dataclass(frozen=True, slots=True)
class _Std:
    code: str  # One of the names below.
    arg: str = ""  # Separator and digit count for fractional seconds.


def _starts_lower(s: str) -> bool:
    return bool(s) and "a" <= s[0] <= "z"


def _next_chunk(layout: str) -> tuple[str, _Std | None, str]:
    n = len(layout)
    for i, c in enumerate(layout):
        rest = layout[i:]
        if c == "J":
            if rest.startswith("January"):
                return layout[:i], _Std("January"), layout[i + 7 :]
            if rest.startswith("Jan") and not _starts_lower(layout[i + 3 :]):
                return layout[:i], _Std("Jan"), layout[i + 3 :]
        elif c == "M":
            if rest.startswith("Mon"):
                if rest.startswith("Monday"):
                    return layout[:i], _Std("Monday"), layout[i + 6 :]
                if not _starts_lower(layout[i + 3 :]):
                    return layout[:i], _Std("Mon"), layout[i + 3 :]
            if rest.startswith("MST"):
                return layout[:i], _Std("MST"), layout[i + 3 :]
        elif c == "0":
            if i + 1 < n and "1" <= layout[i + 1] <= "6":
                return layout[:i], _Std("0" + layout[i + 1]), layout[i + 2 :]
            if rest.startswith("002"):
                return layout[:i], _Std("002"), layout[i + 3 :]
        elif c == "1":
            if rest.startswith("15"):
                return layout[:i], _Std("15"), layout[i + 2 :]
            return layout[:i], _Std("1"), layout[i + 1 :]
        elif c == "2":
            if rest.startswith("2006"):
                return layout[:i], _Std("2006"), layout[i + 4 :]
            return layout[:i], _Std("2"), layout[i + 1 :]
        elif c == "_":
            if rest.startswith("_2"):
                if rest.startswith("_2006"):
                    return layout[: i + 1], _Std("2006"), layout[i + 5 :]
                return layout[:i], _Std("_2"), layout[i + 2 :]
            if rest.startswith("__2"):
                return layout[:i], _Std("__2"), layout[i + 3 :]
        elif c in "345":
            return layout[:i], _Std(c), layout[i + 1 :]
        elif c == "P":
            if rest.startswith("PM"):
                return layout[:i], _Std("PM"), layout[i + 2 :]
        elif c == "p":
            if rest.startswith("pm"):
                return layout[:i], _Std("pm"), layout[i + 2 :]
        elif c in "-Z":
            for std in ("070000", "07:00:00", "0700", "07:00", "07"):
                if rest.startswith(c + std):
                    return layout[:i], _Std(c + std), layout[i + 1 + len(std) :]
        elif c in ".," and i + 1 < n and layout[i + 1] in "09":
            ch = layout[i + 1]
            j = i + 1
            while j < n and layout[j] == ch:
                j += 1
            if not (j < n and "0" <= layout[j] <= "9"):
                return layout[:i], _Std("frac" + ch, layout[i:j]), layout[j:]
    return layout, None, ""


@functools.lru_cache(maxsize=256)
def _parse_layout(layout: str) -> tuple[str | _Std, ...]:
    out: list[str | _Std] = []
    while layout:
        prefix, std, layout = _next_chunk(layout)
        if prefix:
            out.append(prefix)
        if std is not None:
            out.append(std)
    return tuple(out)


def _tz_name(t: datetime.datetime) -> str:
    tz = t.tzinfo
    if (
        tz is None
        or tz is _UTC
        or (t.utcoffset() == datetime.timedelta(0) and (tz.tzname(t) in ("UTC", "UTC+00:00")))
    ):
        return "UTC"
    if isinstance(tz, datetime.timezone):
        return ""  # A fixed offset has no abbreviation; Go prints it numerically.
    return tz.tzname(t) or ""


def _offset_seconds(t: datetime.datetime) -> int:
    off = t.utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def _fmt_tz(code: str, offset: int) -> str:
    if code.startswith("Z") and offset == 0:
        return "Z"
    sign = "-" if offset < 0 else "+"
    zone = abs(offset)
    hh, mm, ss = zone // 3600, (zone // 60) % 60, zone % 60
    body = code[1:]
    if body == "07":
        return f"{sign}{hh:02d}"
    if body == "0700":
        return f"{sign}{hh:02d}{mm:02d}"
    if body == "07:00":
        return f"{sign}{hh:02d}:{mm:02d}"
    if body == "070000":
        return f"{sign}{hh:02d}{mm:02d}{ss:02d}"
    return f"{sign}{hh:02d}:{mm:02d}:{ss:02d}"  # 07:00:00


def format_go_time(t: datetime.datetime, layout: str) -> str:
    """Format `t` with a Go time layout (``2006-01-02T15:04:05Z07:00`` style).

    A naive datetime is taken as UTC.
    """
    if t.tzinfo is None:
        t = t.replace(tzinfo=_UTC)
    out: list[str] = []
    for part in _parse_layout(layout):
        if isinstance(part, str):
            out.append(part)
            continue
        code = part.code
        if code == "2006":
            out.append(f"{t.year:04d}")
        elif code == "06":
            out.append(f"{t.year % 100:02d}")
        elif code == "January":
            out.append(_MONTHS[t.month - 1])
        elif code == "Jan":
            out.append(_MONTHS[t.month - 1][:3])
        elif code == "1":
            out.append(str(t.month))
        elif code == "01":
            out.append(f"{t.month:02d}")
        elif code == "Monday":
            out.append(_DAYS[t.weekday()])
        elif code == "Mon":
            out.append(_DAYS[t.weekday()][:3])
        elif code == "2":
            out.append(str(t.day))
        elif code == "_2":
            out.append(f"{t.day:2d}")
        elif code == "02":
            out.append(f"{t.day:02d}")
        elif code == "__2":
            out.append(f"{t.timetuple().tm_yday:3d}")
        elif code == "002":
            out.append(f"{t.timetuple().tm_yday:03d}")
        elif code == "15":
            out.append(f"{t.hour:02d}")
        elif code in ("3", "03"):
            h = t.hour % 12 or 12
            out.append(str(h) if code == "3" else f"{h:02d}")
        elif code == "4":
            out.append(str(t.minute))
        elif code == "04":
            out.append(f"{t.minute:02d}")
        elif code == "5":
            out.append(str(t.second))
        elif code == "05":
            out.append(f"{t.second:02d}")
        elif code == "PM":
            out.append("PM" if t.hour >= 12 else "AM")
        elif code == "pm":
            out.append("pm" if t.hour >= 12 else "am")
        elif code == "MST":
            name = _tz_name(t)
            out.append(name if name else _fmt_tz("-0700", _offset_seconds(t)))
        elif code[0] in "-Z":
            out.append(_fmt_tz(code, _offset_seconds(t)))
        elif code.startswith("frac"):
            sep, digits = part.arg[0], len(part.arg) - 1
            nanos = f"{t.microsecond * 1000:09d}"[:digits]
            if code == "frac9":
                nanos = nanos.rstrip("0")
                if nanos:
                    out.append(sep + nanos)
            else:
                out.append(sep + nanos)
    return "".join(out)


def _go_time_string(t: datetime.datetime) -> str:
    return format_go_time(t, "2006-01-02 15:04:05.999999999 -0700 MST")


# ---------------------------------------------------------------------------
# Values Go's template would see, and how it prints them.


@dataclasses.dataclass(frozen=True, slots=True)
class _Enum:
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class _GoDuration:
    nanos: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Opaque:
    type_name: str  # A value we can reach but not print (lists, sums, label sets).


def _unix(t: datetime.datetime) -> int:
    if t.tzinfo is None:
        t = t.replace(tzinfo=_UTC)
    return int((t - _ZERO_TIME).total_seconds() // 1) - _GO_EPOCH_OFFSET


_TIME_METHODS: dict[str, Callable[[datetime.datetime], Any]] = {
    "UTC": lambda t: (t if t.tzinfo is not None else t.replace(tzinfo=_UTC)).astimezone(_UTC),
    "Year": lambda t: t.year,
    "Month": lambda t: _Enum(_MONTHS[t.month - 1]),
    "Day": lambda t: t.day,
    "Hour": lambda t: t.hour,
    "Minute": lambda t: t.minute,
    "Second": lambda t: t.second,
    "Nanosecond": lambda t: t.microsecond * 1000,
    "YearDay": lambda t: t.timetuple().tm_yday,
    "Weekday": lambda t: _Enum(_DAYS[t.weekday()]),
    "Unix": _unix,
    "UnixMilli": lambda t: _unix(t) * 1000 + t.microsecond // 1000,
    "String": _go_time_string,
}


def _print(value: Any, field: _Field) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, _Enum):
        return value.name
    if isinstance(value, _GoDuration):
        return format_duration_nanos(value.nanos)
    if isinstance(value, datetime.datetime):
        return _go_time_string(value)
    if value is None:
        return "<nil>"
    kind = value.type_name if isinstance(value, _Opaque) else "struct"
    raise _err(
        f'executing "postfix" at <{field.text}>: printing a {kind} value is not supported',
        field.line,
    )


def _enum(wrapper: Any, value: int) -> _Enum:
    try:
        return _Enum(wrapper.Name(value))
    except ValueError:
        return _Enum(str(value))


def _fragment_fields(f: protocol_pb2.Fragment) -> dict[str, Any]:
    return {
        "Journal": f.journal,
        "Begin": f.begin,
        "End": f.end,
        "Sum": _Opaque("SHA1Sum"),
        "CompressionCodec": _enum(protocol_pb2.CompressionCodec, f.compression_codec),
        "BackingStore": f.backing_store,
        "ModTime": f.mod_time,
        "PathPostfix": f.path_postfix,
    }


def _spec_fields(spec: protocol_pb2.JournalSpec) -> dict[str, Any]:
    fr = spec.fragment
    labels = {"Labels": _Opaque("[]Label")}
    suspend: dict[str, Any] | None = None
    if spec.HasField("suspend"):
        suspend = {
            "Level": _enum(protocol_pb2.JournalSpec.Suspend.Level, spec.suspend.level),
            "Offset": spec.suspend.offset,
        }
    return {
        "Name": spec.name,
        "Replication": spec.replication,
        "LabelSet": labels,
        "Labels": labels["Labels"],
        "Fragment": {
            "Length": fr.length,
            "CompressionCodec": _enum(protocol_pb2.CompressionCodec, fr.compression_codec),
            "Stores": _Opaque("[]FragmentStore"),
            "RefreshInterval": _GoDuration(duration_nanos(fr.refresh_interval)),
            "Retention": _GoDuration(duration_nanos(fr.retention)),
            "FlushInterval": _GoDuration(duration_nanos(fr.flush_interval)),
            "PathPostfixTemplate": fr.path_postfix_template,
        },
        "Flags": _enum(protocol_pb2.JournalSpec.Flag, spec.flags),
        "MaxAppendRate": spec.max_append_rate,
        "Suspend": suspend,
    }


def _data(
    spec: protocol_pb2.JournalSpec,
    fragment: protocol_pb2.Fragment,
    first_append_time: datetime.datetime,
    registers: protocol_pb2.LabelSet | None,
) -> dict[str, Any]:
    frag = _fragment_fields(fragment)
    spool: dict[str, Any] = dict(frag)
    spool["Fragment"] = frag
    spool["FirstAppendTime"] = first_append_time
    spool["Registers"] = {"Labels": _Opaque("[]Label")}
    top = _spec_fields(spec)
    top["JournalSpec"] = dict(top)
    top["Spool"] = spool
    del registers  # Reachable only as an unprintable list; see _Opaque.
    return top


# ---------------------------------------------------------------------------
# Parsing.


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    path: tuple[str, ...]  # Empty: the dot itself.
    args: tuple[str, ...]  # String arguments of a final method call.
    text: str  # As written, for messages.
    line: int = 1


_Part = str | _Field

_ACTION = regex.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", regex.DOTALL)
_FIELD_RE = regex.compile(r"(?:\.[\p{L}_][\p{L}\p{N}_]*)+|\.")
_STRING_RE = regex.compile(r'"((?:[^"\\\n]|\\.)*)"|`([^`]*)`')
_SPACE_RE = regex.compile(r"\s+")
_KEYWORDS = frozenset(
    {"if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"}
)
_GO_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'"}


def _unquote(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            esc = body[i + 1]
            if esc not in _GO_ESCAPES:
                raise _err(f"unsupported escape \\{esc} in string")
            out.append(_GO_ESCAPES[esc])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _parse_action(body: str, line: int) -> _Field | None:
    text = body.strip()
    if text.startswith("/*"):
        if not text.endswith("*/"):
            raise _err("unclosed comment", line)
        return None
    if text == "":
        raise _err("missing value for command", line)
    if "|" in _STRING_RE.sub("", text):
        raise _err(f"pipelines are not supported ({{{{{text}}}}})", line)
    m = _FIELD_RE.match(text)
    if m is None:
        word = _SPACE_RE.split(text, maxsplit=1)[0]
        if word in _KEYWORDS:
            raise _err(f"{{{{{word}}}}} actions are not supported (only field paths)", line)
        if word.startswith("$"):
            raise _err(f"variables are not supported ({word})", line)
        raise _err(f"unsupported action {{{{{text}}}}} (only field paths and time methods)", line)
    path = tuple(p for p in m.group(0).split(".") if p)
    args: list[str] = []
    pos = m.end()
    while pos < len(text):
        sp = _SPACE_RE.match(text, pos)
        if sp is None:
            raise _err(
                f"unsupported action {{{{{text}}}}} (only field paths and time methods)", line
            )
        pos = sp.end()
        sm = _STRING_RE.match(text, pos)
        if sm is None:
            raise _err(f"unsupported argument in {{{{{text}}}}} (only string literals)", line)
        args.append(_unquote(sm.group(1)) if sm.group(1) is not None else sm.group(2))
        pos = sm.end()
    return _Field(path, tuple(args), m.group(0), line)


@functools.lru_cache(maxsize=1024)
def compile_template(template: str) -> tuple[_Part, ...]:
    """Parse `template` into literal text and field actions; raise ValidationError if unsupported."""
    parts: list[_Part] = []
    pos = 0
    pending_trim = False
    while True:
        start = template.find("{{", pos)
        literal = template[pos:] if start == -1 else template[pos:start]
        if pending_trim:
            literal = literal.lstrip(" \t\r\n")
        if start == -1:
            if literal:
                parts.append(literal)
            break
        line = template.count("\n", 0, start) + 1
        m = _ACTION.match(template, start)
        if m is None:
            raise _err("unclosed action", line)
        if m.group(1):
            literal = literal.rstrip(" \t\r\n")
        if literal:
            parts.append(literal)
        action = _parse_action(m.group(2), line)
        if action is not None:
            parts.append(action)
        pending_trim = bool(m.group(3))
        pos = m.end()
    return tuple(parts)


def _evaluate(field: _Field, data: Mapping[str, Any]) -> Any:
    value: Any = data
    at = field.text
    for i, name in enumerate(field.path):
        last = i == len(field.path) - 1
        if isinstance(value, datetime.datetime):
            if name == "Format":
                if not last or len(field.args) != 1:
                    raise _err(
                        f'executing "postfix" at <{at}>: Format expects one layout argument',
                        field.line,
                    )
                return format_go_time(value, field.args[0])
            method = _TIME_METHODS.get(name)
            if method is None:
                raise _err(
                    f'executing "postfix" at <{at}>: time method {name} is not supported',
                    field.line,
                )
            value = method(value)
            continue
        if value is None:
            raise _err(f'executing "postfix" at <{at}>: nil pointer evaluating {name}', field.line)
        if not isinstance(value, dict) or name not in value:
            raise _err(f'executing "postfix" at <{at}>: can\'t evaluate field {name}', field.line)
        value = value[name]
    if field.args:
        raise _err(
            f'executing "postfix" at <{at}>: {field.text} is not a method but has arguments',
            field.line,
        )
    return value


def _render(parts: tuple[_Part, ...], data: Mapping[str, Any]) -> str:
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        else:
            out.append(_print(_evaluate(part, data), part))
    return "".join(out)


_ZERO_DATA = _data(protocol_pb2.JournalSpec(), protocol_pb2.Fragment(), _ZERO_TIME, None)


def validate_postfix_template(template: str) -> None:
    """Parse `template` and evaluate it over zero values, as Gazette's validation does."""
    if template == "":
        return
    failure = _template_error(template)
    if failure is not None:
        raise ValidationError(*failure)


@functools.lru_cache(maxsize=1024)
def _template_error(template: str) -> tuple[str, tuple[str, ...]] | None:
    # Specs are validated on every read from etcd; their templates rarely change.
    try:
        _render(compile_template(template), _ZERO_DATA)
    except ValidationError as e:
        return e.reason, e.context
    return None


def render_postfix_template(
    template: str,
    spec: protocol_pb2.JournalSpec,
    fragment: protocol_pb2.Fragment,
    first_append_time: datetime.datetime,
    registers: protocol_pb2.LabelSet | None = None,
) -> str:
    """The path postfix of `fragment`, rendered from the journal's template.

    `first_append_time` is when the spool's first append happened (a naive
    datetime is taken as UTC). Raises ValidationError if the template is not
    supported.
    """
    if template == "":
        return ""
    return _render(compile_template(template), _data(spec, fragment, first_append_time, registers))


class GoTemplate:
    """A template of the same restricted language over other data (``gazctl attach-uuids``).

    ``data`` maps field names to strings, numbers, datetimes or nested maps.
    Errors name the template ``name`` as Go's text/template names its
    templates ("template: root:1: ...").
    """

    def __init__(self, text: str, name: str) -> None:
        self.name = name
        try:
            self._parts = compile_template(text)
        except ValidationError as e:
            raise self._renamed(e) from None

    def layout(self, names: frozenset[str]) -> tuple[str, ...] | None:
        """The template as alternating literal text and field names, if it is that simple.

        Parts at even indices are literals, at odd ones names of ``names``
        (plain top-level fields such as ``{{.Line}}``): a caller may then fill
        them in itself, which is much faster than :meth:`render`. None if the
        template holds anything else (a nested field, a method call, ...).
        """
        out: list[str] = [""]
        for part in self._parts:
            if isinstance(part, str):
                out[-1] += part
            elif len(part.path) == 1 and not part.args and part.path[0] in names:
                out += [part.path[0], ""]
            else:
                return None
        return tuple(out)

    def render(self, data: Mapping[str, Any]) -> str:
        try:
            return _render(self._parts, data)
        except ValidationError as e:
            raise self._renamed(e) from None

    def _renamed(self, e: ValidationError) -> ValidationError:
        reason = e.reason.replace("template: postfix:", f"template: {self.name}:", 1)
        reason = reason.replace('executing "postfix"', f'executing "{self.name}"', 1)
        return ValidationError(reason, e.context)
