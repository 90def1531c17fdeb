"""Routes of items, and the decoders brokers use for journals and brokers.

A Route lists an item's assigned members in (zone, suffix) order (which is
their assignment-key order), the index of the slot-0 member as primary (or
-1), and each member's endpoint from its spec ("" if the member key is gone).
Building one from assignments is Gazette's ``protocol/ext`` (it needs the
allocator's types, so it lives here); everything else about Routes and specs
(validation, equivalence, desired replication) is the protocol package's.

:class:`JournalDecoder` decodes JournalSpec items, BrokerSpec members and Route
assignments (empty value = ``Route{primary: -1}``), validating each with
``pb.validate``; :func:`journal_is_consistent` is the broker's consistency
gate: every assignment's Route equals the Route of the current assignments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gazette.allocator import errors, keys
from gazette.allocator.state import State
from gazette.broker import protocol as pb

EndpointOf = Callable[[Any], str]


def broker_endpoint(spec: Any) -> str:
    """Endpoint of a BrokerSpec member."""
    return str(spec.process_spec.endpoint) if spec is not None else ""


def route_of(assignments: Sequence[keys.KeyValue]) -> pb.Route:
    """The Route of an item's assignments (ordered on key), without endpoints."""
    rt = pb.Route(primary=-1)
    for kv in assignments:
        a: keys.Assignment = kv.decoded
        if a.slot == 0:
            rt.primary = len(rt.members)
        rt.members.add(zone=a.member_zone, suffix=a.member_suffix)
    return rt


def attach_endpoints(rt: pb.Route, state: State, endpoint_of: EndpointOf = broker_endpoint) -> None:
    del rt.endpoints[:]
    for m in rt.members:
        i = state.find_member(m.zone, m.suffix)
        rt.endpoints.append(endpoint_of(state.member(i).spec) if i != -1 else "")


def journal_is_consistent(
    _item: keys.Item, _kv: keys.KeyValue, assignments: Sequence[keys.KeyValue]
) -> bool:
    """Every assignment's Route value equals the Route of the current assignments."""
    rt = route_of(assignments)
    for kv in assignments:
        value = kv.decoded.value
        if not isinstance(value, pb.Route) or not pb.route_equivalent(rt, value):
            return False
    return len(rt.members) == len(assignments)


class JournalDecoder:
    """Decoder of a broker keyspace: JournalSpec items, BrokerSpec members, Route assignments.

    Every decoded message is checked by ``validate`` (``pb.validate``, as
    Gazette's decoder does; tests may pass another), which raises on an invalid value.
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
    ) -> Any:
        if not value:
            return pb.Route(primary=-1)
        rt = pb.Route.FromString(value)
        self._validate(rt)
        return rt
