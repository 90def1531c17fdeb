"""Validation of Gazette's specs: journals, processes and brokers.

Gazette's `journal_spec_extensions.go`, `broker_spec_extensions.go` and the
`ProcessSpec` rules of `route_extensions.go`, with the derived values of a
JournalSpec (may it be read or written, its desired replication, its labels
with the ``name`` meta-label). Fields that Gazette's Go types hold by value
(non-nullable) are validated even when absent on the wire, as Go sees them as
zero values.
"""

from __future__ import annotations

from gazette.broker.protocol import protocol_pb2 as _pb
from gazette.broker.protocol.durations import (
    HOUR,
    MINUTE,
    SECOND,
    duration_nanos,
    format_duration_nanos,
)
from gazette.broker.protocol.errors import ValidationError, within
from gazette.broker.protocol.fragments import (
    validate_codec,
    validate_endpoint,
    validate_fragment_store,
)
from gazette.broker.protocol.gotext import enum_text
from gazette.broker.protocol.labels import (
    LABEL_CONTENT_TYPE,
    LABEL_MESSAGE_SUBTYPE,
    LABEL_MESSAGE_TYPE,
    union,
    validate_labelset,
    validate_single_value_labels,
    values_of,
)
from gazette.broker.protocol.tokens import (
    TOKEN_SYMBOLS,
    split_meta,
    validate_journal,
    validate_token,
)
from gazette.broker.protocol.urls import parse_url

__all__ = [
    "MAX_BROKER_JOURNAL_LIMIT",
    "MAX_FRAGMENT_LEN",
    "MAX_JOURNAL_REPLICATION",
    "MIN_FRAGMENT_LEN",
    "check_media_type",
    "desired_replication",
    "journal_may_read",
    "journal_may_write",
    "label_set_ext",
    "validate_broker_spec",
    "validate_journal_spec",
    "validate_process_id",
    "validate_process_spec",
    "validate_spec_fragment",
    "validate_suspend",
]

MAX_JOURNAL_REPLICATION = 5
MIN_FRAGMENT_LEN = 1 << 10
MAX_FRAGMENT_LEN = 1 << 34
MIN_REFRESH_INTERVAL = SECOND
MAX_REFRESH_INTERVAL = 24 * HOUR
MIN_FLUSH_INTERVAL = MINUTE
MIN_ZONE_LEN, MAX_ZONE_LEN = 1, 32
MIN_SUFFIX_LEN, MAX_SUFFIX_LEN = 4, 128
MAX_BROKER_JOURNAL_LIMIT = 1 << 17


# --------------------------------------------------------------------------- processes and brokers


def validate_process_id(m: _pb.ProcessSpec.ID) -> None:
    with within("Zone"):
        validate_token(m.zone, MIN_ZONE_LEN, MAX_ZONE_LEN, TOKEN_SYMBOLS)
    with within("Suffix"):
        validate_token(m.suffix, MIN_SUFFIX_LEN, MAX_SUFFIX_LEN, TOKEN_SYMBOLS)


def validate_process_spec(m: _pb.ProcessSpec) -> None:
    with within("Id"):
        validate_process_id(m.id)
    with within("Endpoint"):
        validate_endpoint(m.endpoint)


def validate_broker_spec(m: _pb.BrokerSpec) -> None:
    validate_process_spec(m.process_spec)
    if m.journal_limit > MAX_BROKER_JOURNAL_LIMIT:
        raise ValidationError(
            f"invalid JournalLimit ({m.journal_limit}; expected 0 <= JournalLimit <= "
            f"{MAX_BROKER_JOURNAL_LIMIT})"
        )


# --------------------------------------------------------------------------- journal specs

_TSPECIALS = frozenset('()<>@,;:\\"/[]?=')


def _consume_token(s: str) -> tuple[str, str]:
    i = 0
    while i < len(s) and " " < s[i] < "\x7f" and s[i] not in _TSPECIALS:
        i += 1
    return s[:i], s[i:]


def check_media_type(value: str) -> None:
    """Raise ValueError with Go's `mime.ParseMediaType` message if `value` is not a media type.

    Only the type/subtype part is checked: label values cannot hold ``;``
    parameters or spaces.
    """
    base = value.partition(";")[0].lower().strip()
    typ, rest = _consume_token(base)
    if typ == "":
        raise ValueError("mime: no media type")
    if rest == "":
        pass
    elif not rest.startswith("/"):
        raise ValueError("mime: expected slash after first token")
    else:
        sub, rest = _consume_token(rest[1:])
        if sub == "":
            raise ValueError("mime: expected token after slash")
        if rest != "":
            raise ValueError("mime: unexpected content after media subtype")
    if ";" in value:
        params = value[len(value.partition(";")[0]) :].strip()
        if params.strip(" ;") != "":
            raise ValueError("mime: invalid media parameter")


def _validate_journal_label_constraints(labels: _pb.LabelSet) -> None:
    validate_single_value_labels(labels)
    ct = values_of(labels, LABEL_CONTENT_TYPE)
    if ct:
        try:
            check_media_type(ct[0])
        except ValueError as e:
            raise ValidationError(f"parsing {LABEL_CONTENT_TYPE}: {e}") from None
    if values_of(labels, LABEL_MESSAGE_TYPE):
        if not ct:
            raise ValidationError(
                f"expected {LABEL_CONTENT_TYPE} label alongside {LABEL_MESSAGE_TYPE}"
            )
    elif values_of(labels, LABEL_MESSAGE_SUBTYPE):
        raise ValidationError(
            f"expected {LABEL_MESSAGE_TYPE} label alongside {LABEL_MESSAGE_SUBTYPE}"
        )


