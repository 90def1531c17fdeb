"""Between the ``spec`` of a Journal or Shard object and Gazette's JournalSpec / ShardSpec.

Pure functions, no I/O. The object's fields are the camelCase of the protobuf's
(see :mod:`gazette.operator.crd`), with enums by name and durations as Go
duration strings. Reading is strict: an unknown field, a wrong type or an
unparsable value raises :class:`~gazette.operator.errors.InvalidSpecError`
naming the field, for objects that reached us without the CRD's schema (an
older CRD, a unit test). Labels and sources are sorted, as Gazette requires,
so users may list them in any order.

Labels come from two places: the object's ``metadata.labels`` outside the reserved
domains (:func:`gazette.operator.crd.is_reserved_label`), one value a name, and
``spec.labels``, for several values of one name or values Kubernetes labels cannot
hold. A name in both must have its metadata value among its ``spec.labels`` values;
otherwise the object is ``InvalidSpec``, the error naming the label. Each metadata
label is checked as a Gazette label (2 to 64 characters, not a meta-label such as
``name``) and named when it is not one.

The result is *not* validated here: the reconciler runs the protocol's own
validation on it, exactly as the Apply RPCs do.

Example::

    spec = mapping.journal_spec(
        {"name": "a/journal", "replication": 3, "fragment": {...}}, labels={"topic": "logs"}
    )
    assert mapping.journal_fields(spec)["labels"] == [{"name": "topic", "value": "logs"}]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.operator import crd, errors

__all__ = [
    "OPERATOR_FIELDS",
    "gazette_labels",
    "journal_fields",
    "journal_spec",
    "normalize_journal",
    "normalize_shard",
    "shard_fields",
    "shard_spec",
]

OPERATOR_FIELDS = frozenset({"deletionPolicy"})
"""Fields of ``spec`` that steer the operator and are not part of the Gazette spec."""

_T = TypeVar("_T")

_CODECS = dict(pb.CompressionCodec.items())
_FLAGS = {"O_RDONLY": 1, "O_WRONLY": 2, "O_RDWR": 4}
_FLAG_NAMES = {v: k for k, v in _FLAGS.items()}
_INT64_MAX = (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_INT32_MAX = (1 << 31) - 1
# Labels Gazette adds itself to what selectors match (JournalSpec.LabelSetExt, ShardSpec's).
_JOURNAL_META_LABELS = ("name", "prefix")
_SHARD_META_LABELS = ("id",)


class _Reader:
    """Takes fields out of one mapping, checking types; ``done()`` rejects the rest."""

    def __init__(self, value: object, path: str) -> None:
        if not isinstance(value, Mapping):
            raise errors.InvalidSpecError(f"expected an object, not {_kind(value)}", field=path)
        self._fields = dict(value)
        self._path = path

    def field(self, name: str) -> str:
        return f"{self._path}.{name}"

    def take(self, name: str, check: Callable[[object, str], _T], default: _T) -> _T:
        value = self._fields.pop(name, None)
        if value is None:
            return default
        return check(value, self.field(name))

    def done(self, ignore: frozenset[str] = frozenset()) -> None:
        unknown = sorted(k for k in self._fields if k not in ignore)
        if unknown:
            raise errors.InvalidSpecError(
                "unknown field(s) " + ", ".join(map(repr, unknown)), field=self._path
            )


def _kind(value: object) -> str:
    return type(value).__name__


def _anything(value: object, path: str) -> object:
    return value


def _string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise errors.InvalidSpecError(f"expected a string, not {_kind(value)}", field=path)
    return value


def _boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise errors.InvalidSpecError(f"expected a boolean, not {_kind(value)}", field=path)
    return value


def _integer(low: int, high: int) -> Callable[[object, str], int]:
    def check(value: object, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise errors.InvalidSpecError(f"expected an integer, not {_kind(value)}", field=path)
        if not low <= value <= high:
            raise errors.InvalidSpecError(
                f"{value} is out of range (expected {low} <= value <= {high})", field=path
            )
        return value

    return check


def _enum(names: Mapping[str, int]) -> Callable[[object, str], int]:
    def check(value: object, path: str) -> int:
        text = _string(value, path)
        if text not in names:
            raise errors.InvalidSpecError(
                f"unknown value {text!r} (expected one of {', '.join(names)})", field=path
            )
        return names[text]

    return check


def _duration(value: object, path: str) -> pb.Duration:
    text = _string(value, path)
    try:
        return pb.duration_from_nanos(pb.parse_duration_nanos(text))
    except ValueError as e:
        raise errors.InvalidSpecError(str(e), field=path) from None


def _list(value: object, path: str) -> list[object]:
    if not isinstance(value, list):
        raise errors.InvalidSpecError(f"expected a list, not {_kind(value)}", field=path)
    return value


def _labels(value: object, path: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for i, item in enumerate(_list(value, path)):
        r = _Reader(item, f"{path}[{i}]")
        name = r.take("name", _string, "")
        pairs.append((name, r.take("value", _string, "")))
        r.done()
    return pairs


def gazette_labels(
    metadata: Mapping[str, object] | None,
    spec_labels: Sequence[tuple[str, str]] = (),
    *,
    meta_labels: Sequence[str] = (),
) -> pb.LabelSet:
    """The Gazette labels of an object: its ``metadata.labels`` and ``spec.labels``, sorted.

    ``metadata`` are the object's Kubernetes labels (reserved domains are skipped);
    ``spec_labels`` the (name, value) pairs of its ``spec.labels``; ``meta_labels`` the
    names Gazette gives its meta-labels (``name`` and ``prefix`` of journals, ``id`` of
    shards), which no label may have. Raises InvalidSpecError naming the label of a
    conflict, or a metadata label that is no Gazette label.
    """
    pairs = set(spec_labels)
    given: dict[str, set[str]] = {}
    for name, val in spec_labels:
        given.setdefault(name, set()).add(val)
    for name, raw in sorted((metadata or {}).items()):
        if crd.is_reserved_label(name):
            continue
        field = f"metadata.labels[{name}]"
        if not isinstance(raw, str):
            raise errors.InvalidSpecError(f"expected a string, not {_kind(raw)}", field=field)
        value = raw
        if name in meta_labels:
            raise errors.InvalidSpecError(
                f"{name!r} is a Gazette meta-label, which Gazette sets itself: "
                "no label may have that name",
                field=field,
            )
        try:
            pb.validate(pb.Label(name=name, value=value))
        except pb.ValidationError as e:
            raise errors.InvalidSpecError(f"not a Gazette label: {e}", field=field) from None
        values = given.get(name)
        if values is not None and value not in values:
            raise errors.InvalidSpecError(
                f"label {name!r} conflicts: metadata.labels says {value!r}, spec.labels says "
                + ", ".join(map(repr, sorted(values)))
                + " (list the metadata value in spec.labels too, or make them agree)",
                field=field,
            )
        pairs.add((name, value))
    out = pb.LabelSet()
    for name, val in sorted(pairs):
        out.labels.add(name=name, value=val)
    return out


def _stores(value: object, path: str) -> list[str]:
    return [_string(v, f"{path}[{i}]") for i, v in enumerate(_list(value, path))]


def _go_presence(msg: Any, *fields: str) -> None:
    # Go declares these sub-messages non-nullable and so always encodes them, empty or not
    # (gogoproto nullable=false in Gazette's protocol.proto). Marking them present makes our bytes in etcd the bytes Go's
    # gazctl would write for the same spec, and specs read back compare equal.
    for name in fields:
        getattr(msg, name).SetInParent()


def normalize_journal(spec: pb.JournalSpec) -> pb.JournalSpec:
    """Mark Go's always-encoded sub-messages present in ``spec`` (in place), and return it."""
    _go_presence(spec, "labels", "fragment")
    _go_presence(spec.fragment, "refresh_interval", "retention", "flush_interval")
    return spec


