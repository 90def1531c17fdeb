"""Labels, LabelSets and their algebra (Gazette `label_extensions.go`, `labels/labels.go`).

A LabelSet is kept sorted by (name, value) without duplicates; a name which has
an empty value has no other value. Helpers here never mutate their arguments.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence

from gazette.broker.protocol import protocol_pb2
from gazette.broker.protocol.errors import ValidationError, within
from gazette.broker.protocol.tokens import PATH_SYMBOLS, TOKEN_SYMBOLS, validate_token

__all__ = [
    "CONTENT_TYPE_CSV",
    "CONTENT_TYPE_JSON_LINES",
    "CONTENT_TYPE_PROTOBUF_FIXED",
    "CONTENT_TYPE_RECOVERYLOG",
    "LABEL_CONTENT_TYPE",
    "LABEL_INSTANCE",
    "LABEL_MANAGED_BY",
    "LABEL_MESSAGE_SUBTYPE",
    "LABEL_MESSAGE_TYPE",
    "LABEL_REGION",
    "LABEL_TAG",
    "MAX_LABEL_LEN",
    "MAX_LABEL_VALUE_LEN",
    "MIN_LABEL_LEN",
    "SINGLE_VALUE_LABELS",
    "add_value",
    "intersect",
    "label_set",
    "remove",
    "set_value",
    "subtract",
    "union",
    "validate_label",
    "validate_labelset",
    "validate_single_value_labels",
    "value_of",
    "values_of",
]

# Well-known label names (Gazette `labels/labels.go`).
LABEL_CONTENT_TYPE = "content-type"
LABEL_MESSAGE_TYPE = "app.gazette.dev/message-type"
LABEL_MESSAGE_SUBTYPE = "app.gazette.dev/message-subtype"
LABEL_TAG = "app.gazette.dev/tag"
LABEL_MANAGED_BY = "app.gazette.dev/managed-by"
LABEL_INSTANCE = "app.gazette.dev/instance"
LABEL_REGION = "app.gazette.dev/region"

# Common values of `content-type`.
CONTENT_TYPE_CSV = "text/csv"
CONTENT_TYPE_JSON_LINES = "application/x-ndjson"
CONTENT_TYPE_PROTOBUF_FIXED = "application/x-protobuf-fixed"
CONTENT_TYPE_RECOVERYLOG = "application/x-gazette-recoverylog"

SINGLE_VALUE_LABELS: frozenset[str] = frozenset(
    {
        LABEL_CONTENT_TYPE,
        LABEL_INSTANCE,
        LABEL_MANAGED_BY,
        LABEL_MESSAGE_SUBTYPE,
        LABEL_MESSAGE_TYPE,
        LABEL_REGION,
    }
)
"""Labels which may have at most one value in a JournalSpec or ShardSpec."""

MIN_LABEL_LEN = 2
MAX_LABEL_LEN = 64
MAX_LABEL_VALUE_LEN = 1024

_PREFIX_SUFFIX = ":prefix"

Label = protocol_pb2.Label
LabelSet = protocol_pb2.LabelSet


def validate_label(label: Label, *, allow_prefix: bool = False) -> None:
    """Name is a token of 2..64 bytes; value a path token of 0..1024 bytes."""
    with within("Name"):
        validate_token(label.name, MIN_LABEL_LEN, MAX_LABEL_LEN, TOKEN_SYMBOLS)
    with within("Value"):
        validate_token(label.value, 0, MAX_LABEL_VALUE_LEN, PATH_SYMBOLS)
    if label.prefix and not allow_prefix:
        raise ValidationError("Prefix may not be set outside of a LabelSelector")


def validate_labelset(labels: LabelSet, *, allow_prefix: bool = False) -> None:
    """Each label valid; sorted by (name, value), unique; an empty value stands alone."""
    prev: Label | None = None
    for i, cur in enumerate(labels.labels):
        with within(f"Labels[{i}]"):
            validate_label(cur, allow_prefix=allow_prefix)
        if prev is not None:
            if prev.name < cur.name:
                pass
            elif prev.name == cur.name:
                if prev.value >= cur.value:
                    raise ValidationError(
                        f"Labels not in unique, sorted order (index {i}; label {cur.name} "
                        f"value {cur.value} <= {prev.value})"
                    )
                if prev.value == "":
                    raise ValidationError(
                        f"Label has empty & non-empty values (index {i}; label {cur.name} "
                        f"value {cur.value})"
                    )
            else:
                raise ValidationError(
                    f"Labels not in unique, sorted order (index {i}; label name {cur.name} "
                    f"<= {prev.name})"
                )
        prev = cur


def validate_single_value_labels(labels: LabelSet) -> None:
    """Well-known single-valued labels (`SINGLE_VALUE_LABELS`) appear at most once."""
    prev_name: str | None = None
    for i, cur in enumerate(labels.labels):
        if cur.name == prev_name and cur.name in SINGLE_VALUE_LABELS:
            raise ValidationError(
                "expected single-value Label has multiple values "
                f"(index {i}; label {cur.name} value {cur.value})"
            )
        prev_name = cur.name


def _name_range(labels: Sequence[Label], name: str) -> tuple[int, int]:
    begin = bisect.bisect_left(labels, name, key=lambda lb: lb.name)
    end = begin
    while end < len(labels) and labels[end].name == name:
        end += 1
    return begin, end


def values_of(labels: LabelSet, name: str) -> list[str]:
    """All values of label `name` (empty list if absent)."""
    seq = labels.labels
    begin, end = _name_range(seq, name)
    return [seq[i].value for i in range(begin, end)]


def value_of(labels: LabelSet, name: str) -> str:
    """The first value of label `name`, or "" if absent."""
    seq = labels.labels
    begin, end = _name_range(seq, name)
    return seq[begin].value if begin != end else ""


def _split_prefix(name: str) -> tuple[str, bool]:
    if name.endswith(_PREFIX_SUFFIX):
        return name[: -len(_PREFIX_SUFFIX)], True
    return name, False


def add_value(labels: LabelSet, name: str, value: str) -> None:
    """Insert (name, value) in order, keeping other values of `name`; in place.

    A `name` ending in ``:prefix`` adds a prefix-matching label (selectors only).
    """
    name, prefix = _split_prefix(name)
    seq = labels.labels
    ind = bisect.bisect_left(seq, (name, value), key=lambda lb: (lb.name, lb.value))
    if ind != len(seq):
        at = seq[ind]
        if at.name == name and at.value == value and at.prefix == prefix:
            return
    seq.insert(ind, Label(name=name, value=value, prefix=prefix))


def set_value(labels: LabelSet, name: str, value: str) -> None:
    """Replace all values of `name` with the single `value`; in place."""
    name, prefix = _split_prefix(name)
    seq = labels.labels
    begin, end = _name_range(seq, name)
    del seq[begin:end]
    seq.insert(begin, Label(name=name, value=value, prefix=prefix))


def remove(labels: LabelSet, name: str) -> None:
    """Remove every label `name`; in place."""
    seq = labels.labels
    begin, end = _name_range(seq, name)
    del seq[begin:end]


def label_set(
    pairs: Iterable[tuple[str, str]] | Mapping[str, str | Iterable[str]] = (),
    /,
    **kwargs: str,
) -> LabelSet:
    """Build a sorted, de-duplicated LabelSet.

    >>> label_set([("topic", "logs"), ("env", "prod")])       # pairs
    >>> label_set({"content-type": "application/x-ndjson"})   # mapping of values
    >>> label_set(topic="logs")                               # names that are identifiers

    Names ending in ``:prefix`` produce prefix labels (for selectors). The result
    is not validated.
    """
    items: list[tuple[str, str]] = []
    if isinstance(pairs, Mapping):
        for name, vals in pairs.items():
            if isinstance(vals, str):
                items.append((name, vals))
            else:
                items.extend((name, v) for v in vals)
    else:
        items.extend(pairs)
    items.extend(kwargs.items())
    out = LabelSet()
    for name, value in items:
        add_value(out, name, value)
    return out


def _groups(seq: Sequence[Label]) -> Iterator[tuple[str, int, int]]:
    i, n = 0, len(seq)
    while i < n:
        name = seq[i].name
        j = i + 1
        while j < n and seq[j].name == name:
            j += 1
        yield name, i, j
        i = j


def _join(lhs: Sequence[Label], rhs: Sequence[Label]) -> Iterator[tuple[int, int, int, int]]:
    """Full outer join of two sorted label sequences on name: (lbeg, lend, rbeg, rend)."""
    lb, rb, nl, nr = 0, 0, len(lhs), len(rhs)
    while lb != nl or rb != nr:
        if lb == nl:
            c = 1
        elif rb == nr:
            c = -1
        elif lhs[lb].name == rhs[rb].name:
            c = 0
        elif lhs[lb].name < rhs[rb].name:
            c = -1
        else:
            c = 1
        le, re_ = lb, rb
        if c <= 0:
            name = lhs[lb].name
            while le != nl and lhs[le].name == name:
                le += 1
        if c >= 0:
            name = rhs[rb].name
            while re_ != nr and rhs[re_].name == name:
                re_ += 1
        yield lb, le, rb, re_
        lb, rb = le, re_


def _values_equal(
    lhs: Sequence[Label], rhs: Sequence[Label], lb: int, le: int, rb: int, re_: int
) -> bool:
    if le - lb != re_ - rb:
        return False
    return all(lhs[lb + k].value == rhs[rb + k].value for k in range(le - lb))


def union(a: LabelSet, b: LabelSet) -> LabelSet:
    """All names of `a` or `b`; where both have a name, `a`'s values win."""
    lhs, rhs = a.labels, b.labels
    out: list[Label] = []
    for lb, le, rb, re_ in _join(lhs, rhs):
        out.extend(lhs[lb:le] if lb != le else rhs[rb:re_])
    return LabelSet(labels=out)


def intersect(a: LabelSet, b: LabelSet) -> LabelSet:
    """Names of `a` whose values are exactly those of `b`."""
    lhs, rhs = a.labels, b.labels
    out: list[Label] = []
    for lb, le, rb, re_ in _join(lhs, rhs):
        if _values_equal(lhs, rhs, lb, le, rb, re_):
            out.extend(lhs[lb:le])
    return LabelSet(labels=out)


def subtract(a: LabelSet, b: LabelSet) -> LabelSet:
    """Names of `a` whose values are not exactly those of `b`."""
    lhs, rhs = a.labels, b.labels
    out: list[Label] = []
    for lb, le, rb, re_ in _join(lhs, rhs):
        if not _values_equal(lhs, rhs, lb, le, rb, re_):
            out.extend(lhs[lb:le])
    return LabelSet(labels=out)
