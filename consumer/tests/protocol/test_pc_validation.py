"""Consumer protocol: ShardSpec rules (consumer.md §2.4), request validation (§2.6), helpers."""

from collections.abc import Callable

import pytest

from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.consumer.protocol import protocol_pb2
from gazette.consumer.recoverylog import recorded_op_pb2 as rl


def _err(msg) -> str:
    with pytest.raises(pb.ValidationError) as info:
        pc.validate(msg)
    return str(info.value)


def _spec() -> pc.ShardSpec:
    spec = pc.ShardSpec(
        id="a-shard-id",
        recovery_log_prefix="recovery/logs",
        hint_prefix="/hints/prefix",
        hint_backups=2,
        max_txn_duration=pb.duration_from_seconds(1),
        min_txn_duration=pb.duration_from_seconds(0.1),
        hot_standbys=1,
        labels=pb.label_set([("aaa", "bbb"), (pb.LABEL_TAG, "x"), (pb.LABEL_TAG, "y")]),
    )
    spec.sources.add(journal="journal/1", min_offset=10)
    spec.sources.add(journal="journal/2")
    return spec


def _run(build: Callable[[], object], cases) -> None:
    pc.validate(build())  # type: ignore[arg-type]
    for mutate, expect in cases:
        msg = build()
        mutate(msg)
        if expect is None:
            pc.validate(msg)  # type: ignore[arg-type]
        else:
            assert _err(msg) == expect, expect


def _dur(field: str, seconds: float):
    return lambda s: getattr(s, field).CopyFrom(pb.duration_from_seconds(seconds))


# Each §2.4 rule in validation order, with its failing input and message.
SHARD_SPEC_CASES = [
    (lambda s: setattr(s, "id", "ab"), "Id: invalid length (2; expected 4 <= length <= 512)"),
    (
        lambda s: setattr(s, "id", "x" * 513),
        "Id: invalid length (513; expected 4 <= length <= 512)",
    ),
    (lambda s: setattr(s, "id", "bad id"), "Id: not a valid token (bad id)"),
    (lambda s: setattr(s, "id", "bad=id"), "Id: not a valid token (bad=id)"),
    (
        lambda s: setattr(s, "recovery_log_prefix", "bad prefix"),
        "RecoveryLogPrefix: not a valid token (bad prefix/a-shard-id)",
    ),
    (
        lambda s: setattr(s, "recovery_log_prefix", "/rooted"),
        "RecoveryLogPrefix: cannot begin with '/' (/rooted/a-shard-id)",
    ),
    (
        lambda s: setattr(s, "recovery_log_prefix", "trailing/"),
        "RecoveryLogPrefix: must be a clean path (trailing//a-shard-id)",
    ),
    (
        lambda s: setattr(s, "recovery_log_prefix", ""),
        "invalid non-empty HintPrefix with empty RecoveryLogPrefix (/hints/prefix)",
    ),
    (lambda s: (setattr(s, "recovery_log_prefix", ""), setattr(s, "hint_prefix", "")), None),
    (
        lambda s: setattr(s, "hint_prefix", ""),
        "HintPrefix is not an absolute, clean, non-directory path ()",
    ),
    (
        lambda s: setattr(s, "hint_prefix", "relative/path"),
        "HintPrefix is not an absolute, clean, non-directory path (relative/path)",
    ),
    (
        lambda s: setattr(s, "hint_prefix", "/rooted/dir/"),
        "HintPrefix is not an absolute, clean, non-directory path (/rooted/dir/)",
    ),
    (
        lambda s: setattr(s, "hint_prefix", "/rooted//path"),
        "HintPrefix is not an absolute, clean, non-directory path (/rooted//path)",
    ),
    (lambda s: setattr(s, "hint_backups", -1), "invalid HintBackups (-1; expected >= 0)"),
    (lambda s: setattr(s, "hint_backups", 0), None),
    (_dur("min_txn_duration", -1), "invalid MinTxnDuration (-1000000000; expected >= 0)"),
    (_dur("min_txn_duration", 0), None),
    (_dur("max_txn_duration", 0), "invalid MaxTxnDuration (0; expected > 0)"),
    (_dur("max_txn_duration", -0.5), "invalid MaxTxnDuration (-500000000; expected > 0)"),
    (
        lambda s: s.labels.labels.add(name="b b"),
        "LabelSet.Labels[3].Name: not a valid token (b b)",
    ),
    (
        lambda s: s.labels.CopyFrom(pb.label_set([(pb.LABEL_REGION, "a"), (pb.LABEL_REGION, "b")])),
        "LabelSet: expected single-value Label has multiple values (index 1; label app.gazette.dev/region value b)",
    ),
    (lambda s: s.labels.CopyFrom(pb.label_set([("id", "x")])), 'Labels cannot include label "id"'),
    (lambda s: s.labels.CopyFrom(pb.label_set([("id", "")])), 'Labels cannot include label "id"'),
    (
        lambda s: setattr(s.sources[1], "journal", "journal 2"),
        "Sources[1].Journal: not a valid token (journal 2)",
    ),
    (
        lambda s: setattr(s.sources[0], "min_offset", -1),
        "Sources[0]: invalid MinOffset (-1; expected > 0)",
    ),
    (
        lambda s: setattr(s.sources[0], "journal", "journal/3"),
        "Sources.Journal not in unique, sorted order (index 1; journal/2 <= journal/3)",
    ),
    (
        lambda s: setattr(s.sources[1], "journal", "journal/1"),
        "Sources.Journal not in unique, sorted order (index 1; journal/1 <= journal/1)",
    ),
    (lambda s: setattr(s.sources[1], "journal", "journal/2;meta"), None),
]


