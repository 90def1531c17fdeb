"""Allocator key layout, entity types and decoding.

Under a KeySpace root ``R`` the allocator owns three sub-prefixes::

    R/items/<item id>                                   an item (journal, shard)
    R/members/<zone>#<suffix>                           a member (broker, consumer)
    R/assign/<item id>#<zone>#<suffix>#<slot>           an assignment; slot 0 is primary

``#`` is the separator because it sorts below every character an id, zone or
suffix may hold: lexicographic key order is then the natural (item, zone,
suffix) order, which every join in this package relies on.

Values are decoded by an application :class:`Decoder`, which knows the item
and member protobuf types (JournalSpec/BrokerSpec for brokers, ShardSpec/
ConsumerSpec for consumers) and reports the numbers the allocator needs: an
item's desired replication, a member's item limit and whether it is exiting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from gazette.allocator import errors

ITEMS_PREFIX = "/items/"
MEMBERS_PREFIX = "/members/"
ASSIGNMENTS_PREFIX = "/assign/"
SEP = "#"
_SEP_ORD = ord(SEP)


class RawKeyValue(Protocol):
    """What the allocator reads of an etcd key/value (aetcd, or a KeySpace entry)."""

    @property
    def key(self) -> str: ...
    @property
    def value(self) -> bytes: ...
    @property
    def create_revision(self) -> int: ...
    @property
    def mod_revision(self) -> int: ...
    @property
    def lease(self) -> int: ...


class KeyValue(RawKeyValue, Protocol):
    """A KeySpace entry: the raw key/value plus its decoded entity."""

    @property
    def decoded(self) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class ItemValue:
    """What a Decoder extracts from an item's value."""

    spec: Any
    desired_replication: int


@dataclasses.dataclass(frozen=True, slots=True)
class MemberValue:
    """What a Decoder extracts from a member's value."""

    spec: Any
    item_limit: int
    exiting: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    id: str
    spec: Any
    desired_replication: int


@dataclasses.dataclass(frozen=True, slots=True)
class Member:
    zone: str
    suffix: str
    spec: Any
    item_limit: int
    exiting: bool


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Assignment:
    """An assignment of an item to a member. ``value`` is the decoded value
    (a Route for brokers, a ReplicaStatus for consumers); it takes no part in
    ordering or equality-as-identity (see :func:`same_replica`)."""

    item_id: str
    member_zone: str
    member_suffix: str
    slot: int = 0
    value: Any = dataclasses.field(default=None, compare=False)


class Decoder(Protocol):
    """Decodes raw values of items, members and assignments.

    Implementations validate the value and raise on any inconsistency with the
    key (for example a spec whose name differs from the item id); the KeySpace
    logs and skips entries whose decoding raises.
    """

    def decode_item(self, item_id: str, value: bytes) -> ItemValue: ...

    def decode_member(self, zone: str, suffix: str, value: bytes) -> MemberValue: ...

    def decode_assignment(
        self, item_id: str, zone: str, suffix: str, slot: int, value: bytes
    ) -> Any: ...


def assert_above_sep(s: str) -> None:
    """Raise ValueError if ``s`` holds a character that sorts at or below ``#``."""
    # min() scans in C: a leader builds 30,000 keys in a round.
    if s and min(s) <= SEP:
        i = next(i for i, ch in enumerate(s) if ord(ch) <= _SEP_ORD)
        raise ValueError(f"invalid char <= '#' (ind {i} of {s!r})")


def member_key(root: str, zone: str, suffix: str) -> str:
    assert_above_sep(zone)
    assert_above_sep(suffix)
    return f"{root}{MEMBERS_PREFIX}{zone}{SEP}{suffix}"


def item_key(root: str, item_id: str) -> str:
    assert_above_sep(item_id)
    return f"{root}{ITEMS_PREFIX}{item_id}"


def item_assignments_prefix(root: str, item_id: str) -> str:
    assert_above_sep(item_id)
    return f"{root}{ASSIGNMENTS_PREFIX}{item_id}{SEP}"


def assignment_key(root: str, a: Assignment) -> str:
    assert_above_sep(a.member_zone)
    assert_above_sep(a.member_suffix)
    return f"{item_assignments_prefix(root, a.item_id)}{a.member_zone}{SEP}{a.member_suffix}{SEP}{a.slot}"


def same_replica(a: Assignment, b: Assignment) -> bool:
    """Whether two assignments place the same item on the same member (slots may differ)."""
    return (a.item_id, a.member_zone, a.member_suffix) == (
        b.item_id,
        b.member_zone,
        b.member_suffix,
    )


def key_value_decoder(
    root: str, decoder: Decoder
) -> Callable[[str, bytes], Item | Member | Assignment]:
    """A KeySpace decoder ``(key, value) -> entity`` for an allocator keyspace at ``root``.

    Applications recognising further sub-prefixes wrap it and dispatch on the
    key themselves before delegating.
    """
    members = root + MEMBERS_PREFIX
    items = root + ITEMS_PREFIX
    assigns = root + ASSIGNMENTS_PREFIX

    def decode(key: str, value: bytes) -> Item | Member | Assignment:
        if key.startswith(members):
            parts = key[len(members) :].split(SEP)
            if len(parts) != 2:
                raise errors.DecodeError(key, "expected (zone, suffix) in member key")
            m = decoder.decode_member(parts[0], parts[1], value)
            return Member(parts[0], parts[1], m.spec, m.item_limit, m.exiting)
        if key.startswith(items):
            parts = key[len(items) :].split(SEP)
            if len(parts) != 1:
                raise errors.DecodeError(key, "expected (id) in item key")
            v = decoder.decode_item(parts[0], value)
            return Item(parts[0], v.spec, v.desired_replication)
        if key.startswith(assigns):
            parts = key[len(assigns) :].split(SEP)
            if len(parts) != 4:
                raise errors.DecodeError(
                    key, "expected (item-id, member-zone, member-suffix, slot) in assignment key"
                )
            try:
                slot = int(parts[3])
            except ValueError as e:
                raise errors.DecodeError(key, f"invalid slot {parts[3]!r}") from e
            value = decoder.decode_assignment(parts[0], parts[1], parts[2], slot, value)
            return Assignment(parts[0], parts[1], parts[2], slot, value)
        raise errors.DecodeError(key, "unexpected key prefix")

    return decode
