"""Flattening trees into ApplyRequest changes, and hoisting specs into trees."""

from __future__ import annotations

import pytest

from gazette.broker import journalspace as js
from gazette.broker import protocol as pb

BASE = """\
name: app/
replication: 3
fragment:
  length: 1048576
  compression_codec: GZIP
  refresh_interval: 1m0s
children:
"""


def _spec(name: str, **fields: object) -> pb.JournalSpec:
    """A spec in the shape flatten produces (Go's always-present sub-messages)."""
    spec = js.spec_from_node(js.Node(name=name))
    spec.MergeFrom(pb.JournalSpec(**fields))  # type: ignore[arg-type]
    return spec


def test_upserts_carry_inherited_values_and_revisions() -> None:
    changes = js.flatten(
        js.load(BASE + "- name: app/a\n  revision: 5\n- name: app/b\n  revision: -1\n")
    )
    want = _spec(
        "app/a",
        replication=3,
        fragment=pb.JournalSpec.Fragment(
            length=1048576,
            compression_codec=pb.GZIP,
            refresh_interval=pb.duration_from_nanos(60_000_000_000),
        ),
    )
    assert changes[0] == pb.ApplyRequest.Change(expect_mod_revision=5, upsert=want)
    want.name = "app/b"
    assert changes[1] == pb.ApplyRequest.Change(expect_mod_revision=-1, upsert=want)


def test_upserts_are_encoded_as_gazette_encodes_them() -> None:
    (change,) = js.flatten(
        js.load(
            "name: a/b/c\nreplication: 1\nfragment:\n  length: 1024\n"
            "  compression_codec: NONE\n  refresh_interval: 1s\n"
        )
    )
    # Go always writes the non-nullable `labels`, `fragment` and durations.
    fragment = (
        b"\x08\x80\x08"  # length 1024
        b"\x10\x01"  # compression_codec NONE
        b"\x22\x02\x08\x01"  # refresh_interval {seconds: 1}
        b"\x2a\x00"  # retention {}
        b"\x32\x00"  # flush_interval {}
    )
    assert change.upsert.SerializeToString() == (
        b"\x0a\x05a/b/c"  # name
        b"\x10\x01"  # replication 1
        b"\x1a\x00" + b"\x22" + bytes([len(fragment)]) + fragment  # labels {}
    )


def test_deletes_are_inherited_and_can_be_overridden() -> None:
    changes = js.flatten(
        js.load(
            "delete: true\nname: old/\nchildren:\n- name: old/a\n  revision: 4\n"
            "- delete: false\n  name: old/b\n  replication: 1\n"
            "  fragment:\n    length: 1024\n    compression_codec: NONE\n"
            "    refresh_interval: 1s\n"
        )
    )
    assert changes[0] == pb.ApplyRequest.Change(expect_mod_revision=4, delete="old/a")
    assert changes[1].upsert.name == "old/b"


def test_deleted_journals_are_not_validated_as_specs() -> None:
    # A journal being deleted needs no valid replication, fragment, etc.
    (change,) = js.flatten(js.load("delete: true\nname: gone/journal\nrevision: 9\n"))
    assert change == pb.ApplyRequest.Change(expect_mod_revision=9, delete="gone/journal")


def test_deletes_need_a_revision() -> None:
    with pytest.raises(js.SpecError) as e:
        js.flatten(js.load("delete: true\nname: gone/journal\n"))
    assert (
        str(e.value) == "gone/journal: revision: invalid ExpectModRevision (0; expected > 0 or -1)"
    )
    (change,) = js.flatten(js.load("delete: true\nname: gone/journal\nrevision: -1\n"))
    assert change.expect_mod_revision == -1


def test_upsert_revisions_below_minus_one_are_rejected() -> None:
    with pytest.raises(js.SpecError) as e:
        js.flatten(js.load(BASE + "- name: app/a\n  revision: -2\n"))
    assert str(e.value) == "app/a: revision: invalid ExpectModRevision (-2; expected >= 0 or -1)"


def test_spec_names_cannot_carry_metadata() -> None:
    with pytest.raises(js.SpecError) as e:
        js.flatten(js.load(BASE + "- name: app/a;meta\n"))
    assert str(e.value) == (
        "app/a;meta: Name cannot have a metadata path segment (;meta; expected no segment)"
    )