@pytest.mark.parametrize(
    ("mutate", "expect"), SHARD_SPEC_CASES, ids=[str(c[1])[:60] for c in SHARD_SPEC_CASES]
)
def test_shard_spec(mutate, expect: str | None) -> None:
    _run(_spec, [(mutate, expect)])


def test_shard_spec_first_failure_wins() -> None:
    spec = _spec()
    spec.id = "x"
    spec.hint_backups = -1
    assert _err(spec) == "Id: invalid length (1; expected 4 <= length <= 512)"


def test_shard_source_alone() -> None:
    pc.validate(pc.ShardSpec.Source(journal="a/journal", min_offset=0))
    assert (
        _err(pc.ShardSpec.Source(journal="x", min_offset=0))
        == "Journal: invalid length (1; expected 4 <= length <= 512)"
    )


def test_derived_values() -> None:
    spec = _spec()
    assert pc.recovery_log(spec) == "recovery/logs/a-shard-id"
    assert pc.hint_primary_key(spec) == "/hints/prefix/a-shard-id.primary"
    assert pc.hint_backup_keys(spec) == [
        "/hints/prefix/a-shard-id.backup.0",
        "/hints/prefix/a-shard-id.backup.1",
    ]
    spec.recovery_log_prefix = ""
    assert pc.recovery_log(spec) == ""
    spec.hint_backups = 0
    assert pc.hint_backup_keys(spec) == []

    assert pc.desired_replication(spec) == 2
    spec.hot_standbys = 10
    assert pc.desired_replication(spec) == 4
    assert pc.desired_replication(spec, max_hot_standbys=20) == 11
    spec.disable = True
    assert pc.desired_replication(spec) == 0

    ext = pc.label_set_ext(_spec())
    assert [(lb.name, lb.value) for lb in ext.labels] == [
        ("aaa", "bbb"),
        (pb.LABEL_TAG, "x"),
        (pb.LABEL_TAG, "y"),
        ("id", "a-shard-id"),
    ]


def test_consumer_spec() -> None:
    spec = pc.ConsumerSpec(
        process_spec=pb.ProcessSpec(
            id=pb.ProcessSpec.ID(zone="zone", suffix="member-1"), endpoint="http://host:1"
        ),
        shard_limit=100,
    )
    pc.validate(spec)
    spec.process_spec.id.zone = "bad zone"
    assert _err(spec) == "Id.Zone: not a valid token (bad zone)"
    spec.process_spec.id.zone = "zone"
    spec.process_spec.endpoint = "nope"
    assert _err(spec) == "Endpoint: not absolute: nope"


def test_replica_status() -> None:
    Code = pc.ReplicaStatus.Code
    for code in (Code.IDLE, Code.BACKFILL, Code.STANDBY, Code.PRIMARY):
        pc.validate(pc.ReplicaStatus(code=code))
    pc.validate(pc.ReplicaStatus(code=Code.FAILED, errors=["boom"]))
    assert _err(pc.ReplicaStatus(code=150)) == "Code: invalid code (150)"
    assert _err(pc.ReplicaStatus(code=Code.FAILED)) == "expected non-empty Errors with Code FAILED"
    assert (
        _err(pc.ReplicaStatus(code=Code.PRIMARY, errors=["x"]))
        == "expected Code FAILED with non-empty Errors"
    )


