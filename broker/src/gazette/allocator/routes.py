"""Routes of items: an item's assignments as the ``protocol.Route`` peers and clients see.

A Route lists an item's assigned members in (zone, suffix) order (which is
their assignment-key order), the index of the slot-0 member as primary (or
-1), and each member's endpoint from its spec ("" if the member key is gone).
This is Gazette's ``broker/protocol/ext`` (``Init`` and ``AttachEndpoints``).

Why the allocator builds a ``protocol.Route`` although it knows nothing of
journals: Route is not a journal type. It is the ground layer's description
of "which members serve an item, and which one leads", and both kinds of
items carry it: journal headers and assignment values (brokers), shard
headers and hints (consumers, whose protocol reuses the broker's ``Route``
and ``ProcessSpec``). The allocator already depends on the ground layer
(``gazette.broker.protocol``); building the Route once here from its own
:class:`~gazette.allocator.keys.Assignment` keeps one implementation for
both, where a copy in the broker and another in the consumer would drift.
What a member's endpoint is comes from its spec: both BrokerSpec and
ConsumerSpec hold a ``process_spec`` (:func:`member_endpoint`); other member
types pass their own ``endpoint_of``.

What a Route *means* for an item (the broker's consistency gate, statuses)
stays with the item's owner, e.g. :mod:`gazette.broker.journals`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gazette.allocator import keys
from gazette.allocator.state import State
from gazette.broker import protocol as pb

EndpointOf = Callable[[Any], str]
"""A member spec's endpoint ("" if it has none)."""


def member_endpoint(spec: Any) -> str:
    """Endpoint of a member spec holding a ``process_spec`` (BrokerSpec, ConsumerSpec)."""
    process_spec = getattr(spec, "process_spec", None)
    return str(process_spec.endpoint) if process_spec is not None else ""


def route_of(assignments: Sequence[keys.KeyValue]) -> pb.Route:
    """The Route of an item's assignments (ordered on key), without endpoints."""
    rt = pb.Route(primary=-1)
    for kv in assignments:
        a: keys.Assignment = kv.decoded
        if a.slot == 0:
            rt.primary = len(rt.members)
        rt.members.add(zone=a.member_zone, suffix=a.member_suffix)
    return rt


def attach_endpoints(rt: pb.Route, state: State, endpoint_of: EndpointOf = member_endpoint) -> None:
    """Set the endpoint of each of ``rt``'s members from their specs in ``state``."""
    del rt.endpoints[:]
    for m in rt.members:
        i = state.find_member(m.zone, m.suffix)
        rt.endpoints.append(endpoint_of(state.member(i).spec) if i != -1 else "")