def validate_spec_fragment(m: _pb.JournalSpec.Fragment) -> None:
    if m.length < MIN_FRAGMENT_LEN or m.length > MAX_FRAGMENT_LEN:
        raise ValidationError(
            f"invalid Length ({m.length}; expected {MIN_FRAGMENT_LEN} <= length <= {MAX_FRAGMENT_LEN})"
        )
    with within("CompressionCodec"):
        validate_codec(m.compression_codec)
    for i, store in enumerate(m.stores):
        with within(f"Stores[{i}]"):
            validate_fragment_store(store)
        if (
            i == 0
            and m.compression_codec == _pb.GZIP_OFFLOAD_DECOMPRESSION
            and parse_url(store).scheme == "file"
        ):
            raise ValidationError(
                f"GZIP_OFFLOAD_DECOMPRESSION is incompatible with file:// stores ({store})"
            )
    refresh = duration_nanos(m.refresh_interval)
    if refresh < MIN_REFRESH_INTERVAL or refresh > MAX_REFRESH_INTERVAL:
        raise ValidationError(
            f"invalid RefreshInterval ({format_duration_nanos(refresh)}; expected "
            f"{format_duration_nanos(MIN_REFRESH_INTERVAL)} <= interval <= "
            f"{format_duration_nanos(MAX_REFRESH_INTERVAL)})"
        )
    flush = duration_nanos(m.flush_interval)
    if flush != 0 and flush < MIN_FLUSH_INTERVAL:
        raise ValidationError(
            f"invalid FlushInterval ({format_duration_nanos(flush)}; expected >= "
            f"{format_duration_nanos(MIN_FLUSH_INTERVAL)})"
        )
    if m.path_postfix_template:
        # Imported here: most specs have no template (see the package docstring).
        from gazette.broker.protocol.postfix_template import validate_postfix_template

        with within("PathPostfixTemplate"):
            validate_postfix_template(m.path_postfix_template)


_FLAGS = frozenset({_pb.JournalSpec.NOT_SPECIFIED, _pb.JournalSpec.O_RDONLY,
                    _pb.JournalSpec.O_WRONLY, _pb.JournalSpec.O_RDWR})  # fmt: skip
_MAY_READ = frozenset(
    {_pb.JournalSpec.NOT_SPECIFIED, _pb.JournalSpec.O_RDONLY, _pb.JournalSpec.O_RDWR}
)
_MAY_WRITE = frozenset(
    {_pb.JournalSpec.NOT_SPECIFIED, _pb.JournalSpec.O_WRONLY, _pb.JournalSpec.O_RDWR}
)


def validate_suspend(m: _pb.JournalSpec.Suspend) -> None:
    if m.level not in (0, 1, 2):
        raise ValidationError(
            f"invalid Level variant ({enum_text(_pb.JournalSpec.Suspend.Level, m.level)})",
            ("Level",),
        )
    if m.offset < 0:
        raise ValidationError(f"invalid Offset ({m.offset}; expected >= 0)", ("Offset",))


def validate_journal_spec(m: _pb.JournalSpec) -> None:
    with within("Name"):
        validate_journal(m.name)
    _, meta = split_meta(m.name)
    if meta:
        raise ValidationError(
            f"Name cannot have a metadata path segment ({meta}; expected no segment)"
        )
    if m.replication < 1 or m.replication > MAX_JOURNAL_REPLICATION:
        raise ValidationError(
            f"invalid Replication ({m.replication}; expected 1 <= Replication <= "
            f"{MAX_JOURNAL_REPLICATION})"
        )
    with within("Labels"):
        validate_labelset(m.labels)
    if values_of(m.labels, "name"):
        raise ValidationError('Labels cannot include label "name"')
    if values_of(m.labels, "prefix"):
        raise ValidationError('Labels cannot include label "prefix"')
    with within("Labels"):
        _validate_journal_label_constraints(m.labels)
    with within("Fragment"):
        validate_spec_fragment(m.fragment)
    if m.flags not in _FLAGS:
        raise ValidationError(
            f"invalid combination ({enum_text(_pb.JournalSpec.Flag, m.flags)})", ("Flags",)
        )
    if m.max_append_rate < 0:
        raise ValidationError(f"invalid MaxAppendRate ({m.max_append_rate}; expected >= 0)")
    with within("Suspend"):
        validate_suspend(m.suspend)


def journal_may_read(spec: _pb.JournalSpec) -> bool:
    """Reads (and ListFragments) are allowed by the spec's flags (NOT_SPECIFIED, O_RDONLY, O_RDWR)."""
    return spec.flags in _MAY_READ


def journal_may_write(spec: _pb.JournalSpec) -> bool:
    """Appends of content are allowed by the spec's flags (NOT_SPECIFIED, O_WRONLY, O_RDWR)."""
    return spec.flags in _MAY_WRITE


def desired_replication(spec: _pb.JournalSpec, max_replication: int = 9) -> int:
    """Replication, reduced by suspension (PARTIAL: 1, FULL: 0) and capped by `max_replication`."""
    r = spec.replication
    level = spec.suspend.level
    if level == _pb.JournalSpec.Suspend.PARTIAL:
        r = 1
    elif level == _pb.JournalSpec.Suspend.FULL:
        r = 0
    return min(r, max_replication)


def label_set_ext(spec: _pb.JournalSpec) -> _pb.LabelSet:
    """The spec's labels plus the meta-label ``name=<journal>`` (what selectors match)."""
    return union(_pb.LabelSet(labels=[_pb.Label(name="name", value=spec.name)]), spec.labels)