def _header() -> pb.Header:
    return pb.Header(
        process_id=pb.ProcessSpec.ID(zone="zone", suffix="member-1"),
        route=pb.Route(primary=-1),
        etcd=pb.Header.Etcd(cluster_id=1, member_id=2, revision=3, raft_term=4),
    )


def _hints() -> rl.FSMHints:
    hints = rl.FSMHints(log="recovery/logs/a-shard-id")
    node = hints.live_nodes.add(fnode=1)
    node.segments.add(author=1234, first_seq_no=1, last_seq_no=4)
    return hints


def test_stat_request_and_response() -> None:
    _run(
        lambda: pc.StatRequest(
            header=_header(), shard="a-shard-id", read_through={"a/journal": 10}
        ),
        [
            (lambda m: m.ClearField("header"), None),
            (
                lambda m: setattr(m.header.etcd, "revision", 0),
                "Header.Etcd: invalid Revision (0; expected 0 < revision)",
            ),
            (
                lambda m: setattr(m, "shard", "x"),
                "Shard: invalid length (1; expected 4 <= length <= 512)",
            ),
            (
                lambda m: m.read_through.__setitem__("a/journal", -1),
                "ReadThrough.Offsets[a/journal]: invalid offset (-1; expected >= 0)",
            ),
            (
                lambda m: m.read_through.__setitem__("bad journal", 1),
                "ReadThrough.Offsets[bad journal]: not a valid token (bad journal)",
            ),
        ],
    )
    _run(
        lambda: pc.StatResponse(
            status=pc.OK,
            header=_header(),
            read_through={"a/journal": 1},
            publish_at={"b/journal": 2},
        ),
        [
            (lambda m: setattr(m, "status", 9), "Status: invalid status (9)"),
            (
                lambda m: m.ClearField("header"),
                "Header.Route: invalid Primary (0; expected -1 <= Primary < 0)",
            ),
            (
                lambda m: m.read_through.__setitem__("a/journal", -1),
                "ReadThrough.Offsets[a/journal]: invalid offset (-1; expected >= 0)",
            ),
            (
                lambda m: m.publish_at.__setitem__("b/journal", -2),
                "PublishAt.Offsets[b/journal]: invalid offset (-2; expected >= 0)",
            ),
        ],
    )


def test_list_request_and_response() -> None:
    pc.validate(pc.ListRequest(selector=pb.parse_selector("id:prefix=shard/, app=x")))
    req = pc.ListRequest(selector=pb.parse_selector("app=x"))
    req.selector.include.labels.add(name="b b")
    assert _err(req) == "Selector.Include.Labels[1].Name: not a valid token (b b)"

    def build() -> pc.ListResponse:
        resp = pc.ListResponse(status=pc.OK, header=_header())
        shard = resp.shards.add(spec=_spec(), mod_revision=3, create_revision=2)
        shard.route.CopyFrom(
            pb.Route(primary=0, members=[pb.ProcessSpec.ID(zone="zone", suffix="member-1")])
        )
        shard.status.add(code=pc.ReplicaStatus.PRIMARY)
        return resp

    _run(
        build,
        [
            (lambda m: setattr(m, "status", 42), "Status: invalid status (42)"),
            (
                lambda m: setattr(m.header.etcd, "cluster_id", 0),
                "Header.Etcd: invalid ClusterId (expected != 0)",
            ),
            (
                lambda m: setattr(m.shards[0].spec, "id", "x"),
                "Shards[0].Spec.Id: invalid length (1; expected 4 <= length <= 512)",
            ),
            (
                lambda m: setattr(m.shards[0], "mod_revision", 0),
                "Shards[0]: invalid ModRevision (0; expected > 0)",
            ),
            (
                lambda m: setattr(m.shards[0].route, "primary", 1),
                "Shards[0].Route: invalid Primary (1; expected -1 <= Primary < 1)",
            ),
            (
                lambda m: m.shards[0].status.add(),
                "Shards[0]: length of Route.Members and Status are not equal (1 vs 2)",
            ),
            (
                lambda m: setattr(m.shards[0].status[0], "code", pc.ReplicaStatus.FAILED),
                "Shards[0].Status[0]: expected non-empty Errors with Code FAILED",
            ),
        ],
    )


