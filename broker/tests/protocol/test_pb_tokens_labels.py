"""Tokens, journal names, labels and label sets (broker.md §3.1, §3.2, §3.4, §3.6)."""

import pytest

from gazette.broker import protocol as pb


def _err(fn, *args, **kwargs) -> str:
    with pytest.raises(pb.ValidationError) as info:
        fn(*args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize(
    ("journal", "expect"),
    [
        ("a/valid/path/to/a/journal", None),
        ("foo/bar;baz/bing", None),
        ("foo/bar/webhook;foo/bar/webhook/http%3A%2F%2Fexample.com%3A9000%2F", None),
        ("ünïcødé/jöurnal", None),
        ("a=b/c%20d", None),
        ("/leading/slash", "cannot begin with '/' (/leading/slash)"),
        ("trailing/slash/", "must be a clean path (trailing/slash/)"),
        ("extra-middle//slash", "must be a clean path (extra-middle//slash)"),
        ("dot/./segment", "must be a clean path (dot/./segment)"),
        ("dot/../segment", "must be a clean path (dot/../segment)"),
        ("./dot/segment", "must be a clean path (./dot/segment)"),
        ("//double/leading", "must be a clean path (//double/leading)"),
        # Clean to Go, so Gazette accepts them; refused here as they climb out of a store.
        ("../x", "cannot have a '..' path segment (../x)"),
        ("../../etc/passwd", "cannot have a '..' path segment (../../etc/passwd)"),
        ("../x;meta", "cannot have a '..' path segment (../x)"),
        # Dots inside segments, and segments of other than exactly two dots, are names.
        ("a.b/c", None),
        ("a/b.c/..d/e..", None),
        (".../x", None),
        (".hidden/journal", None),
        ("not-$%|-a valid token", "not a valid token (not-$%|-a valid token)"),
        ("hash#journal", "not a valid token (hash#journal)"),
        ("", "invalid length (0; expected 4 <= length <= 512)"),
        ("zz", "invalid length (2; expected 4 <= length <= 512)"),
        ("a" * 513, "invalid length (513; expected 4 <= length <= 512)"),
        # Lengths are UTF-8 bytes: two 2-byte runes make 4 bytes.
        ("éé", None),
        ("é" * 257, "invalid length (514; expected 4 <= length <= 512)"),
        (
            "foo/bar;disallowed#rune",
            "metadata path segment: not a valid token (disallowed#rune)",
        ),
        ("foo/bar;", "metadata path segment: invalid length (0; expected 1 <= length <= 512)"),
        ("foo/bar;/abs", "metadata path segment: cannot begin with '/' (/abs)"),
        ("foo/bar;a//b", "metadata path segment: must be a clean path (a//b)"),
    ],
)
def test_journal_names(journal: str, expect: str | None) -> None:
    if expect is None:
        pb.validate_journal(journal)
    else:
        assert _err(pb.validate_journal, journal) == expect


def test_meta_splits() -> None:
    assert pb.split_meta("foo/bar;meta-part") == ("foo/bar", ";meta-part")
    assert pb.split_meta("foo/bar") == ("foo/bar", "")
    assert pb.strip_meta("foo/bar;meta;more") == "foo/bar"
    assert pb.strip_meta("foo/bar") == "foo/bar"


@pytest.mark.parametrize(
    ("value", "lo", "hi", "expect"),
    [
        ("zone-a", 1, 32, None),
        ("a_b+c/d.e", 1, 32, None),
        ("a=b", 1, 32, "not a valid token (a=b)"),
        ("a%b", 1, 32, "not a valid token (a%b)"),
        ("a b", 1, 32, "not a valid token (a b)"),
        ("a:b", 1, 32, "not a valid token (a:b)"),
        ("", 1, 32, "invalid length (0; expected 1 <= length <= 32)"),
        ("x" * 33, 1, 32, "invalid length (33; expected 1 <= length <= 32)"),
        ("日本", 1, 6, None),
        ("日本語", 1, 9, None),
        ("日本語", 1, 6, "invalid length (9; expected 1 <= length <= 6)"),
        ("٣٤", 1, 8, None),  # Arabic-Indic digits are numbers.
    ],
)
def test_tokens(value: str, lo: int, hi: int, expect: str | None) -> None:
    if expect is None:
        pb.validate_token(value, lo, hi)
    else:
        assert _err(pb.validate_token, value, lo, hi) == expect


def test_path_components() -> None:
    pb.validate_path_component("", 0, 10)
    pb.validate_path_component("a=1/b%2", 0, 10)
    # Go's path.Clean(".") is ".", so Gazette accepts a lone dot (the spec says otherwise).
    pb.validate_path_component(".", 0, 10)
    assert _err(pb.validate_path_component, "a/.", 0, 10) == "must be a clean path (a/.)"
    pb.validate_path_component("..", 0, 10)  # Also clean; FragmentStoreHealth checks it apart.
    assert _err(pb.validate_path_component, "a/..", 0, 10) == "must be a clean path (a/..)"
    assert _err(pb.validate_path_component, "a/", 0, 10) == "must be a clean path (a/)"
    assert _err(pb.validate_path_component, "/a", 0, 10) == "cannot begin with '/' (/a)"
    assert _err(pb.validate_path_component, "a|b", 0, 10) == "not a valid token (a|b)"
    assert (
        _err(pb.validate_path_component, "", 1, 10)
        == "invalid length (0; expected 1 <= length <= 10)"
    )


@pytest.mark.parametrize(
    ("p", "clean"),
    [
        ("", "."),
        (".", "."),
        ("a/b", "a/b"),
        ("a//b/", "a/b"),
        ("/../a", "/a"),
        ("../a/..", ".."),
        ("a/./b/../c", "a/c"),
        ("/", "/"),
    ],
)
def test_path_clean(p: str, clean: str) -> None:
    assert pb.path_clean(p) == clean


@pytest.mark.parametrize(
    ("name", "value", "expect"),
    [
        ("a-label", "a-value", None),
        ("a/label", "a%20value", None),
        ("a-label", "", None),
        ("a|label", "a-value", "Name: not a valid token (a|label)"),
        ("a-label", "a|value", "Value: not a valid token (a|value)"),
        ("a", "a-value", "Name: invalid length (1; expected 2 <= length <= 64)"),
        ("a" * 65, "a-value", "Name: invalid length (65; expected 2 <= length <= 64)"),
        ("a-label", "a" * 1025, "Value: invalid length (1025; expected 0 <= length <= 1024)"),
        ("a-label:prefix", "a-value", "Name: not a valid token (a-label:prefix)"),
    ],
)
def test_labels(name: str, value: str, expect: str | None) -> None:
    label = pb.Label(name=name, value=value)
    if expect is None:
        pb.validate_label(label)
        pb.validate(label)
    else:
        assert _err(pb.validate_label, label) == expect
        assert _err(pb.validate, label) == expect


def test_label_prefix_only_in_selectors() -> None:
    label = pb.Label(name="a-label", value="v", prefix=True)
    assert _err(pb.validate_label, label) == "Prefix may not be set outside of a LabelSelector"
    pb.validate_label(label, allow_prefix=True)


def _set(*labels: tuple[str, str]) -> pb.LabelSet:
    # Raw, in the given order (not sorted), to exercise validation.
    return pb.LabelSet(labels=[pb.Label(name=n, value=v) for n, v in labels])


def test_labelset_rules() -> None:
    ok = _set(("aaa", "111"), ("aaa", "222"), ("bbb", ""), ("ccc", "333"))
    pb.validate_labelset(ok)

    assert (
        _err(pb.validate_labelset, _set(("bad label", "x")))
        == "Labels[0].Name: not a valid token (bad label)"
    )
    assert (
        _err(pb.validate_labelset, _set(("bbb", "x"), ("aaa", "y")))
        == "Labels not in unique, sorted order (index 1; label name aaa <= bbb)"
    )
    assert (
        _err(pb.validate_labelset, _set(("aaa", "111"), ("aaa", "444"), ("aaa", "333")))
        == "Labels not in unique, sorted order (index 2; label aaa value 333 <= 444)"
    )
    assert (
        _err(pb.validate_labelset, _set(("aaa", "111"), ("aaa", "111")))
        == "Labels not in unique, sorted order (index 1; label aaa value 111 <= 111)"
    )
    assert (
        _err(pb.validate_labelset, _set(("ccc", ""), ("ccc", "")))
        == "Labels not in unique, sorted order (index 1; label ccc value  <= )"
    )
    assert (
        _err(pb.validate_labelset, _set(("aaa", "1"), ("ccc", ""), ("ccc", "444")))
        == "Label has empty & non-empty values (index 2; label ccc value 444)"
    )
    with_prefix = _set(("aaa", "1"), ("bbb", "2"))
    with_prefix.labels[1].prefix = True
    assert (
        _err(pb.validate_labelset, with_prefix)
        == "Labels[1]: Prefix may not be set outside of a LabelSelector"
    )
    pb.validate_labelset(with_prefix, allow_prefix=True)


def test_single_value_labels() -> None:
    assert {
        pb.LABEL_CONTENT_TYPE,
        pb.LABEL_INSTANCE,
        pb.LABEL_MANAGED_BY,
        pb.LABEL_MESSAGE_SUBTYPE,
        pb.LABEL_MESSAGE_TYPE,
        pb.LABEL_REGION,
    } == pb.SINGLE_VALUE_LABELS
    assert pb.LABEL_TAG not in pb.SINGLE_VALUE_LABELS
    pb.validate_single_value_labels(pb.label_set([(pb.LABEL_TAG, "a"), (pb.LABEL_TAG, "b")]))
    assert (
        _err(
            pb.validate_single_value_labels,
            pb.label_set(
                [
                    ("aaa", "x"),
                    (pb.LABEL_CONTENT_TYPE, "a/b"),
                    (pb.LABEL_CONTENT_TYPE, "other/type"),
                ]
            ),
        )
        == "expected single-value Label has multiple values (index 2; label content-type value other/type)"
    )
    assert (
        _err(
            pb.validate_single_value_labels,
            pb.label_set([(pb.LABEL_INSTANCE, "a"), (pb.LABEL_INSTANCE, "b")]),
        )
        == "expected single-value Label has multiple values (index 1; label app.gazette.dev/instance value b)"
    )


def test_well_known_labels() -> None:
    assert pb.LABEL_CONTENT_TYPE == "content-type"
    assert pb.LABEL_MESSAGE_TYPE == "app.gazette.dev/message-type"
    assert pb.LABEL_MESSAGE_SUBTYPE == "app.gazette.dev/message-subtype"
    assert pb.LABEL_TAG == "app.gazette.dev/tag"
    assert pb.LABEL_MANAGED_BY == "app.gazette.dev/managed-by"
    assert pb.LABEL_INSTANCE == "app.gazette.dev/instance"
    assert pb.LABEL_REGION == "app.gazette.dev/region"
    assert pb.CONTENT_TYPE_CSV == "text/csv"
    assert pb.CONTENT_TYPE_JSON_LINES == "application/x-ndjson"
    assert pb.CONTENT_TYPE_PROTOBUF_FIXED == "application/x-protobuf-fixed"
    assert pb.CONTENT_TYPE_RECOVERYLOG == "application/x-gazette-recoverylog"


def _pairs(ls: pb.LabelSet) -> list[tuple[str, str]]:
    return [(lb.name, lb.value) for lb in ls.labels]


def test_label_set_builders() -> None:
    ls = pb.label_set([("b", "2"), ("a", "9"), ("b", "1"), ("a", "9")])
    assert _pairs(ls) == [("a", "9"), ("b", "1"), ("b", "2")]
    ls = pb.label_set({"content-type": "x/y", "tag": ["b", "a"]}, zone="z")
    assert _pairs(ls) == [("content-type", "x/y"), ("tag", "a"), ("tag", "b"), ("zone", "z")]
    sel = pb.label_set([("name:prefix", "a/")])
    assert sel.labels[0].name == "name" and sel.labels[0].prefix

    assert pb.values_of(ls, "tag") == ["a", "b"]
    assert pb.values_of(ls, "missing") == []
    assert pb.value_of(ls, "tag") == "a"
    assert pb.value_of(ls, "missing") == ""

    pb.set_value(ls, "tag", "c")
    assert _pairs(ls) == [("content-type", "x/y"), ("tag", "c"), ("zone", "z")]
    pb.add_value(ls, "tag", "a")
    pb.add_value(ls, "tag", "a")
    assert _pairs(ls) == [("content-type", "x/y"), ("tag", "a"), ("tag", "c"), ("zone", "z")]
    pb.remove(ls, "tag")
    assert _pairs(ls) == [("content-type", "x/y"), ("zone", "z")]
    pb.set_value(ls, "new", "v")
    assert _pairs(ls) == [("content-type", "x/y"), ("new", "v"), ("zone", "z")]


def test_set_algebra() -> None:
    lhs = pb.label_set(
        [("aaa", "1"), ("bbb", "2"), ("bbb", "3"), ("ccc", "4"), ("eee", "5"), ("fff", "6")]
    )
    rhs = pb.label_set([("bbb", "2"), ("bbb", "3"), ("ccc", "x"), ("ddd", "7"), ("fff", "6")])
    assert _pairs(pb.union(lhs, rhs)) == [
        ("aaa", "1"),
        ("bbb", "2"),
        ("bbb", "3"),
        ("ccc", "4"),
        ("ddd", "7"),
        ("eee", "5"),
        ("fff", "6"),
    ]
    assert _pairs(pb.union(rhs, lhs)) == [
        ("aaa", "1"),
        ("bbb", "2"),
        ("bbb", "3"),
        ("ccc", "x"),
        ("ddd", "7"),
        ("eee", "5"),
        ("fff", "6"),
    ]
    assert _pairs(pb.intersect(lhs, rhs)) == [("bbb", "2"), ("bbb", "3"), ("fff", "6")]
    assert _pairs(pb.subtract(lhs, rhs)) == [("aaa", "1"), ("ccc", "4"), ("eee", "5")]
    # A partial match of a name's values is not a match.
    part = pb.label_set([("bbb", "2")])
    assert _pairs(pb.intersect(lhs, part)) == []
    assert ("bbb", "2") in _pairs(pb.subtract(lhs, part))
    # Arguments are untouched.
    assert len(lhs.labels) == 6 and len(rhs.labels) == 5
    assert _pairs(pb.union(pb.LabelSet(), pb.LabelSet())) == []


def test_label_set_ext() -> None:
    spec = pb.JournalSpec(name="a/journal", labels=pb.label_set([("aaa", "1"), ("zzz", "2")]))
    assert _pairs(pb.label_set_ext(spec)) == [("aaa", "1"), ("name", "a/journal"), ("zzz", "2")]
