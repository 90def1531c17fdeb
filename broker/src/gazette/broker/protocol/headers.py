"""Validation of routes and headers (Gazette `route_extensions.go`, `header_extensions.go`).

Every RPC response carries a `Header`: the broker that answered, the journal's
`Route` (its members in sorted order, the primary's index, their endpoints)
and the etcd revision the answer was read at.
"""

from __future__ import annotations

from gazette.broker.protocol import protocol_pb2 as _pb
from gazette.broker.protocol.errors import ValidationError, within
from gazette.broker.protocol.fragments import validate_endpoint
from gazette.broker.protocol.specs import validate_process_id

__all__ = [
    "header_in",
    "route_equivalent",
    "validate_etcd",
    "validate_header",
    "validate_route",
]


def _id_text(m: _pb.ProcessSpec.ID) -> str:
    return f"{{Zone:{m.zone} Suffix:{m.suffix}}}"


def validate_route(m: _pb.Route) -> None:
    members = m.members
    prev: _pb.ProcessSpec.ID | None = None
    for i, cur in enumerate(members):
        with within(f"Members[{i}]"):
            validate_process_id(cur)
        if prev is not None and not (prev.zone, prev.suffix) < (cur.zone, cur.suffix):
            raise ValidationError(
                f"Members not in unique, sorted order (index {i}; {_id_text(prev)} <= {_id_text(cur)})"
            )
        prev = cur
    n = len(members)
    if m.primary < -1 or m.primary >= n:
        raise ValidationError(f"invalid Primary ({m.primary}; expected -1 <= Primary < {n})")
    ne = len(m.endpoints)
    if ne != 0 and ne != n:
        raise ValidationError(f"len(Endpoints) != 0, and != len(Members) ({ne} vs {n})")
    for i, ep in enumerate(m.endpoints):
        if ep == "":
            continue
        with within(f"Endpoints[{i}]"):
            validate_endpoint(ep)


def route_equivalent(a: _pb.Route, b: _pb.Route | None) -> bool:
    """Same primary and the same members in the same order; endpoints are ignored."""
    if b is None or a.primary != b.primary or len(a.members) != len(b.members):
        return False
    return all(
        x.zone == y.zone and x.suffix == y.suffix for x, y in zip(a.members, b.members, strict=True)
    )


def validate_etcd(m: _pb.Header.Etcd) -> None:
    if m.cluster_id == 0:
        raise ValidationError("invalid ClusterId (expected != 0)")
    if m.member_id == 0:
        raise ValidationError("invalid MemberId (expected != 0)")
    if m.revision <= 0:
        raise ValidationError(f"invalid Revision ({m.revision}; expected 0 < revision)")
    if m.raft_term == 0:
        raise ValidationError("invalid RaftTerm (expected != 0)")


def validate_header(m: _pb.Header) -> None:
    pid = m.process_id
    if pid.zone or pid.suffix:
        with within("ProcessId"):
            validate_process_id(pid)
    with within("Route"):
        validate_route(m.route)
    with within("Etcd"):
        validate_etcd(m.etcd)


def header_in(m: _pb.Header, field: str = "Header") -> None:
    with within(field):
        validate_header(m)
