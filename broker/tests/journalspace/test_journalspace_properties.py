"""Property tests: listing then applying journals changes nothing, and dumped text is stable."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.broker import journalspace as js
from gazette.broker import protocol as pb

SECOND = 1_000_000_000

# Small pools make equal values (and so hoisting) common.
_COMPONENTS = ["aa", "ab", "b.c", "x-y", "zz", "q", "ñu", "01"]
_LABEL_NAMES = ["env", "team", "tier", "app.gazette.dev/tag"]
_LABEL_VALUES = ["", "a", "b", "prod", "true", "1", "x/y"]
_STORES = ["s3://bucket/", "gs://other/path/", "file:///data/journals/", "azure://acct/cont/"]
_TEMPLATES = ["", 'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}', "x={{ .Spool.Begin }}"]

names = (
    st.lists(st.sampled_from(_COMPONENTS), min_size=1, max_size=4)
    .map("/".join)
    .filter(lambda n: len(n.encode()) >= 4)
)


@st.composite
def label_sets(draw: st.DrawFn) -> pb.LabelSet:
    by_name = draw(
        st.dictionaries(
            st.sampled_from(_LABEL_NAMES),
            st.sets(st.sampled_from(_LABEL_VALUES), min_size=1, max_size=3),
            max_size=3,
        )
    )
    labels = []
    for name in sorted(by_name):
        values = sorted(by_name[name])
        if "" in values:
            values = [""]  # A name with an empty value may have no other values.
        labels.extend(pb.Label(name=name, value=v) for v in values)
    return pb.LabelSet(labels=labels)


def _durations(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.one_of(
        st.sampled_from([lo, hi, 60 * SECOND, 3600 * SECOND]).filter(lambda d: lo <= d <= hi),
        st.integers(lo, hi),
    )


@st.composite
def fragments(draw: st.DrawFn) -> pb.JournalSpec.Fragment:
    stores = draw(st.lists(st.sampled_from(_STORES), max_size=2, unique=True))
    codecs = [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY]
    if not stores or not stores[0].startswith("file://"):
        codecs.append(pb.GZIP_OFFLOAD_DECOMPRESSION)
    return pb.JournalSpec.Fragment(
        length=draw(st.sampled_from([1024, 1 << 20, 1 << 34]) | st.integers(1024, 1 << 34)),
        compression_codec=draw(st.sampled_from(codecs)),
        stores=stores,
        refresh_interval=pb.duration_from_nanos(draw(_durations(SECOND, 24 * 3600 * SECOND))),
        retention=pb.duration_from_nanos(
            draw(st.sampled_from([0, 720 * 3600 * SECOND]) | st.integers(-(1 << 62), 1 << 62))
        ),
        flush_interval=pb.duration_from_nanos(draw(st.just(0) | _durations(60 * SECOND, 1 << 50))),
        path_postfix_template=draw(st.sampled_from(_TEMPLATES)),
    )


@st.composite
def journal_specs(draw: st.DrawFn, name: str) -> pb.JournalSpec:
    spec = pb.JournalSpec(
        name=name,
        replication=draw(st.integers(1, 5)),
        labels=draw(label_sets()),
        fragment=draw(fragments()),
        flags=draw(st.sampled_from([0, 1, 2, 4])),
        max_append_rate=draw(st.sampled_from([0, 1 << 20]) | st.integers(0, 1 << 40)),
    )
    if draw(st.booleans()):
        spec.suspend.level = draw(st.sampled_from([0, 1, 2]))
        spec.suspend.offset = draw(st.integers(0, 1 << 40))
        spec.suspend.SetInParent()
    pb.validate(spec)
    return spec


@st.composite
def listings(draw: st.DrawFn) -> list[tuple[pb.JournalSpec, int]]:
    unique = draw(st.sets(names, min_size=1, max_size=12))
    return [(draw(journal_specs(name)), draw(st.integers(0, 1 << 40))) for name in sorted(unique)]


@settings(max_examples=100, deadline=None)
@given(listings())
def test_flatten_inverts_hoist_through_yaml(listing: list[tuple[pb.JournalSpec, int]]) -> None:
    text = js.dump(js.hoist(listing))
    changes = js.flatten(js.load(text))
    assert changes == [
        pb.ApplyRequest.Change(upsert=spec, expect_mod_revision=revision)
        for spec, revision in listing
    ]


@settings(max_examples=75, deadline=None)
@given(listings())
def test_dumped_listings_are_stable_text(listing: list[tuple[pb.JournalSpec, int]]) -> None:
    text = js.dump(js.hoist(listing))
    assert js.dump(js.load(text)) == text
    # Hoisting what was flattened from the text gives the same text again.
    flat = [(c.upsert, c.expect_mod_revision) for c in js.flatten(js.load(text))]
    assert js.dump(js.hoist(flat)) == text


@settings(max_examples=75, deadline=None)
@given(listings(), st.data())
def test_arbitrary_strings_round_trip(
    listing: list[tuple[pb.JournalSpec, int]], data: st.DataObject
) -> None:
    tree = js.hoist(listing)
    # Any text may sit in comments, label names and values, stores and templates:
    # structure is all `load` checks, and the text must come back unchanged.
    stack = [tree]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        node.comment = data.draw(st.text(max_size=30))
        node.labels = [
            js.Label(data.draw(st.text(max_size=8)), data.draw(st.text(max_size=12)))
            for _ in range(data.draw(st.integers(0, 2)))
        ]
        node.fragment.path_postfix_template = data.draw(st.text(max_size=20))
        node.fragment.stores = data.draw(st.none() | st.lists(st.text(max_size=10), max_size=2))
    text = js.dump(tree)
    assert js.load(text) == tree
    assert js.dump(js.load(text)) == text
