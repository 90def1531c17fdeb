"""Loading and dumping the journal YAML hierarchy: exact text, strictness, errors."""

from __future__ import annotations

import io
import pathlib

import pytest

from gazette.broker import journalspace as js
from gazette.broker import protocol as pb

EXAMPLES = sorted((pathlib.Path(__file__).parent / "examples").glob("*.yaml"))

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

# Every key of the format, in the order it is written, and the spelling of
# values that `gazctl journals list -o yaml` uses.
FIXTURE = """\
name: orders/
replication: 2
labels:
- name: owner
  value: billing
fragment:
  length: 4096
  compression_codec: ZSTANDARD
  stores:
  - s3://orders-bucket/
  - gs://orders-archive/
  refresh_interval: 30s
  retention: 2h0m0s
  flush_interval: 5m0s
  path_postfix_template: hour={{ .Spool.FirstAppendTime.Format "15" }}
flags: O_RDONLY
max_append_rate: 5000000
children:
- delete: true
  name: orders/cancelled
  revision: 12
- name: orders/placed/eu
- comment: The busiest partition.
  name: orders/placed/us
  labels:
  - name: hot
    value: ""
  suspend:
    level: PARTIAL
    offset: 1024
  revision: 77
"""


def test_fixture_loads_to_the_expected_tree() -> None:
    tree = js.load(FIXTURE)
    assert tree == js.Node(
        name="orders/",
        replication=2,
        labels=[js.Label("owner", "billing")],
        fragment=js.Fragment(
            length=4096,
            compression_codec=pb.ZSTANDARD,
            stores=["s3://orders-bucket/", "gs://orders-archive/"],
            refresh_interval=30 * SECOND,
            retention=2 * HOUR,
            flush_interval=5 * MINUTE,
            path_postfix_template='hour={{ .Spool.FirstAppendTime.Format "15" }}',
        ),
        flags=pb.JournalSpec.O_RDONLY,
        max_append_rate=5_000_000,
        children=[
            js.Node(delete=True, name="orders/cancelled", revision=12),
            js.Node(name="orders/placed/eu"),
            js.Node(
                comment="The busiest partition.",
                name="orders/placed/us",
                labels=[js.Label("hot", "")],
                suspend=js.Suspend(level=pb.JournalSpec.Suspend.PARTIAL, offset=1024),
                revision=77,
            ),
        ],
    )


def test_fixture_dumps_back_to_the_same_text() -> None:
    assert js.dump(js.load(FIXTURE)) == FIXTURE


def test_fixture_flattens_to_full_specs() -> None:
    changes = js.flatten(js.load(FIXTURE))
    assert [c.delete for c in changes] == ["orders/cancelled", "", ""]
    assert [c.expect_mod_revision for c in changes] == [12, 0, 77]

    us = changes[2].upsert
    assert us.name == "orders/placed/us"
    assert [(lb.name, lb.value) for lb in us.labels.labels] == [("hot", ""), ("owner", "billing")]
    assert us.replication == 2
    assert us.fragment.compression_codec == pb.ZSTANDARD
    assert list(us.fragment.stores) == ["s3://orders-bucket/", "gs://orders-archive/"]
    assert pb.duration_nanos(us.fragment.flush_interval) == 5 * MINUTE
    assert us.suspend.level == pb.JournalSpec.Suspend.PARTIAL
    assert not changes[1].upsert.HasField("suspend")


