"""Journals as items of the allocator: how a broker keyspace decodes, and when a journal is consistent.

The allocator (:mod:`gazette.allocator`) knows items, members and assignments
and nothing of what they are. A broker keyspace makes them journals and
brokers (Gazette ``broker/keyspace.go``):

* :class:`JournalDecoder` decodes ``items/<journal>`` as a JournalSpec (its
  desired replication follows suspension, ``pb.desired_replication``),
  ``members/<zone>#<suffix>`` as a BrokerSpec (``journal_limit`` is its item
  limit) and ``assign/...`` values as a Route (an empty value is
  ``Route{primary: -1}``, not yet written by the primary). Every value is
  validated, as Gazette's decoder does: a bad spec in etcd is skipped, not served.
* :func:`journal_is_consistent` is the broker's consistency gate
  (:data:`gazette.allocator.IsConsistentFn`): a journal may lose a replica
  only once every assignment holds the Route of the current assignments,
  which the primary writes after its replicas synchronised.

The server, the operator and gazctl read a broker keyspace through this
module, so it sits just above the allocator and below everything else of the
broker (see the import-linter contracts in the root ``pyproject.toml``).

Usage::

    from gazette import allocator, keyspace
    from gazette.broker import journals

    decode = allocator.key_value_decoder(root, journals.JournalDecoder())
    ks = keyspace.KeySpace(root, decode)
    observed = allocator.ObservedState(ks, member_key, journals.journal_is_consistent)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gazette.allocator import errors, keys, routes
from gazette.broker import protocol as pb

__all__ = [
    "JournalDecoder",
    "assignments_consistent",
    "journal_is_consistent",
]


def assignments_consistent(assignments: Sequence[keys.KeyValue]) -> bool:
    """Whether every assignment's Route value equals the Route of ``assignments``."""
    rt = routes.route_of(assignments)
    for kv in assignments:
        value = kv.decoded.value
        if not isinstance(value, pb.Route) or not pb.route_equivalent(rt, value):
            return False
    return len(rt.members) == len(assignments)


def journal_is_consistent(
    _item: keys.Item, _kv: keys.KeyValue, assignments: Sequence[keys.KeyValue]
) -> bool:
    """The allocator's consistency gate for journals: :func:`assignments_consistent`."""
    return assignments_consistent(assignments)


class JournalDecoder:
    """Decoder of a broker keyspace: JournalSpec items, BrokerSpec members, Route assignments.

    Every decoded message is checked by ``validate`` (``pb.validate``; tests
    may pass another), which raises on an invalid value.
    """

    def __init__(self, validate: Callable[[Any], None] = pb.validate) -> None:
        self._validate = validate

    def decode_item(self, item_id: str, value: bytes) -> keys.ItemValue:
        spec = pb.JournalSpec.FromString(value)
        self._validate(spec)
        if spec.name != item_id:
            raise errors.DecodeError(
                item_id, f"JournalSpec Name doesn't match Item ID ({spec.name!r} vs {item_id!r})"
            )
        return keys.ItemValue(spec, pb.desired_replication(spec))

    def decode_member(self, zone: str, suffix: str, value: bytes) -> keys.MemberValue:
        spec = pb.BrokerSpec.FromString(value)
        self._validate(spec)
        pid = spec.process_spec.id
        if pid.zone != zone:
            raise errors.DecodeError(
                zone, f"BrokerSpec Zone doesn't match Member Zone ({pid.zone!r} vs {zone!r})"
            )
        if pid.suffix != suffix:
            raise errors.DecodeError(
                suffix,
                f"BrokerSpec Suffix doesn't match Member Suffix ({pid.suffix!r} vs {suffix!r})",
            )
        return keys.MemberValue(spec, int(spec.journal_limit), bool(spec.exiting))

    def decode_assignment(
        self, item_id: str, zone: str, suffix: str, slot: int, value: bytes
    ) -> pb.Route:
        if not value:
            return pb.Route(primary=-1)
        rt = pb.Route.FromString(value)
        self._validate(rt)
        return rt