def normalize_shard(spec: pc.ShardSpec) -> pc.ShardSpec:
    """Mark Go's always-encoded sub-messages present in ``spec`` (in place), and return it."""
    _go_presence(spec, "labels", "max_txn_duration", "min_txn_duration")
    return spec


def journal_spec(
    spec: Mapping[str, Any], labels: Mapping[str, object] | None = None
) -> pb.JournalSpec:
    """The JournalSpec a Journal object declares (not validated).

    ``spec`` is the object's ``spec``, ``labels`` its ``metadata.labels``.
    """
    r = _Reader(spec, "spec")
    out = pb.JournalSpec(
        name=r.take("name", _string, ""),
        replication=r.take("replication", _integer(-(2**31), _INT32_MAX), 0),
        flags=r.take("flags", _enum(_FLAGS), 0),
        max_append_rate=r.take("maxAppendRate", _integer(-_INT64_MAX - 1, _INT64_MAX), 0),
    )
    spec_labels: list[tuple[str, str]] = r.take("labels", _labels, [])
    out.labels.CopyFrom(gazette_labels(labels, spec_labels, meta_labels=_JOURNAL_META_LABELS))
    normalize_journal(out)
    fragment = r.take("fragment", _anything, None)
    if fragment is not None:
        f = _Reader(fragment, "spec.fragment")
        out.fragment.length = f.take("length", _integer(-_INT64_MAX - 1, _INT64_MAX), 0)
        codec = f.take("compressionCodec", _enum(_CODECS), 0)
        out.fragment.compression_codec = pb.CompressionCodec.ValueType(codec)
        stores: list[str] = f.take("stores", _stores, [])
        out.fragment.stores.extend(stores)
        for name, proto_name in (
            ("refreshInterval", "refresh_interval"),
            ("retention", "retention"),
            ("flushInterval", "flush_interval"),
        ):
            d = f.take(name, _duration, None)
            if d is not None:
                getattr(out.fragment, proto_name).CopyFrom(d)
        out.fragment.path_postfix_template = f.take("pathPostfixTemplate", _string, "")
        f.done()
    r.done(ignore=OPERATOR_FIELDS)
    return out


