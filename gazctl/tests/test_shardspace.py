"""The shard YAML: decoding, hoisting, pushing down, encoding and flattening to an ApplyRequest.

Fixtures are Gazette's (``consumer/shardspace/shardspace_test.go``), so the text
we write is the text Go's ``gazctl shards list -o yaml`` writes.
"""

from __future__ import annotations

import pytest

from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.gazctl import shardspace as ss

GO_FIXTURE = """\
common:
  recovery_log_prefix: recovery/logs
  hint_prefix: /hints
  hint_backups: 2
  max_txn_duration: 1s
  min_txn_duration: 1ms
  hot_standbys: 1
  labels:
  - name: name-1
    value: val-1
  disable_wait_for_ack: true
shards:
- comment: This is a comment
  delete: true
  id: shard-A
  sources:
  - journal: journal/A
  labels:
  - name: name-2
    value: val-2
  revision: 123
- id: shard-B
  sources:
  - journal: journal/B
  disable: true
  labels:
  - name: name-3
    value: val-3
  revision: 456
"""


def _spec(
    shard_id: str, journal: str, *labels: tuple[str, str], disable: bool = False
) -> pc.ShardSpec:
    spec = pc.ShardSpec(
        id=shard_id,
        recovery_log_prefix="recovery/logs",
        hint_prefix="/hints",
        hint_backups=2,
        hot_standbys=1,
        disable=disable,
        disable_wait_for_ack=True,
    )
    spec.sources.add(journal=journal)
    spec.max_txn_duration.CopyFrom(pb.duration_from_seconds(1))
    spec.min_txn_duration.CopyFrom(pb.duration_from_nanos(1_000_000))
    spec.labels.CopyFrom(pb.label_set(list(labels)))
    return spec


def flat_fixture() -> ss.Set:
    return ss.Set(
        shards=[
            ss.Shard(
                spec=_spec("shard-A", "journal/A", ("name-1", "val-1"), ("name-2", "val-2")),
                comment="This is a comment",
                delete=True,
                revision=123,
            ),
            ss.Shard(
                spec=_spec(
                    "shard-B", "journal/B", ("name-1", "val-1"), ("name-3", "val-3"), disable=True
                ),
                revision=456,
            ),
        ]
    )


def test_hoist_lifts_shared_values_and_push_down_restores_them() -> None:
    hoisted = ss.hoist(flat_fixture())
    common = _spec("", "unused", ("name-1", "val-1"))
    del common.sources[:]
    assert hoisted.common == common
    a, b = hoisted.shards
    assert a.spec == pc.ShardSpec(
        id="shard-A",
        sources=[pc.ShardSpec.Source(journal="journal/A")],
        labels=pb.label_set([("name-2", "val-2")]),
        max_txn_duration=pb.duration_from_nanos(0),
        min_txn_duration=pb.duration_from_nanos(0),
    )
    assert (a.comment, a.delete, a.revision) == ("This is a comment", True, 123)
    assert b.spec.disable and b.revision == 456 and not b.spec.recovery_log_prefix
    assert ss.push_down(hoisted) == flat_fixture()


def test_yaml_round_trip_of_gazettes_fixture() -> None:
    loaded = ss.load(GO_FIXTURE)
    assert ss.push_down(loaded) == flat_fixture()
    assert ss.dump(ss.hoist(ss.push_down(loaded))) == GO_FIXTURE
    assert ss.dump(loaded) == GO_FIXTURE


def test_list_response_round_trips_through_yaml_to_the_same_changes() -> None:
    resp = pc.ListResponse()
    odd = _spec("shard/odd+1", "journal/odd", ("flag", "true"), ("num", "123"), ("empty", ""))
    odd.sources[0].min_offset = 1 << 40
    odd.ring_buffer_size = 2048
    odd.read_channel_size = 7
    odd.hint_backups = 0
    for spec, rev in [
        (odd, 11),
        (_spec("shard-B", "journal/B"), 12),
        (_spec("shard-C", "journal/B"), 13),
    ]:
        resp.shards.add(spec=spec, mod_revision=rev)
    text = ss.dump(ss.from_list_response(resp))
    # Strings that would read as other types are quoted, as Go's encoder quotes them.
    assert 'value: "true"' in text and 'value: "123"' in text and 'value: ""' in text
    assert "min_offset: 1099511627776" in text and "hint_backups: 2" in text
    req = ss.apply_request(ss.load(text))
    assert [(c.upsert, c.expect_mod_revision) for c in req.changes] == [
        (s.spec, s.mod_revision) for s in resp.shards
    ]
    assert ss.dump(ss.load(text)) == text


def test_changes_have_gos_message_shape() -> None:
    doc = "shards:\n- id: shard-A\n  max_txn_duration: 1s\n"
    (change,) = ss.apply_request(ss.load(doc)).changes
    # Always-encoded (non-nullable) fields in Go are present, even when zero, so the
    # bytes in etcd are those Go writes.
    for field in ("labels", "max_txn_duration", "min_txn_duration"):
        assert change.upsert.HasField(field)  # type: ignore[arg-type]
    assert change.expect_mod_revision == 0


def test_empty_documents() -> None:
    assert ss.dump(ss.Set()) == "common: {}\nshards: []\n"
    assert ss.load("common: {}\nshards: []\n") == ss.Set()
    assert ss.load("") == ss.Set()
    assert list(ss.apply_request(ss.load("")).changes) == []


