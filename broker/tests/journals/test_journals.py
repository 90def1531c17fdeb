"""A broker keyspace: JournalDecoder and the journal consistency gate."""

from __future__ import annotations

import pytest

from gazette import allocator
from gazette.allocator import errors, keys, testing
from gazette.broker import journals
from gazette.broker import protocol as pb

ROOT = "/root"


def journal_spec(name: str, replication: int) -> pb.JournalSpec:
    spec = pb.JournalSpec(name=name, replication=replication)
    spec.fragment.length = 1 << 20
    spec.fragment.compression_codec = pb.NONE
    spec.fragment.refresh_interval.CopyFrom(pb.duration_from_seconds(60))
    pb.validate(spec)
    return spec


def broker_spec(zone: str, suffix: str, limit: int, exiting: bool = False) -> pb.BrokerSpec:
    spec = pb.BrokerSpec(journal_limit=limit, exiting=exiting)
    spec.process_spec.id.zone, spec.process_spec.id.suffix = zone, suffix
    spec.process_spec.endpoint = f"http://{suffix}:8080"
    pb.validate(spec)
    return spec


def test_journal_decoder() -> None:
    decode = allocator.key_value_decoder(ROOT, journals.JournalDecoder())
    spec = journal_spec("a/journal", 3)
    item = decode("/root/items/a/journal", spec.SerializeToString())
    assert isinstance(item, keys.Item) and item.desired_replication == 3
    # Suspension lowers the desired replication (pb.desired_replication).
    for level, replication in (
        (pb.JournalSpec.Suspend.PARTIAL, 1),
        (pb.JournalSpec.Suspend.FULL, 0),
    ):
        spec.suspend.level = level
        item = decode("/root/items/a/journal", spec.SerializeToString())
        assert isinstance(item, keys.Item) and item.desired_replication == replication
    with pytest.raises(errors.DecodeError, match="doesn't match Item ID"):
        decode("/root/items/other", spec.SerializeToString())
    # Every value is validated with pb.validate.
    spec.replication = 0
    with pytest.raises(pb.ValidationError, match="invalid Replication"):
        decode("/root/items/a/journal", spec.SerializeToString())

    bs = broker_spec("z", "broker-1", 7, exiting=True)
    m = decode("/root/members/z#broker-1", bs.SerializeToString())
    assert isinstance(m, keys.Member) and (m.item_limit, m.exiting) == (7, True)
    with pytest.raises(errors.DecodeError, match="Suffix"):
        decode("/root/members/z#broker-2", bs.SerializeToString())
    with pytest.raises(errors.DecodeError, match="Zone"):
        decode("/root/members/y#broker-1", bs.SerializeToString())
    bs.process_spec.endpoint = "not a url"
    with pytest.raises(pb.ValidationError, match="Endpoint"):
        decode("/root/members/z#broker-1", bs.SerializeToString())

    empty = decode("/root/assign/a/journal#z#broker-1#0", b"")
    assert isinstance(empty, keys.Assignment) and empty.value == pb.Route(primary=-1)
    rt = pb.Route(primary=5)
    rt.members.add(zone="z", suffix="broker-1")
    with pytest.raises(pb.ValidationError, match="Primary"):
        decode("/root/assign/a/journal#z#broker-1#0", rt.SerializeToString())


def _state_with_values(values: dict[str, pb.Route]) -> allocator.State:
    """Journal j assigned to a#m1 (slot 1) and b#m2 (primary), with Route values."""
    s = testing.build_state(
        ROOT,
        "",
        [("a", "m1", 1), ("b", "m2", 1)],
        [("j", 2)],
        [("j", "a", "m1", 1), ("j", "b", "m2", 0)],
    )
    entries = []
    for kv in [*s.members, *s.items, *s.assignments]:
        a = kv.decoded
        if isinstance(a, keys.Assignment):
            value = values.get(a.member_suffix, pb.Route(primary=-1))
            kv = testing.FakeKeyValue(
                kv.key,
                decoded=keys.Assignment(
                    *(a.item_id, a.member_zone, a.member_suffix), a.slot, value
                ),
            )
        entries.append(kv)
    entries.sort(key=lambda kv: kv.key)
    return allocator.State(ROOT, "", entries, journals.journal_is_consistent)


def test_consistency_gate() -> None:
    full = pb.Route(primary=1)
    full.members.add(zone="a", suffix="m1")
    full.members.add(zone="b", suffix="m2")
    s = _state_with_values({"m1": full, "m2": full})
    asn = s.assignments_of(0)
    assert allocator.route_of(asn) == full
    assert journals.assignments_consistent(asn)
    assert journals.journal_is_consistent(s.item(0), asn[0], asn)

    # m1 hasn't been told the Route yet (an empty value): not consistent.
    s = _state_with_values({"m2": full})
    asn = s.assignments_of(0)
    assert not journals.journal_is_consistent(s.item(0), asn[0], asn)

    # Values of the toy decoder aren't Routes at all.
    toy = testing.build_state(ROOT, "", [("a", "m1", 1)], [("j", 1)], [("j", "a", "m1", 0)])
    asn = toy.assignments_of(0)
    assert not journals.assignments_consistent(asn)
