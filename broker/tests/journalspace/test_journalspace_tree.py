"""Structure rules, push down, hoisting and tree extraction of journal node trees."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.broker import journalspace as js
from gazette.broker import protocol as pb
from gazette.broker.journalspace import tree as js_tree

RDONLY = pb.JournalSpec.O_RDONLY
WRONLY = pb.JournalSpec.O_WRONLY
RDWR = pb.JournalSpec.O_RDWR


def N(name: str, *children: js.Node, **fields: object) -> js.Node:
    return js.Node(name=name, children=list(children), **fields)  # type: ignore[arg-type]


# --- structure rules ---------------------------------------------------------------------


def test_directory_with_revision_is_rejected() -> None:
    with pytest.raises(js.StructureError) as e:
        js.validate(N("logs/", N("logs/a"), revision=7))
    assert str(e.value) == "logs/: revision: a directory cannot have a revision (7)"
    assert (e.value.node, e.value.field) == ("logs/", "revision")


def test_directory_needs_children() -> None:
    with pytest.raises(js.StructureError) as e:
        js.validate(N("logs/"))
    assert str(e.value) == "logs/: children: a directory needs one or more children"


def test_root_directory_needs_children() -> None:
    with pytest.raises(js.StructureError) as e:
        js.validate(js.Node())
    assert str(e.value) == "(root): children: a directory needs one or more children"


def test_children_must_start_with_directory_name() -> None:
    with pytest.raises(js.StructureError) as e:
        js.validate(N("logs/", N("logs/a"), N("metrics/b")))
    assert str(e.value) == (
        "logs/: children[1].name: child is not under its directory"
        " ('metrics/b' does not start with 'logs/')"
    )


def test_children_must_be_strictly_sorted() -> None:
    with pytest.raises(js.StructureError) as e:
        js.validate(N("logs/", N("logs/b"), N("logs/a")))
    assert str(e.value) == (
        "logs/: children[1].name: children must be strictly sorted by name ('logs/b' then 'logs/a')"
    )
    with pytest.raises(js.StructureError, match="strictly sorted"):
        js.validate(N("logs/", N("logs/a"), N("logs/a")))


def test_journal_name_must_be_valid() -> None:
    with pytest.raises(js.StructureError) as e:
        js.validate(N("logs/", N("logs/bad name")))
    assert str(e.value) == "logs/bad name: name: not a valid token (logs/bad name)"


def test_journal_cannot_have_children() -> None:
    with pytest.raises(js.StructureError) as e:
        js.validate(N("logs/a", N("logs/a/b")))
    assert (
        str(e.value)
        == "logs/a: children: a journal (a name not ending in '/') cannot have children"
    )


def test_nested_errors_name_the_offending_node() -> None:
    tree = N("a/", N("a/b/", N("a/b/c/")))
    with pytest.raises(js.StructureError) as e:
        js.validate(tree)
    assert e.value.node == "a/b/c/"


def test_well_formed_trees_validate() -> None:
    js.validate(N("logs/", N("logs/a"), N("logs/b/", N("logs/b/x"))))
    js.validate(N("", N("aa/x"), N("bb/y")))
    js.validate(N("single/journal", revision=12))


# --- push down ---------------------------------------------------------------------------


@pytest.mark.parametrize("root", ["", "top/"])
def test_push_down_fills_unset_fields_from_parents(root: str) -> None:
    tree = N(
        root,
        N(
            root + "east/",
            N(root + "east/one", flags=RDONLY),  # Overrides the directory's RDWR.
            N(root + "east/two"),
            flags=RDWR,
        ),
        N(
            root + "west/",
            N(
                root + "west/deep/",
                N(
                    root + "west/deep/gone/",
                    N(root + "west/deep/gone/p"),
                    N(root + "west/deep/gone/q", delete=False),  # Opts out of the delete.
                    delete=True,
                ),
                N(root + "west/deep/z"),
                replication=2,  # Overrides the root's 1.
            ),
            N(root + "west/solo", replication=4, flags=WRONLY),
        ),
        replication=1,
    )
    js.validate(tree)
    got = [(n.name, n.replication, n.flags, n.delete) for n in js.push_down(tree).terminals()]
    assert got == [
        (root + "east/one", 1, RDONLY, None),
        (root + "east/two", 1, RDWR, None),
        (root + "west/deep/gone/p", 2, 0, True),
        (root + "west/deep/gone/q", 2, 0, False),
        (root + "west/deep/z", 2, 0, None),
        (root + "west/solo", 4, WRONLY, None),
    ]


def test_push_down_clears_directories_and_keeps_the_input() -> None:
    tree = N("d/", N("d/a"), replication=3, comment="keep me")
    pushed = js.push_down(tree)
    assert pushed == N("d/", N("d/a", replication=3), comment="keep me")
    assert tree.replication == 3  # Not modified in place.
    assert tree.children[0].replication == 0


def test_push_down_labels_merge_by_name_child_winning() -> None:
    tree = N(
        "d/",
        N("d/a", labels=[js.Label("env", "dev"), js.Label("zone", "")]),
        labels=[js.Label("env", "prod"), js.Label("env", "qa"), js.Label("team", "core")],
    )
    (leaf,) = js.push_down(tree).terminals()
    assert leaf.labels == [js.Label("env", "dev"), js.Label("team", "core"), js.Label("zone", "")]


def test_push_down_stores_inherited_only_when_absent() -> None:
    parent = js.Fragment(stores=["s3://bucket/"], length=2048)
    tree = N(
        "d/",
        N("d/absent"),
        N("d/empty", fragment=js.Fragment(stores=[])),
        N("d/own", fragment=js.Fragment(stores=["gs://other/"])),
        fragment=parent,
    )
    got = [(n.name, n.fragment.stores, n.fragment.length) for n in js.push_down(tree).terminals()]
    assert got == [
        ("d/absent", ["s3://bucket/"], 2048),
        ("d/empty", [], 2048),
        ("d/own", ["gs://other/"], 2048),
    ]


def test_push_down_never_inherits_suspend() -> None:
    tree = N(
        "d/", N("d/a"), N("d/b", suspend=js.Suspend(level=1, offset=9)), suspend=js.Suspend(level=2)
    )
    got = [n.suspend for n in js.push_down(tree).terminals()]
    assert got == [None, js.Suspend(level=1, offset=9)]


# --- hoisting ----------------------------------------------------------------------------


def test_hoist_lifts_values_shared_by_every_child() -> None:
    tree = N(
        "box/",
        N("box/left", replication=2, flags=RDONLY, labels=[js.Label("k1", "v1")], delete=True),
        N(
            "box/right",
            replication=2,
            flags=RDONLY,
            labels=[js.Label("k1", "v1"), js.Label("k2", "v2")],
            delete=True,
        ),
    )
    assert js.hoist_node(tree) == N(
        "box/",
        N("box/left"),
        N("box/right", labels=[js.Label("k2", "v2")]),
        replication=2,
        flags=RDONLY,
        labels=[js.Label("k1", "v1")],
        delete=True,
    )


def test_hoist_keeps_differences_and_suspend_in_children() -> None:
    tree = N(
        "box/",
        N("box/a", replication=1, suspend=js.Suspend(level=2, offset=5), revision=3),
        N("box/b", replication=2, suspend=js.Suspend(level=2, offset=5), revision=4),
    )
    assert js.hoist_node(tree) == tree


def test_hoist_of_a_single_child_directory_leaves_suspend_below() -> None:
    tree = N("box/", N("box/a", replication=3, suspend=js.Suspend(level=1)))
    assert js.hoist_node(tree) == N("box/", N("box/a", suspend=js.Suspend(level=1)), replication=3)


def test_hoist_of_label_values_compares_whole_value_lists() -> None:
    tree = N(
        "box/",
        N("box/a", labels=[js.Label("tag", "x"), js.Label("tag", "y")]),
        N("box/b", labels=[js.Label("tag", "x")]),
    )
    assert js.hoist_node(tree) == tree


# --- tree extraction -----------------------------------------------------------------------


def test_tree_extraction_makes_directories_only_where_names_diverge() -> None:
    names = [
        "top/left/000",
        "top/left/111/only/i",
        "top/left/111/only/j",
        "top/left/222",
        "top/right/333/a/x",
        "top/right/333/a/y",
        "top/right/333/z",
        "top/right/444",
    ]
    root = js_tree._extract_tree([js.Node(name=n) for n in names])
    assert root == N(
        "top/",
        N(
            "top/left/",
            N("top/left/000"),
            # `111/` has nothing but `only/` below it, so no node is made for it.
            N("top/left/111/only/", N("top/left/111/only/i"), N("top/left/111/only/j")),
            N("top/left/222"),
        ),
        N(
            "top/right/",
            N(
                "top/right/333/",
                N("top/right/333/a/", N("top/right/333/a/x"), N("top/right/333/a/y")),
                N("top/right/333/z"),
            ),
            N("top/right/444"),
        ),
    )
    js.validate(root)


def test_tree_extraction_of_zero_and_one_journals() -> None:
    assert js_tree._extract_tree([]) == js.Node()
    assert js_tree._extract_tree([js.Node(name="only/one")]) == js.Node(name="only/one")


def test_tree_extraction_of_unrelated_names_uses_an_unnamed_root() -> None:
    root = js_tree._extract_tree([js.Node(name="alpha/x"), js.Node(name="beta/y")])
    assert root == N("", N("alpha/x"), N("beta/y"))


@pytest.mark.parametrize(
    ("a", "b", "length"),
    [
        ("cat/dog", "cat/dot", 4),
        ("cat/dog/emu", "cat/dog/elk", 8),
        ("cat/dog/emu/1", "cat/dog/emu/2", 12),
        ("cat/dog/emu/same", "cat/dog/emu/same", 12),  # Only whole components count.
        ("cat/dog/", "cat/dot/", 4),
        ("cat/dog/", "cat/dog/", 8),
        ("nope/", "none/", 0),
        ("ab", "ab/c", 0),
    ],
)
def test_shared_prefix_counts_whole_components(a: str, b: str, length: int) -> None:
    assert js_tree._shared_prefix(a, b) == length
    assert js_tree._shared_prefix(b, a) == length


def _merge_runs_reference(names: list[str]) -> js.Node:
    """Gazette's way of building the tree, kept as an oracle: while more than one
    node is left, find the first longest run of neighbours sharing the longest
    prefix, and replace it by a directory of that prefix."""
    items = [js.Node(name=n) for n in names]
    while len(items) > 1:
        begin, end, best = 0, 0, -1
        for i in range(1, len(items)):
            shared = js_tree._shared_prefix(items[i - 1].name, items[i].name)
            if shared > best:
                begin, end, best = i - 1, i + 1, shared
            elif shared == best and i == end:
                end = i + 1
        items[begin:end] = [js.Node(name=items[begin].name[:best], children=items[begin:end])]
    return items[0]


@settings(max_examples=150, deadline=None)
@given(
    st.sets(
        st.lists(st.sampled_from(["a", "b", "ab", "a-b", "c.d"]), min_size=1, max_size=5).map(
            "/".join
        ),
        min_size=1,
        max_size=20,
    )
)
def test_tree_extraction_matches_gazettes_run_merging(names: set[str]) -> None:
    ordered = sorted(names)
    got = js_tree._extract_tree([js.Node(name=n) for n in ordered])
    assert got == _merge_runs_reference(ordered)