def test_one_shard_hoists_everything_but_its_id() -> None:
    one = ss.hoist(ss.Set(shards=[ss.Shard(spec=_spec("shard-A", "journal/A"))]))
    assert one.shards[0].spec.id == "shard-A"
    assert ss.dump(one).endswith("shards:\n- id: shard-A\n")


def test_union_intersect_subtract() -> None:
    a = pc.ShardSpec(id="a", hint_prefix="/h", hot_standbys=1, labels=pb.label_set(x="1", y="a"))
    b = pc.ShardSpec(hint_prefix="/other", hint_backups=3, labels=pb.label_set(x="2", z="b"))
    b.sources.add(journal="j")
    u = ss.union_specs(a, b)
    assert (u.id, u.hint_prefix, u.hint_backups, [s.journal for s in u.sources]) == (
        "a",
        "/h",
        3,
        ["j"],
    )
    assert u.labels == pb.label_set(x="1", y="a", z="b")  # a's value of x wins.
    i = ss.intersect_specs(u, a)
    assert (i.hint_prefix, i.hint_backups, i.hot_standbys, list(i.sources)) == ("/h", 0, 1, [])
    assert i.labels == pb.label_set(x="1", y="a")
    d = ss.subtract_specs(u, a)
    assert (d.hint_prefix, d.hint_backups, d.hot_standbys) == ("", 3, 0)
    assert d.labels == pb.label_set(z="b")


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ("shards: [", "not valid YAML"),
        (
            "shard: []\n",
            "shard: unknown key 'shard' (expected one of common, shards) (line 1, column 1)",
        ),
        ("common:\n  id: x\n", "common: id: unknown key 'id'"),
        (
            "shards:\n- id: a-shard\n  hot_standby: 1\n",
            "shards[0] (a-shard): hot_standby: unknown key",
        ),
        ("shards:\n- id: a-shard\n  id: again\n", "id: key is repeated (line 3, column 3)"),
        (
            "shards:\n- hot_standbys: -1\n",
            "shards[0]: hot_standbys: -1 is out of range (expected 0 to 4294967295)",
        ),
        ("shards:\n- hint_backups: many\n", "hint_backups: expected an integer, not a string"),
        (
            "shards:\n- max_txn_duration: 10\n",
            "max_txn_duration: expected a duration such as 1m30s",
        ),
        ("shards:\n- min_txn_duration: 1y\n", "min_txn_duration: not a duration ('1y')"),
        ("shards:\n- disable: maybe\n", "disable: expected true or false, not a string"),
        ("shards:\n- sources: journal/A\n", "sources: expected a list, not a string"),
        ("shards:\n- sources:\n  - name: journal/A\n", "sources[0].name: unknown key 'name'"),
        (
            "shards:\n- labels:\n  - name: bb\n    value: '1'\n  - name: aa\n    value: '2'\n",
            "shards[0]: labels: Labels not in unique, sorted order",
        ),
        (
            "shards:\n- labels:\n  - name: b\n    value: '1'\n",
            "shards[0]: labels[0].name: invalid length (1; expected 2 <= length <= 64) (line 3",
        ),
    ],
)
def test_decode_errors_name_the_shard_field_and_line(doc: str, error: str) -> None:
    with pytest.raises(ss.DecodeError) as info:
        ss.load(doc)
    assert error in str(info.value)


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        (
            "shards:\n- id: shard-A\n",
            "shard-A: max_txn_duration: invalid MaxTxnDuration (0; expected > 0)",
        ),
        ("shards:\n- id: x\n  max_txn_duration: 1s\n", "x: id: "),
        (
            "common:\n  max_txn_duration: 1s\nshards:\n- id: shard-A\n  sources:\n  - journal: bad journal\n",
            "shard-A: sources[0].journal: ",
        ),
        (
            "common:\n  max_txn_duration: 1s\nshards:\n- id: shard-A\n  hint_prefix: /h\n",
            "shard-A: hint_prefix: invalid non-empty HintPrefix with empty RecoveryLogPrefix",
        ),
        (
            "common:\n  max_txn_duration: 1s\n  recovery_log_prefix: logs\n  hint_prefix: rel/path\n"
            "shards:\n- id: shard-A\n",
            "shard-A: hint_prefix: HintPrefix is not an absolute, clean, non-directory path",
        ),
        (
            "common:\n  max_txn_duration: 1s\nshards:\n- id: shard-A\n  labels:\n  - name: id\n    value: x\n",
            'shard-A: labels: Labels cannot include label "id"',
        ),
        (
            "shards:\n- id: shard-A\n  delete: true\n",
            "shard-A: revision: invalid ExpectModRevision (0; expected > 0 or -1)",
        ),
        (
            "common:\n  max_txn_duration: 1s\nshards:\n- id: shard-A\n- id: shard-A\n",
            "shard-A: id: shard is listed more than once (shards[0] and shards[1])",
        ),
    ],
)
def test_spec_errors_name_the_shard_and_yaml_field(doc: str, error: str) -> None:
    with pytest.raises(ss.SpecError) as info:
        ss.apply_request(ss.load(doc))
    assert error in str(info.value)
    assert isinstance(info.value.error, pb.ValidationError)


def test_deletes_need_no_spec_values() -> None:
    (change,) = ss.apply_request(
        ss.load("shards:\n- delete: true\n  id: shard-A\n  revision: -1\n")
    ).changes
    assert change.delete == "shard-A" and change.expect_mod_revision == -1
    assert not change.HasField("upsert")
