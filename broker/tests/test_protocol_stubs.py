"""The generated protocol stubs carry Gazette's names and field numbers."""

from gazette.broker.protocol import protocol_pb2
from gazette.consumer.protocol import protocol_pb2 as consumer_pb2


def test_nested_fragment_message_keeps_gazette_name() -> None:
    assert protocol_pb2.FragmentsResponse._Fragment.DESCRIPTOR.full_name == (
        "protocol.FragmentsResponse._Fragment"
    )


def test_status_numbers_follow_gazette() -> None:
    assert protocol_pb2.NOT_JOURNAL_BROKER == 5
    assert protocol_pb2.INSUFFICIENT_JOURNAL_BROKERS == 4
    assert consumer_pb2.ShardSpec.DESCRIPTOR.fields_by_name["labels"].number == 10


def test_sha1sum_fields_are_fixed_width() -> None:
    # part1/part2 are fixed64 and part3 fixed32: 9 + 9 + 5 bytes when all are set.
    s = protocol_pb2.SHA1Sum(part1=1, part2=2, part3=3)
    assert len(s.SerializeToString()) == 23