def test_fixture_survives_hoisting_of_its_flattened_specs() -> None:
    changes = js.flatten(js.load(FIXTURE))
    upserts = [(c.upsert, c.expect_mod_revision) for c in changes if not c.delete]
    assert js.flatten(js.load(js.dump(js.hoist(upserts)))) == changes[1:]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_files_round_trip_exactly(path: pathlib.Path) -> None:
    text = path.read_text()
    tree = js.load(text)
    assert js.dump(tree) == text
    # The examples are valid as a whole, and re-listing them gives the same specs.
    changes = js.flatten(tree)
    upserts = [(c.upsert, c.expect_mod_revision) for c in changes if not c.delete]
    assert js.flatten(js.load(js.dump(js.hoist(upserts)))) == [c for c in changes if not c.delete]
    if path.name.startswith("listing."):
        # A listing is what `gazctl journals list -o yaml` prints: hoisting its
        # specs reproduces it to the byte.
        assert js.dump(js.hoist(upserts)) == text


def test_load_accepts_streams_and_bytes() -> None:
    assert js.load(io.StringIO(FIXTURE)) == js.load(FIXTURE)
    assert js.load(io.BytesIO(FIXTURE.encode())) == js.load(FIXTURE)
    assert js.load(FIXTURE.encode()) == js.load(FIXTURE)


def test_enums_load_from_integers_and_unknown_values_dump_as_integers() -> None:
    tree = js.load(
        "name: a/b/c\nfragment:\n  compression_codec: 3\nflags: 2\nsuspend:\n  level: 2\n"
    )
    assert tree.fragment.compression_codec == pb.ZSTANDARD
    assert tree.flags == pb.JournalSpec.O_WRONLY
    assert tree.suspend == js.Suspend(level=pb.JournalSpec.Suspend.FULL)
    assert js.dump(tree) == (
        "name: a/b/c\nfragment:\n  compression_codec: ZSTANDARD\nflags: O_WRONLY\n"
        "suspend:\n  level: FULL\n"
    )
    odd = js.Node(name="a/b/c", flags=35)
    assert js.dump(odd) == "name: a/b/c\nflags: 35\n"
    assert js.load(js.dump(odd)) == odd


def test_zero_values_are_left_out_but_an_empty_suspend_is_kept() -> None:
    tree = js.Node(name="a/b/c", suspend=js.Suspend(), fragment=js.Fragment(stores=[]))
    text = js.dump(tree)
    assert text == "name: a/b/c\nfragment:\n  stores: []\nsuspend: {}\n"
    assert js.load(text) == tree


def test_empty_tree_dumps_as_an_empty_mapping() -> None:
    assert js.dump(js.Node()) == "{}\n"
    assert js.dump(js.hoist([])) == "{}\n"


@pytest.mark.parametrize(
    "value",
    ["", "true", "no", "null", "~", "12", "0x1f", "1:30", "2.5", "2001-12-14", "yes", "ON"],
)
def test_strings_that_read_as_other_types_are_double_quoted(value: str) -> None:
    tree = js.Node(name="a/b/c", labels=[js.Label("x", value)])
    text = js.dump(tree)
    assert f'value: "{value}"\n' in text
    assert js.load(text) == tree


@pytest.mark.parametrize(
    "value",
    [
        "plain text",
        "has: colon",
        "#hash",
        " leading space",
        "trailing ",
        "-dash",
        "it's",
        "multi\nline",
        "multi\nline\n",
        "ünïcode ✓",
        "tab\tin",
        "'quoted'",
        '"double"',
    ],
)
def test_awkward_strings_round_trip(value: str) -> None:
    tree = js.Node(comment=value, name="a/b/c")
    text = js.dump(tree)
    assert js.load(text) == tree
    assert js.dump(js.load(text)) == text


def test_multiline_comments_are_literal_blocks() -> None:
    text = js.dump(js.Node(comment="first\nsecond", name="a/b/c"))
    assert text == "comment: |-\n  first\n  second\nname: a/b/c\n"


def test_scalar_text_reads_into_string_fields() -> None:
    # As with Go's decoder, a plain scalar is taken as its text.
    tree = js.load("name: a/b/c\nlabels:\n- name: version\n  value: 010\n")
    assert tree.labels == [js.Label("version", "010")]


