"""Routes of items, and the decoders brokers use for journals and brokers.

A Route lists an item's assigned members in (zone, suffix) order (which is
their assignment-key order), the index of the slot-0 member as primary (or
-1), and each member's endpoint from its spec ("" if the member key is gone).

:class:`JournalDecoder` decodes JournalSpec items, BrokerSpec members and Route
assignments (empty value = ``Route{primary: -1}``); :func:`journal_is_consistent`
is the broker's consistency gate: every assignment's Route equals the Route of
the current assignments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gazette.allocator import errors, keys
from gazette.allocator.state import State
from gazette.broker.protocol import protocol_pb2

Route = protocol_pb2.Route
EndpointOf = Callable[[Any], str]


def broker_endpoint(spec: Any) -> str:
    """Endpoint of a BrokerSpec member."""
    return str(spec.process_spec.endpoint) if spec is not None else ""


def route_of(assignments: Sequence[keys.KeyValue]) -> protocol_pb2.Route:
    """The Route of an item's assignments (ordered on key), without endpoints."""
    rt = protocol_pb2.Route(primary=-1)
    for kv in assignments:
        a: keys.Assignment = kv.decoded
        if a.slot == 0:
            rt.primary = len(rt.members)
        rt.members.add(zone=a.member_zone, suffix=a.member_suffix)
    return rt


def attach_endpoints(
    rt: protocol_pb2.Route, state: State, endpoint_of: EndpointOf = broker_endpoint
) -> None:
    del rt.endpoints[:]
    for m in rt.members:
        i = state.find_member(m.zone, m.suffix)
        rt.endpoints.append(endpoint_of(state.member(i).spec) if i != -1 else "")


def route_equivalent(a: protocol_pb2.Route, b: protocol_pb2.Route) -> bool:
    """Same primary and same members in the same order (endpoints are ignored)."""
    if a.primary != b.primary or len(a.members) != len(b.members):
        return False
    return all(
        x.zone == y.zone and x.suffix == y.suffix for x, y in zip(a.members, b.members, strict=True)
    )


def journal_is_consistent(
    _item: keys.Item, _kv: keys.KeyValue, assignments: Sequence[keys.KeyValue]
) -> bool:
    """Every assignment's Route value equals the Route of the current assignments."""
    rt = route_of(assignments)
    for kv in assignments:
        value = kv.decoded.value
        if not isinstance(value, protocol_pb2.Route) or not route_equivalent(rt, value):
            return False
    return len(rt.members) == len(assignments)


def desired_replication(spec: protocol_pb2.JournalSpec) -> int:
    """Replication of a journal, less when it's suspended (PARTIAL: 1, FULL: 0)."""
    level = spec.suspend.level
    if level == protocol_pb2.JournalSpec.Suspend.PARTIAL:
        return 1
    if level == protocol_pb2.JournalSpec.Suspend.FULL:
        return 0
    return int(spec.replication)


class JournalDecoder:
    """Decoder of a broker keyspace: JournalSpec items, BrokerSpec members, Route assignments.

    ``validate`` checks a decoded message (``pb.validate`` once the protocol
    package provides it); it raises on invalid values.
    """

    def __init__(self, validate: Callable[[Any], None] | None = None) -> None:
        self._validate = validate

    def decode_item(self, item_id: str, value: bytes) -> keys.ItemValue:
        spec = protocol_pb2.JournalSpec.FromString(value)
        if self._validate is not None:
            self._validate(spec)
        if spec.name != item_id:
            raise errors.DecodeError(
                item_id, f"JournalSpec Name doesn't match Item ID ({spec.name!r} vs {item_id!r})"
            )
        return keys.ItemValue(spec, desired_replication(spec))

    def decode_member(self, zone: str, suffix: str, value: bytes) -> keys.MemberValue:
        spec = protocol_pb2.BrokerSpec.FromString(value)
        if self._validate is not None:
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
            return protocol_pb2.Route(primary=-1)
        rt = protocol_pb2.Route.FromString(value)
        if self._validate is not None:
            self._validate(rt)
        return rt
