"""Label selectors: grammar, canonical text, matching, meta-labels (broker.md §3.5)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gazette.broker import protocol as pb


def _sel(include=(), exclude=()) -> pb.LabelSelector:
    return pb.LabelSelector(include=pb.label_set(include), exclude=pb.label_set(exclude))


def _err(text: str) -> str:
    with pytest.raises(pb.ValidationError) as info:
        pb.parse_selector(text)
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("foo = bar", _sel([("foo", "bar")])),
        ("foo==bar", _sel([("foo", "bar")])),
        ("foo:prefix =bar", _sel([("foo:prefix", "bar")])),
        ("foo != bar", _sel(exclude=[("foo", "bar")])),
        ("foo ", _sel([("foo", "")])),
        ("foo=", _sel([("foo", "")])),
        (" !foo", _sel(exclude=[("foo", "")])),
        (" foo in (bing, baz,bar)", _sel([("foo", "bar"), ("foo", "baz"), ("foo", "bing")])),
        (" foo not in ( pear, apple )", _sel(exclude=[("foo", "apple"), ("foo", "pear")])),
        ("foo notin (pear,apple)", _sel(exclude=[("foo", "apple"), ("foo", "pear")])),
        (
            "foo==bar, baz !=bing ,apple:prefix in (fruit, banana)",
            _sel(
                [("apple:prefix", "banana"), ("apple:prefix", "fruit"), ("foo", "bar")],
                [("baz", "bing")],
            ),
        ),
        (
            "!foo,baz,bing:prefix not in (thing-one, thing-2),!bar,",
            _sel(
                [("baz", "")],
                [
                    ("bar", ""),
                    ("bing:prefix", "thing-2"),
                    ("bing:prefix", "thing-one"),
                    ("foo", ""),
                ],
            ),
        ),
        # Values may hold '='.
        (
            "foo = ba=ar, baz=bi=ngo,exc!=who=ops",
            _sel([("foo", "ba=ar"), ("baz", "bi=ngo")], [("exc", "who=ops")]),
        ),
        (
            "foo in (bi=ng,ba=ar), exc notin (who=ops,oth=er)",
            _sel([("foo", "bi=ng"), ("foo", "ba=ar")], [("exc", "who=ops"), ("exc", "oth=er")]),
        ),
        # Duplicates collapse.
        ("aa=1, aa in (1, 1)", _sel([("aa", "1")])),
        # Meta-labels parse like any other.
        ("name in (foo/bar, baz/bing)", _sel([("name", "baz/bing"), ("name", "foo/bar")])),
        ("prefix=my/prefix/", _sel([("prefix", "my/prefix/")])),
        ("name:prefix=my/journal/prefix", _sel([("name:prefix", "my/journal/prefix")])),
        ("", _sel()),
    ],
)
def test_parse(text: str, expect: pb.LabelSelector) -> None:
    sel = pb.parse_selector(text)
    assert sel == expect
    # Round trip through the canonical text.
    assert pb.parse_selector(pb.format_selector(sel)) == sel


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (
            "apple,banana err in (bar)",
            'could not match "banana err in (bar)" to a label selector expression',
        ),
        (
            "apple,banana in (bar,err baz)",
            'parsing "banana in (bar,err baz)": could not match "err baz" to a label selector set expression',
        ),
        ("ban=ana in (bar)", 'could not match "ban=ana in (bar)" to a label selector expression'),
        ("a=b", 'could not match "a=b" to a label selector expression'),  # Names are 2+ runes.
        ("foo=bar\n", 'could not match "foo=bar\\n" to a label selector expression'),
        ("foo in ()", 'could not match "foo in ()" to a label selector expression'),
        (
            "foo, foo in (bar)",
            "Include: Label has empty & non-empty values (index 1; label foo value bar)",
        ),
        (
            "!foo, foo notin (bar)",
            "Exclude: Label has empty & non-empty values (index 1; label foo value bar)",
        ),
        (
            "foo:prefix=a, foo=a",
            "Include: Labels not in unique, sorted order (index 1; label foo value a <= a)",
        ),
        (
            "foo=" + "v" * 1025,
            "Include.Labels[0].Value: invalid length (1025; expected 0 <= length <= 1024)",
        ),
        (
            "x" * 65 + "=v",
            "Include.Labels[0].Name: invalid length (65; expected 2 <= length <= 64)",
        ),
    ],
)
def test_parse_errors(text: str, expect: str) -> None:
    assert _err(text) == expect


def test_validate_selector() -> None:
    bad = pb.LabelSelector(include=pb.LabelSet(labels=[pb.Label(name="bad label")]))
    with pytest.raises(
        pb.ValidationError, match=r"^Include.Labels\[0\].Name: not a valid token \(bad label\)$"
    ):
        pb.validate(bad)
    bad = pb.LabelSelector(exclude=pb.LabelSet(labels=[pb.Label(name="bad label")]))
    with pytest.raises(
        pb.ValidationError, match=r"^Exclude.Labels\[0\].Name: not a valid token \(bad label\)$"
    ):
        pb.validate_selector(bad)


@pytest.mark.parametrize(
    ("sel", "text"),
    [
        (_sel(), ""),
        (_sel([("foo", "bar")]), "foo=bar"),
        (_sel(exclude=[("foo", "bar")]), "foo!=bar"),
        (_sel([("foo", "")]), "foo"),
        (_sel(exclude=[("foo", "")]), "!foo"),
        (_sel([("foo", "b"), ("foo", "a")]), "foo in (a,b)"),
        (_sel(exclude=[("foo", "b"), ("foo", "a")]), "foo notin (a,b)"),
        (
            _sel([("bb", "1"), ("aa", "2"), ("aa", "3")], [("dd", ""), ("cc", "x")]),
            "aa in (2,3),bb=1,cc!=x,!dd",
        ),
        # Prefix names sort with their suffix: "foo" < "foo1" < "foo:prefix" < "fooa".
        (
            _sel([("fooa", "1"), ("foo:prefix", "p"), ("foo1", "2"), ("foo", "3")]),
            "foo=3,foo1=2,foo:prefix=p,fooa=1",
        ),
        # A name with prefix and exact values is two groups.
        (
            _sel([("foo:prefix", "a"), ("foo", "b"), ("foo:prefix", "c")]),
            "foo=b,foo:prefix in (a,c)",
        ),
    ],
)
def test_format(sel: pb.LabelSelector, text: str) -> None:
    assert pb.format_selector(sel) == text
    assert pb.parse_selector(text) == sel


def test_the_issue_example() -> None:
    sel = pb.parse_selector("topic=logs, region in (apac, us), !deprecated")
    assert pb.format_selector(sel) == "region in (apac,us),topic=logs,!deprecated"


def test_matches() -> None:
    sel = _sel(
        [("inc-1:prefix", "a-val/"), ("inc-2", ""), ("inc-3", "val-1"), ("inc-3", "val-2")],
        [("exc-1", ""), ("exc-2", "val-3"), ("exc-2", "val-4")],
    )
    cases = [
        ([], False),
        ([("foo", "bar"), ("inc-1", "a-val/a/1"), ("inc-2", "any"), ("inc-3", "val-1")], True),
        ([("foo", "bar"), ("inc-1", "a-val/b/2"), ("inc-2", "foo"), ("inc-3", "val-1")], True),
        ([("foo", "bar"), ("inc-1", "a-val/c/3"), ("inc-2", "any"), ("inc-3", "val-2")], True),
        ([("foo", "bar"), ("inc-1", "bad-val/4"), ("inc-2", "any"), ("inc-3", "val-1")], False),
        ([("foo", "bar"), ("inc-1", "a-val/5"), ("inc-3", "val-1")], False),
        ([("foo", "bar"), ("inc-1", "a-val/6"), ("inc-2", "any"), ("inc-3", "val-other")], False),
        (
            [
                ("exc-1", "any"),
                ("foo", "bar"),
                ("inc-1", "a-val/a/7"),
                ("inc-2", "any"),
                ("inc-3", "val-1"),
            ],
            False,
        ),
        (
            [
                ("exc-2", "val-4"),
                ("foo", "bar"),
                ("inc-1", "a-val/8"),
                ("inc-2", "any"),
                ("inc-3", "val-1"),
            ],
            False,
        ),
        (
            [
                ("exc-2", "val-ok"),
                ("foo", "bar"),
                ("inc-1", "a-val/9/9"),
                ("inc-2", "any"),
                ("inc-3", "val-1"),
            ],
            True,
        ),
        # Several set values for one name: any may match.
        ([("inc-1", "zzz"), ("inc-1", "a-val/x"), ("inc-2", "x"), ("inc-3", "val-2")], True),
    ]
    for labels, expect in cases:
        assert pb.matches(sel, pb.label_set(labels)) is expect, labels

    excl_only = _sel(exclude=[("exc-1", ""), ("exc-2", "val-3"), ("exc-2", "val-4")])
    assert pb.matches(excl_only, pb.label_set([])) is True
    assert pb.matches(excl_only, pb.label_set([("foo", "bar")])) is True
    assert pb.matches(excl_only, pb.label_set([("exc-2", "val-ok"), ("foo", "bar")])) is True
    assert pb.matches(excl_only, pb.label_set([("exc-2", "val-3"), ("foo", "bar")])) is False
    assert pb.matches(excl_only, pb.label_set([("exc-1", "any"), ("foo", "bar")])) is False
    assert pb.matches(pb.LabelSelector(), pb.label_set([("a", "b")])) is True


def test_rewrite_prefix_selector() -> None:
    sel = pb.parse_selector("prefix in (a/, b/), name=c/d, !prefix, topic=x")
    out = pb.rewrite_prefix_selector(sel)
    assert pb.format_selector(out) == "name=c/d,name:prefix in (a/,b/),topic=x,!name:prefix"
    assert pb.format_selector(sel) == "name=c/d,prefix in (a/,b/),topic=x,!prefix"  # Untouched.
    spec = pb.JournalSpec(name="a/journal", labels=pb.label_set([("topic", "x")]))
    sel = pb.rewrite_prefix_selector(pb.parse_selector("prefix=a/"))
    assert pb.matches(sel, pb.label_set_ext(spec))
    sel = pb.rewrite_prefix_selector(pb.parse_selector("prefix=b/"))
    assert not pb.matches(sel, pb.label_set_ext(spec))


# Hypothesis: selectors built from the grammar's alphabets.
_NAME_CHARS = st.sampled_from([*list("abcxyz09-_+/."), "é", "日"])
_VALUE_CHARS = st.sampled_from([*list("abcxyz09-_+/.=%"), "é", "日"])
_names = st.text(_NAME_CHARS, min_size=2, max_size=8)
# Gazette's own caveat: an include value starting with '=' prints as `name==v`,
# which parses back as `name=v`. Such values are left out of the round trip.
_values = st.text(_VALUE_CHARS, min_size=1, max_size=8).filter(lambda v: not v.startswith("="))


@st.composite
def _groups(draw: st.DrawFn) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name in draw(st.lists(_names, max_size=4, unique=True)):
        prefix = draw(st.booleans())
        label = name + ":prefix" if prefix else name
        if draw(st.booleans()):
            out.append((label, ""))
        else:
            out.extend((label, v) for v in draw(st.lists(_values, min_size=1, max_size=3)))
    return out


@given(_groups(), _groups())
def test_round_trip(include: list[tuple[str, str]], exclude: list[tuple[str, str]]) -> None:
    sel = _sel(include, exclude)
    try:
        pb.validate_selector(sel)
    except pb.ValidationError:
        return  # E.g. the same name with and without prefix and an empty value.
    text = pb.format_selector(sel)
    again = pb.parse_selector(text)
    assert again == sel
    assert pb.format_selector(again) == text


@given(_groups(), _groups(), st.sampled_from([" ", ""]))
def test_canonical_of_spaced_text(
    include: list[tuple[str, str]], exclude: list[tuple[str, str]], space: str
) -> None:
    sel = _sel(include, exclude)
    try:
        pb.validate_selector(sel)
    except pb.ValidationError:
        return
    # Re-spell the canonical text with optional spaces; it must parse to the same selector.
    text = pb.format_selector(sel)
    spaced = text.replace(",", space + "," + space).replace("!=", space + "!=" + space)
    assert pb.format_selector(pb.parse_selector(spaced)) == text