def test_suspend_is_carried_but_not_inherited() -> None:
    changes = js.flatten(
        js.load(
            BASE + "- name: app/a\n  suspend:\n    level: FULL\n    offset: 100\n- name: app/b\n"
        )
    )
    assert changes[0].upsert.suspend == pb.JournalSpec.Suspend(
        level=pb.JournalSpec.Suspend.FULL, offset=100
    )
    assert not changes[1].upsert.HasField("suspend")


def test_invalid_specs_name_the_journal_and_field() -> None:
    with pytest.raises(js.SpecError) as e:
        js.flatten(
            js.load(BASE + "- name: app/ok\n- name: app/tiny\n  fragment:\n    length: 10\n")
        )
    assert e.value.node == "app/tiny"
    assert str(e.value) == (
        "app/tiny: Fragment: invalid Length (10; expected 1024 <= length <= 17179869184)"
    )
    assert isinstance(e.value.__cause__, pb.ValidationError)


def test_missing_values_are_spec_errors_of_the_journal() -> None:
    with pytest.raises(js.SpecError) as e:
        js.flatten(js.load("name: lonely/journal\n"))
    assert str(e.value) == (
        "lonely/journal: invalid Replication (0; expected 1 <= Replication <= 5)"
    )


def test_bad_label_sets_are_spec_errors() -> None:
    with pytest.raises(js.SpecError) as e:
        js.flatten(js.load(BASE + "- name: app/a\n  labels:\n  - name: name\n    value: x\n"))
    assert str(e.value) == 'app/a: Labels cannot include label "name"'
    with pytest.raises(js.SpecError) as e:
        js.flatten(
            js.load(
                BASE + "- name: app/a\n  labels:\n  - name: env\n    value: x\n    prefix: true\n"
            )
        )
    assert e.value.field.startswith("Labels")


def test_structure_is_checked_before_specs() -> None:
    tree = js.Node(name="x/", children=[js.Node(name="y/z")])
    with pytest.raises(js.StructureError):
        js.flatten(tree)


def test_hoist_groups_and_lifts_shared_values() -> None:
    frag = pb.JournalSpec.Fragment(
        length=2048, compression_codec=pb.SNAPPY, refresh_interval=pb.duration_from_nanos(10**9)
    )
    specs = [
        (
            _spec(
                "svc/logs/b",
                replication=3,
                fragment=frag,
                labels=pb.LabelSet(labels=[pb.Label(name="env", value="prod")]),
            ),
            11,
        ),
        (
            _spec(
                "svc/logs/a",
                replication=3,
                fragment=frag,
                labels=pb.LabelSet(labels=[pb.Label(name="env", value="dev")]),
                suspend=pb.JournalSpec.Suspend(level=pb.JournalSpec.Suspend.PARTIAL),
            ),
            10,
        ),
        (_spec("svc/metrics", replication=1, fragment=frag), 12),
    ]
    text = js.dump(js.hoist(specs))
    assert (
        text
        == """\
name: svc/
fragment:
  length: 2048
  compression_codec: SNAPPY
  refresh_interval: 1s
children:
- name: svc/logs/
  replication: 3
  children:
  - name: svc/logs/a
    labels:
    - name: env
      value: dev
    suspend:
      level: PARTIAL
    revision: 10
  - name: svc/logs/b
    labels:
    - name: env
      value: prod
    revision: 11
- name: svc/metrics
  replication: 1
  revision: 12
"""
    )
    flat = js.flatten(js.load(text))
    assert [(c.upsert, c.expect_mod_revision) for c in flat] == sorted(
        specs, key=lambda s: s[0].name
    )


def test_hoist_of_one_journal_is_a_journal_root() -> None:
    spec = _spec("just/one", replication=1)
    assert js.dump(js.hoist([(spec, 3)])) == "name: just/one\nreplication: 1\nrevision: 3\n"


def test_hoist_rejects_duplicate_names() -> None:
    spec = _spec("dup/x", replication=1)
    with pytest.raises(ValueError, match="listed more than once"):
        js.hoist([(spec, 1), (spec, 2)])


def test_from_list_response() -> None:
    resp = pb.ListResponse(
        journals=[
            pb.ListResponse.Journal(spec=_spec("r/a", replication=2), mod_revision=4),
            pb.ListResponse.Journal(spec=_spec("r/b", replication=2), mod_revision=5),
        ]
    )
    assert js.dump(js.from_list_response(resp)) == (
        "name: r/\nreplication: 2\nchildren:\n- name: r/a\n  revision: 4\n"
        "- name: r/b\n  revision: 5\n"
    )