def _sources(value: object, path: str) -> list[pc.ShardSpec.Source]:
    out: list[pc.ShardSpec.Source] = []
    for i, item in enumerate(_list(value, path)):
        r = _Reader(item, f"{path}[{i}]")
        out.append(
            pc.ShardSpec.Source(
                journal=r.take("journal", _string, ""),
                min_offset=r.take("minOffset", _integer(-_INT64_MAX - 1, _INT64_MAX), 0),
            )
        )
        r.done()
    # Gazette wants sources strictly ordered by journal; duplicates stay, for validation
    # to refuse.
    out.sort(key=lambda s: s.journal)
    return out


def shard_spec(spec: Mapping[str, Any], labels: Mapping[str, object] | None = None) -> pc.ShardSpec:
    """The ShardSpec a Shard object declares (not validated).

    ``spec`` is the object's ``spec``, ``labels`` its ``metadata.labels``.
    """
    r = _Reader(spec, "spec")
    sources: list[pc.ShardSpec.Source] = r.take("sources", _sources, [])
    out = pc.ShardSpec(
        id=r.take("name", _string, ""),
        sources=sources,
        recovery_log_prefix=r.take("recoveryLogPrefix", _string, ""),
        hint_prefix=r.take("hintPrefix", _string, ""),
        hint_backups=r.take("hintBackups", _integer(-(2**31), _INT32_MAX), 0),
        disable=r.take("disable", _boolean, False),
        hot_standbys=r.take("hotStandbys", _integer(0, _UINT32_MAX), 0),
        disable_wait_for_ack=r.take("disableWaitForAck", _boolean, False),
        ring_buffer_size=r.take("ringBufferSize", _integer(0, _UINT32_MAX), 0),
        read_channel_size=r.take("readChannelSize", _integer(0, _UINT32_MAX), 0),
    )
    for name, proto_name in (
        ("maxTxnDuration", "max_txn_duration"),
        ("minTxnDuration", "min_txn_duration"),
    ):
        d = r.take(name, _duration, None)
        if d is not None:
            getattr(out, proto_name).CopyFrom(d)
    spec_labels: list[tuple[str, str]] = r.take("labels", _labels, [])
    out.labels.CopyFrom(gazette_labels(labels, spec_labels, meta_labels=_SHARD_META_LABELS))
    normalize_shard(out)
    r.done(ignore=OPERATOR_FIELDS)
    return out


def _label_fields(labels: pb.LabelSet) -> list[dict[str, str]]:
    return [{"name": lb.name, "value": lb.value} for lb in labels.labels]


def _put(out: dict[str, Any], name: str, value: object) -> None:
    # Zero values are left out, as protobuf's JSON mapping leaves them out.
    if value:
        out[name] = value


def journal_fields(spec: pb.JournalSpec) -> dict[str, Any]:
    """The ``spec`` of a Journal object declaring ``spec`` (its suspension is not a field)."""
    out: dict[str, Any] = {"name": spec.name, "replication": spec.replication}
    _put(out, "labels", _label_fields(spec.labels))
    frag = spec.fragment
    fields: dict[str, Any] = {"length": frag.length}
    if frag.compression_codec:
        fields["compressionCodec"] = pb.CompressionCodec.Name(frag.compression_codec)
    _put(fields, "stores", list(frag.stores))
    for name, d in (
        ("refreshInterval", frag.refresh_interval),
        ("retention", frag.retention),
        ("flushInterval", frag.flush_interval),
    ):
        if d.seconds or d.nanos:
            fields[name] = pb.format_duration(d)
    _put(fields, "pathPostfixTemplate", frag.path_postfix_template)
    out["fragment"] = fields
    if spec.flags:
        out["flags"] = _FLAG_NAMES.get(spec.flags, spec.flags)
    _put(out, "maxAppendRate", spec.max_append_rate)
    return out


def shard_fields(spec: pc.ShardSpec) -> dict[str, Any]:
    """The ``spec`` of a Shard object declaring ``spec``."""
    out: dict[str, Any] = {"name": spec.id}
    _put(
        out,
        "sources",
        [
            {"journal": s.journal, **({"minOffset": s.min_offset} if s.min_offset else {})}
            for s in spec.sources
        ],
    )
    _put(out, "recoveryLogPrefix", spec.recovery_log_prefix)
    _put(out, "hintPrefix", spec.hint_prefix)
    _put(out, "hintBackups", spec.hint_backups)
    for name, d in (
        ("maxTxnDuration", spec.max_txn_duration),
        ("minTxnDuration", spec.min_txn_duration),
    ):
        if d.seconds or d.nanos:
            out[name] = pb.format_duration(d)
    _put(out, "disable", spec.disable)
    _put(out, "hotStandbys", spec.hot_standbys)
    _put(out, "labels", _label_fields(spec.labels))
    _put(out, "disableWaitForAck", spec.disable_wait_for_ack)
    _put(out, "ringBufferSize", spec.ring_buffer_size)
    _put(out, "readChannelSize", spec.read_channel_size)
    return out