def test_nulls_read_as_unset() -> None:
    tree = js.load(
        "comment:\ndelete:\nname: a/b/c\nlabels:\nfragment:\n  stores:\nsuspend:\nrevision:\n"
    )
    assert tree == js.Node(name="a/b/c")


# --- decode errors -------------------------------------------------------------------------


def _error(text: str) -> js.DecodeError:
    with pytest.raises(js.DecodeError) as e:
        js.load(text)
    return e.value


def test_unknown_keys_are_rejected_with_their_path() -> None:
    e = _error("name: a/\nchildren:\n- name: a/b\n  fragment:\n    lenght: 10\n")
    assert (e.node, e.field, e.line, e.column) == ("a/b", "fragment.lenght", 5, 5)
    assert str(e).startswith("a/b: fragment.lenght: unknown key 'lenght' (expected one of length,")
    assert str(e).endswith("(line 5, column 5)")


def test_unknown_top_level_key() -> None:
    e = _error("name: a/b/c\nreplicas: 3\n")
    assert (e.node, e.field) == ("a/b/c", "replicas")


def test_errors_before_the_name_still_name_the_node() -> None:
    e = _error("replication: three\nname: a/b/c\n")
    assert str(e) == "a/b/c: replication: expected an integer, not a string (line 1, column 14)"


def test_unnamed_nodes_are_named_by_position() -> None:
    e = _error("name: a/\nchildren:\n- name: a/b\n- replication: x\n")
    assert (e.node, e.field) == ("children[1]", "replication")


def test_repeated_keys_are_rejected() -> None:
    e = _error("name: a/b/c\nreplication: 1\nreplication: 2\n")
    assert (e.field, e.reason) == ("replication", "key is repeated")


def test_bad_enum_names() -> None:
    e = _error("name: a/b/c\nfragment:\n  compression_codec: LZ4\n")
    assert e.field == "fragment.compression_codec"
    assert e.reason.startswith("'LZ4' is not a CompressionCodec (expected one of INVALID, NONE,")
    e = _error("name: a/b/c\nflags: O_APPEND\n")
    assert (e.field, e.reason.split(" (")[0]) == ("flags", "'O_APPEND' is not a JournalSpec.Flag")
    e = _error("name: a/b/c\nsuspend:\n  level: HALF\n")
    assert e.field == "suspend.level"


def test_bad_durations() -> None:
    e = _error("name: a/b/c\nfragment:\n  retention: 3 days\n")
    assert e.field == "fragment.retention"
    assert (
        e.reason == 'not a duration (\'3 days\'): time: unknown unit " days" in duration "3 days"'
    )
    e = _error("name: a/b/c\nfragment:\n  refresh_interval: 60\n")
    assert e.reason == "expected a duration such as 1m30s, not an integer '60'"


def test_wrong_shapes() -> None:
    assert _error("name: a/b/c\nlabels: env\n").reason == "expected a list, not a string"
    assert _error("name: a/b/c\nlabels:\n- env\n").field == "labels[0]"
    assert _error("name: a/b/c\nlabels:\n- name: x\n  colour: red\n").field == "labels[0].colour"
    assert _error("name: a/b/c\nfragment: big\n").reason == "expected a mapping, not a string"
    assert _error("name: a/b/c\ndelete: maybe\n").reason == "expected true or false, not a string"
    assert _error("name: [a]\n").reason == "expected a string, not a list"
    assert _error("- name: a/b/c\n").reason == "expected a mapping, not a list"
    e = _error("name: a/b/c\nfragment:\n  stores:\n  - {url: x}\n")
    assert e.field == "fragment.stores[0]"


def test_malformed_yaml() -> None:
    e = _error("name: a/b/c\n  replication: [1\n")
    assert e.reason.startswith("not valid YAML")
    assert e.line is not None


def test_load_checks_structure() -> None:
    with pytest.raises(js.StructureError, match=r"^a/: children: a directory needs"):
        js.load("name: a/\n")
