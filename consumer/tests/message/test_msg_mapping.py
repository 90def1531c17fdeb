"""Mappings and FNV-1a (Gazette message/routines_test.go regression fixtures)."""

from __future__ import annotations

import pytest
from msg_helpers import TMsg

from gazette import message
from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.message import errors


def listing(count: int) -> pb.ListResponse:
    resp = pb.ListResponse()
    for i in range(count):
        j = resp.journals.add()
        j.spec.name = f"a/topic/part-{i:03d}"
        j.spec.labels.CopyFrom(pb.label_set([(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]))
    return resp


def key(m: TMsg) -> bytes:
    return m.s.encode()


@pytest.mark.parametrize(
    ("data", "expect"),
    [
        (b"", 0x811C9DC5),
        (b"a", 0xE40C292C),
        (b"foobar", 0xBF9CF968),
        (b"hello world", 0xD58B3FA7),
    ],
)
def test_fnv1a32_vectors(data: bytes, expect: int) -> None:
    assert message.fnv1a32(data) == expect


QUOTES = [
    "It always",
    "seems",
    "impossible",
    "until",
    "it is done.",
    "- Nelson Mandela",
    "Shall I compare",
    "thee to",
    "a summer's day?",
    "Thou art more",
    "lovely and more",
    "temperate - Shakespeare",
]


def test_modulo_mapping_regression_fixtures() -> None:
    parts = listing(443)  # A prime.
    mapping = message.ModuloMapping(key, lambda: parts)
    expect = [119, 54, 308, 97, 179, 437, 84, 300, 214, 135, 118, 228]
    for quote, part in zip(QUOTES, expect, strict=True):
        assert mapping(TMsg(s=quote)) == (f"a/topic/part-{part:03d}", "application/x-ndjson")


@pytest.mark.parametrize("count", [400, 500])
def test_rendezvous_mapping_regression_fixtures(count: int) -> None:
    # Stable across modest changes of the partition count: that's the point of it.
    parts = listing(count)
    mapping = message.RendezvousMapping(key, lambda: parts)
    expect = [21, 179, 50, 13, 337, 29, 110, 395, 192, 394, 344, 75]
    for quote, part in zip(QUOTES, expect, strict=True):
        assert mapping(TMsg(s=quote)) == (f"a/topic/part-{part:03d}", "application/x-ndjson")


def test_rendezvous_hashes_are_recomputed_for_a_new_listing() -> None:
    current = [listing(400)]
    mapping = message.RendezvousMapping(key, lambda: current[0])
    assert mapping(TMsg(s="seems"))[0] == "a/topic/part-179"
    current[0] = listing(100)  # part-179 is gone.
    assert mapping(TMsg(s="seems"))[0] != "a/topic/part-179"


def test_random_mapping() -> None:
    parts = listing(100)
    mapping: message.RandomMapping[TMsg] = message.RandomMapping(lambda: parts)
    got = {mapping(TMsg(s="foobar")) for _ in range(101)}
    assert all(ct == "application/x-ndjson" for _, ct in got)
    assert len(got) > 1  # Fails with probability 1e-200.


def test_empty_listings_raise() -> None:
    for mapping in (
        message.ModuloMapping(key, lambda: pb.ListResponse()),
        message.RendezvousMapping(key, lambda: None),
        message.RandomMapping(lambda: pb.ListResponse()),
    ):
        with pytest.raises(errors.EmptyListResponse, match=r"^empty ListResponse$"):
            mapping(TMsg(s="x"))


def test_a_watched_list_is_accepted_as_is() -> None:
    watched = client.WatchedList.__new__(client.WatchedList)
    watched.listing = None
    mapping = message.ModuloMapping(key, watched)
    with pytest.raises(errors.EmptyListResponse):
        mapping(TMsg(s="x"))
    watched.listing = listing(3)
    assert mapping(TMsg(s="x"))[0].startswith("a/topic/part-")


def test_content_type_comes_from_the_chosen_journal() -> None:
    parts = listing(2)
    parts.journals[1].spec.labels.CopyFrom(
        pb.label_set([(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_CSV)])
    )
    mapping = message.ModuloMapping(lambda m: b"", lambda: parts)
    # fnv1a32(b"") is odd: index 1.
    assert mapping(TMsg()) == ("a/topic/part-001", "text/csv")