def test_apply_request() -> None:
    def build() -> pc.ApplyRequest:
        req = pc.ApplyRequest()
        req.changes.add(upsert=_spec(), expect_mod_revision=0, primary_hints=_hints())
        req.changes.add(delete="other-shard", expect_mod_revision=-1)
        return req

    _run(
        build,
        [
            (lambda m: m.changes[0].ClearField("primary_hints"), None),
            (lambda m: setattr(m.changes[0], "expect_mod_revision", -1), None),
            (
                lambda m: setattr(m.changes[0], "delete", "a-shard-id"),
                "Changes[0]: both Upsert and Delete are set (expected exactly one)",
            ),
            (
                lambda m: setattr(m.changes[0].upsert, "id", "x"),
                "Changes[0].Upsert.Id: invalid length (1; expected 4 <= length <= 512)",
            ),
            (
                lambda m: setattr(m.changes[0], "expect_mod_revision", -2),
                "Changes[0]: invalid ExpectModRevision (-2; expected >= 0 or -1)",
            ),
            (
                lambda m: setattr(
                    m.changes[0].primary_hints.live_nodes[0].segments[0], "author", 0
                ),
                "Changes[0].PrimaryHints.Segment: Author is zero",
            ),
            (
                lambda m: setattr(m.changes[1], "delete", "x"),
                "Changes[1].Delete: invalid length (1; expected 4 <= length <= 512)",
            ),
            (
                lambda m: setattr(m.changes[1], "expect_mod_revision", 0),
                "Changes[1]: invalid ExpectModRevision (0; expected > 0 or -1)",
            ),
            (lambda m: setattr(m.changes[1], "expect_mod_revision", 3), None),
            (
                lambda m: m.changes[1].primary_hints.CopyFrom(_hints()),
                "Changes[1]: hints may be set only with an upsert, not a delete",
            ),
            (
                lambda m: m.changes.add(),
                "Changes[2]: neither Upsert nor Delete are set (expected exactly one)",
            ),
        ],
    )


def test_other_messages() -> None:
    pc.validate(pc.ApplyResponse(status=pc.ETCD_TRANSACTION_FAILED, header=_header()))
    assert _err(pc.ApplyResponse(status=12, header=_header())) == "Status: invalid status (12)"

    pc.validate(pc.GetHintsRequest(shard="a-shard-id"))
    assert _err(pc.GetHintsRequest(shard="a b c d")) == "Shard: not a valid token (a b c d)"

    resp = pc.GetHintsResponse(status=pc.OK, header=_header())
    resp.primary_hints.hints.CopyFrom(_hints())
    resp.backup_hints.add()  # No hints stored at that key.
    resp.backup_hints.add(hints=_hints())
    pc.validate(resp)
    resp.primary_hints.hints.live_nodes[0].segments[0].first_seq_no = 0
    assert _err(resp) == "primary hints.Segment: FirstSeqNo <= 0"
    resp.primary_hints.ClearField("hints")
    resp.backup_hints[1].hints.live_nodes[0].segments[0].log = resp.backup_hints[1].hints.log
    assert _err(resp) == "backup hints: contained segment.Log duplicates FSMHints.Log"
    assert _err(pc.GetHintsResponse(status=77)) == "Status: invalid status (77)"

    pc.validate(pc.UnassignRequest(shards=["shard-one", "shard-two"]))
    assert (
        _err(pc.UnassignRequest(shards=["shard-one", "x"]))
        == "Shards[1]: invalid length (1; expected 4 <= length <= 512)"
    )
    pc.validate(pc.UnassignResponse(status=pc.OK, shards=["shard-one"]))
    assert _err(pc.UnassignResponse(status=pc.SHARD_NOT_FOUND)) == "bad status: SHARD_NOT_FOUND"
    assert _err(pc.UnassignResponse(status=99)) == "Status: invalid status (99)"

    # Broker messages pass through to pb.validate.
    assert _err(pb.Label(name="x")) == "Name: invalid length (1; expected 2 <= length <= 64)"
    with pytest.raises(TypeError):
        pc.validate(pc.Checkpoint())


def test_every_message_and_enum_is_exported() -> None:
    desc = protocol_pb2.DESCRIPTOR
    for name in list(desc.message_types_by_name) + list(desc.enum_types_by_name):
        assert name in pc.__all__ and getattr(pc, name) is getattr(protocol_pb2, name)
    for value in desc.enum_types_by_name["Status"].values:
        assert getattr(pc, value.name) == value.number
    for name in pc.__all__:
        assert hasattr(pc, name), name
