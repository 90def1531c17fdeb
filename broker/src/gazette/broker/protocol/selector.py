"""Label selectors: parsing, canonical formatting and matching (Gazette `label_extensions.go`).

Grammar (comma separated expressions, single optional spaces around tokens)::

    name=value  name==value  name!=value  name in (v1, v2)  name notin (v1, v2)
    name not in (v1, v2)     name         !name             name:prefix=value

A name suffixed ``:prefix`` matches label values starting with the given value.
"""

from __future__ import annotations

from gazette.broker.protocol import protocol_pb2
from gazette.broker.protocol.errors import ValidationError, within
from gazette.broker.protocol.gotext import go_quote
from gazette.broker.protocol.labels import add_value, remove, validate_labelset, values_of
from gazette.broker.protocol.letters import LetterPattern

__all__ = [
    "format_selector",
    "matches",
    "parse_selector",
    "rewrite_prefix_selector",
    "validate_selector",
]

Label = protocol_pb2.Label
LabelSet = protocol_pb2.LabelSet
LabelSelector = protocol_pb2.LabelSelector

# Go's RE2, `re` and the `regex` module all match leftmost-first, so these behave
# as Gazette's (LetterPattern: `re` for ASCII selectors). `\Z` stands in for Go's
# `$` (Python's `$` also matches before "\n").
_NAME = r" ?([<LN>\-_+/.]{2,}(?::prefix)?)"
_VALUE = r" ?([<LN>\-_+/.=%]*)"
_SEP = r" ?(?:,|\Z)"
_PAREN = r" ?\(([^)]+)\)"

_RE_EQUAL = LetterPattern(_NAME + r" ?=?=" + _VALUE + _SEP)
_RE_NOT_EQUAL = LetterPattern(_NAME + r" ?!=" + _VALUE + _SEP)
_RE_SET_IN = LetterPattern(_NAME + r" in" + _PAREN + _SEP)
_RE_SET_NOT_IN = LetterPattern(_NAME + r" not ?in" + _PAREN + _SEP)
_RE_EXISTS = LetterPattern(_NAME + _SEP)
_RE_NOT_EXISTS = LetterPattern(r" ?!" + _NAME + _SEP)
_RE_SET_VALUE = LetterPattern(_VALUE + _SEP)


def _parse_set(into: LabelSet, name: str, text: str, whole: str) -> None:
    pos = 0
    while pos != len(text):
        m = _RE_SET_VALUE.for_text(text).match(text, pos)
        if m is None:
            raise ValidationError(
                f"could not match {go_quote(text[pos:])} to a label selector set expression",
                (f"parsing {go_quote(whole)}",),
            )
        add_value(into, name, m.group(1))
        if m.end() == pos:  # Only possible at the end of text, which ends the loop.
            break
        pos = m.end()


def parse_selector(text: str) -> LabelSelector:
    """Parse a selector string; the result is validated.

    Raises ValidationError with Gazette's messages, e.g.
    ``could not match "=x" to a label selector expression``.
    """
    # Both groups are present (if empty), as Go always has and sends them.
    out = LabelSelector(include=LabelSet(), exclude=LabelSet())
    include, exclude = out.include, out.exclude
    pos, n = 0, len(text)
    equal, not_equal, set_in, set_not_in, exists, not_exists = (
        p.for_text(text)
        for p in (_RE_EQUAL, _RE_NOT_EQUAL, _RE_SET_IN, _RE_SET_NOT_IN, _RE_EXISTS, _RE_NOT_EXISTS)
    )
    while pos != n:
        if m := equal.match(text, pos):
            add_value(include, m.group(1), m.group(2))
        elif m := not_equal.match(text, pos):
            add_value(exclude, m.group(1), m.group(2))
        elif m := set_in.match(text, pos):
            _parse_set(include, m.group(1), m.group(2), text[pos:])
        elif m := set_not_in.match(text, pos):
            _parse_set(exclude, m.group(1), m.group(2), text[pos:])
        elif m := exists.match(text, pos):
            add_value(include, m.group(1), "")
        elif m := not_exists.match(text, pos):
            add_value(exclude, m.group(1), "")
        else:
            raise ValidationError(
                f"could not match {go_quote(text[pos:])} to a label selector expression"
            )
        pos = m.end()
    validate_selector(out)
    return out


def validate_selector(selector: LabelSelector) -> None:
    """Include and exclude are valid LabelSets, which may use prefix labels."""
    with within("Include"):
        validate_labelset(selector.include, allow_prefix=True)
    with within("Exclude"):
        validate_labelset(selector.exclude, allow_prefix=True)


def _format_group(labels: LabelSet, exclude: bool, out: list[str]) -> None:
    # Prefix labels are named `name:prefix`, then re-ordered by name (stably, so
    # values of each name keep their sorted order).
    items = sorted(
        ((lb.name + ":prefix" if lb.prefix else lb.name, lb.value) for lb in labels.labels),
        key=lambda nv: nv[0],
    )
    i, n = 0, len(items)
    while i < n:
        name = items[i][0]
        j = i + 1
        while j < n and items[j][0] == name:
            j += 1
        if j == i + 1:
            value = items[i][1]
            if value == "":
                out.append("!" + name if exclude else name)
            else:
                out.append(name + ("!=" if exclude else "=") + value)
        else:
            values = ",".join(v for _, v in items[i:j])
            out.append(name + (" notin (" if exclude else " in (") + values + ")")
        i = j


def format_selector(selector: LabelSelector) -> str:
    """Canonical text of a selector: include groups, then exclude groups, each by name.

    Note (as in Gazette): an include value starting with ``=`` formats as
    ``name==value``, which re-parses with the leading ``=`` dropped.
    """
    parts: list[str] = []
    _format_group(selector.include, False, parts)
    _format_group(selector.exclude, True, parts)
    return ",".join(parts)


def _match_group(sel: LabelSet, labels: LabelSet, require_all: bool) -> bool:
    a, b = sel.labels, labels.labels
    na, nb = len(a), len(b)
    i = j = 0
    while i < na:
        name = a[i].name
        ie = i + 1
        while ie < na and a[ie].name == name:
            ie += 1
        # Advance b to the first label >= name.
        while j < nb and b[j].name < name:
            j += 1
        je = j
        while je < nb and b[je].name == name:
            je += 1
        matched = False
        x, y = i, j
        while not matched and x < ie and y < je:
            s, v = a[x], b[y]
            sv, vv = s.value, v.value
            if sv == "" or (vv.startswith(sv) if s.prefix else sv == vv):
                matched = True
            elif sv < vv:
                x += 1
            else:
                y += 1
        if matched and not require_all:
            return True
        if not matched and require_all:
            return False
        i, j = ie, je
    return require_all


def matches(selector: LabelSelector, labels: LabelSet) -> bool:
    """Whether `labels` is selected: no exclude group matches, and every include group does."""
    if _match_group(selector.exclude, labels, False):
        return False
    return _match_group(selector.include, labels, True)


def rewrite_prefix_selector(selector: LabelSelector) -> LabelSelector:
    """A copy of `selector` with each ``prefix=X`` meta-label as ``name:prefix=X``.

    This is how List (and claims) implement journal-name prefix matching.
    The argument is not modified.
    """
    out = LabelSelector()
    out.CopyFrom(selector)
    for group in (out.include, out.exclude):
        prefixes = values_of(group, "prefix")
        if prefixes:
            for value in prefixes:
                add_value(group, "name:prefix", value)
            remove(group, "prefix")
    return out
