"""Key layout, decoding and State extraction."""

from __future__ import annotations

import pytest

from gazette.allocator import allocator, errors, keys, routes, testing
from gazette.broker import protocol as pb

ROOT = "/root"


def test_key_layout_and_order() -> None:
    assert keys.member_key(ROOT, "us-east", "foo") == "/root/members/us-east#foo"
    assert keys.item_key(ROOT, "a/journal") == "/root/items/a/journal"
    a = keys.Assignment("a/journal", "us-east", "foo", 2)
    assert keys.assignment_key(ROOT, a) == "/root/assign/a/journal#us-east#foo#2"
    # '#' sorts below legal characters, so key order is (item, zone, suffix) order.
    k1 = keys.assignment_key(ROOT, keys.Assignment("a", "z", "s", 0))
    k2 = keys.assignment_key(ROOT, keys.Assignment("a-b", "a", "s", 0))
    assert k1 < k2
    with pytest.raises(ValueError, match=r"invalid char <= '#' \(ind 3 of 'bad one'\)"):
        keys.member_key(ROOT, "bad one", "x")


def test_decoding() -> None:
    decode = keys.key_value_decoder(ROOT, testing.JSONDecoder())
    assert decode("/root/items/foo", b'{"R": 3}') == keys.Item("foo", {"R": 3}, 3)
    m = decode("/root/members/zone#suf", b'{"R": 5, "E": true}')
    assert m == keys.Member("zone", "suf", {"R": 5, "E": True}, 5, True)
    a = decode("/root/assign/foo#zone#suf#1", b"consistent")
    assert a == keys.Assignment("foo", "zone", "suf", 1) and a.value == "consistent"
    for bad in ("/root/members/zone", "/root/assign/foo#zone#suf", "/root/other/x"):
        with pytest.raises(errors.DecodeError):
            decode(bad, b"{}")
    with pytest.raises(errors.DecodeError, match="invalid slot"):
        decode("/root/assign/foo#zone#suf#x", b"")


def test_state_extraction() -> None:
    s = testing.build_state(
        ROOT,
        keys.member_key(ROOT, "us-east", "bar"),
        members=[
            ("us-east", "bar", 3),
            ("us-east", "foo", 2),
            ("us-west", "baz", 0),
            ("us-west", "qux", 4),
        ],
        items=[("item-1", 2), ("item-2", 1), ("item-3", 3)],
        assignments=[
            ("item-1", "us-east", "bar", 0),
            ("item-1", "us-west", "qux", 1),
            ("item-2", "us-east", "foo", 0),
            ("item-3", "us-east", "bar", 1),
            ("item-3", "us-west", "gone", 0),
            ("item-9", "us-east", "bar", 0),  # no such item
        ],
    )
    assert s.zones == ["us-east", "us-west"]
    assert s.zone_slots == [5, 4]
    assert (s.member_slots, s.item_slots) == (9, 6)
    assert s.local_member_index == 0
    assert [li.item.decoded.id for li in s.local_items] == ["item-1", "item-3"]
    assert [li.assignment.slot for li in s.local_items] == [0, 1]
    assert s.member_total_count == [2, 1, 0, 1]
    assert s.member_primary_count == [1, 1, 0, 0]
    assert s.is_leader() and not s.should_exit()
    assert s.find_item("item-2") == 1 and s.find_item("nope") == -1
    # item-3 wants 3 and holds 1 live assignment (us-west/gone is no member): the
    # gazette_allocator_items_under_replicated the chart's alert reads.
    assert allocator.under_replicated(s) == 1


def test_shed_capacity_oldest_exiting_first() -> None:
    members = [("a", "m1", 10, True), ("a", "m2", 10, True), ("b", "m3", 10), ("b", "m4", 10, True)]
    s = testing.build_state(ROOT, "", members, [("i", 2), ("j", 3)])
    # 40 member slots, 5 item slots: 35 spare. At most 4 - 3 = 1 member sheds.
    assert s.shed_capacity == [10, 0, 0, 0]
    assert s.member_slots == 30
    s2 = testing.build_state(ROOT, "", members, [("i", 1)] * 1)
    assert s2.shed_capacity == [10, 10, 0, 10]  # 4 - 1 = 3 may shed; 39 spare
    hashes = {s.network_hash, s2.network_hash}
    assert len(hashes) == 2


def test_leader_is_oldest_member() -> None:
    s = testing.build_state(
        ROOT, keys.member_key(ROOT, "b", "x"), [("b", "x", 1), ("a", "y", 1)], []
    )
    # ("b","x") was created first (argument order = create revision).
    assert s.is_leader()
    s2 = testing.build_state(
        ROOT, keys.member_key(ROOT, "a", "y"), [("b", "x", 1), ("a", "y", 1)], []
    )
    assert not s2.is_leader()


def test_route_of_and_consistency() -> None:
    s = testing.build_state(
        ROOT,
        "",
        [("a", "m1", 1), ("b", "m2", 1)],
        [("j", 2)],
        [("j", "a", "m1", 1), ("j", "b", "m2", 0)],
    )
    asn = s.assignments_of(0)
    rt = routes.route_of(asn)
    assert [(m.zone, m.suffix) for m in rt.members] == [("a", "m1"), ("b", "m2")]
    assert rt.primary == 1
    # Endpoints come from the members' specs (their process_spec), "" once a member is gone.
    spec = pb.BrokerSpec()
    spec.process_spec.endpoint = "http://m1:8080"
    assert routes.member_endpoint(spec) == "http://m1:8080"
    assert routes.member_endpoint(None) == ""
    s = testing.build_state(ROOT, "", [("a", "m1", 1)], [("j", 1)], [("j", "a", "m1", 0)])
    rt.members.add(zone="c", suffix="gone")
    routes.attach_endpoints(rt, s, endpoint_of=lambda spec: "http://m1:8080")
    assert list(rt.endpoints) == ["http://m1:8080", "", ""]
