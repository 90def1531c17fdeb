from __future__ import annotations

import pytest
from google.protobuf import duration_pb2
from operator_objects import JOURNAL_SPEC, SHARD_SPEC

from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.operator import errors, mapping


def expected_journal() -> pb.JournalSpec:
    return pb.JournalSpec(
        name="examples/logs/one",
        replication=3,
        labels=pb.LabelSet(
            labels=[
                pb.Label(name="content-type", value="application/x-ndjson"),
                pb.Label(name="topic", value="logs"),
            ]
        ),
        fragment=pb.JournalSpec.Fragment(
            length=536870912,
            compression_codec=pb.SNAPPY,
            stores=["s3://a-bucket/prefix/", "file:///mnt/fragments/"],
            refresh_interval=duration_pb2.Duration(seconds=30),
            retention=duration_pb2.Duration(seconds=720 * 3600),
            flush_interval=duration_pb2.Duration(seconds=3600),
            path_postfix_template='date={{.Spool.FirstAppendTime.Format "2006-01-02"}}',
        ),
        flags=4,
        max_append_rate=1048576,
    )


def test_journal_spec_maps_every_field_and_sorts_labels() -> None:
    spec = mapping.journal_spec(JOURNAL_SPEC)
    assert spec == expected_journal()
    pb.validate(spec)


def test_journal_round_trip() -> None:
    fields = mapping.journal_fields(expected_journal())
    assert mapping.journal_spec(fields) == expected_journal()
    assert fields["fragment"]["retention"] == "720h0m0s"
    assert fields["flags"] == "O_RDWR"
    assert fields["labels"][0] == {"name": "content-type", "value": "application/x-ndjson"}


def test_shard_spec_maps_every_field_and_sorts_sources() -> None:
    spec = mapping.shard_spec(SHARD_SPEC)
    assert spec == pc.ShardSpec(
        id="word-count/part-000",
        sources=[
            pc.ShardSpec.Source(journal="examples/words/part-000"),
            pc.ShardSpec.Source(journal="examples/words/part-001", min_offset=1024),
        ],
        recovery_log_prefix="recovery/word-count",
        hint_prefix="/gazette/hints/word-count",
        hint_backups=2,
        max_txn_duration=duration_pb2.Duration(seconds=1),
        min_txn_duration=duration_pb2.Duration(nanos=10_000_000),
        hot_standbys=1,
        labels=pb.LabelSet(labels=[pb.Label(name="app", value="word-count")]),
        ring_buffer_size=4096,
    )
    pc.validate(spec)
    assert mapping.shard_spec(mapping.shard_fields(spec)) == spec


def test_zero_values_are_left_out() -> None:
    spec = pb.JournalSpec(
        name="a/b/c/d",
        replication=1,
        fragment=pb.JournalSpec.Fragment(
            length=1024,
            compression_codec=pb.NONE,
            refresh_interval=duration_pb2.Duration(seconds=1),
        ),
    )
    assert mapping.journal_fields(spec) == {
        "name": "a/b/c/d",
        "replication": 1,
        "fragment": {"length": 1024, "compressionCodec": "NONE", "refreshInterval": "1s"},
    }


@pytest.mark.parametrize(
    ("patch", "field", "text"),
    [
        ({"replication": "3"}, "spec.replication", "expected an integer, not str"),
        ({"replication": True}, "spec.replication", "expected an integer, not bool"),
        ({"flags": "O_APPEND"}, "spec.flags", "unknown value 'O_APPEND'"),
        ({"bogus": 1}, "spec", "unknown field(s) 'bogus'"),
        ({"labels": [{"name": "a", "colour": "b"}]}, "spec.labels[0]", "unknown field(s)"),
        (
            {"fragment": {"length": 1024, "refreshInterval": "1 day"}},
            "spec.fragment.refreshInterval",
            'unknown unit " day"',
        ),
        (
            {"fragment": {"compressionCodec": "LZ4"}},
            "spec.fragment.compressionCodec",
            "unknown value 'LZ4'",
        ),
        ({"fragment": []}, "spec.fragment", "expected an object, not list"),
    ],
)
def test_malformed_journal_fields_name_the_field(
    patch: dict[str, object], field: str, text: str
) -> None:
    with pytest.raises(errors.InvalidSpecError) as info:
        mapping.journal_spec({**JOURNAL_SPEC, **patch})
    assert info.value.field == field
    assert text in str(info.value)


def test_deletion_policy_is_not_part_of_the_spec() -> None:
    spec = mapping.journal_spec({**JOURNAL_SPEC, "deletionPolicy": "Delete"})
    assert spec == expected_journal()
