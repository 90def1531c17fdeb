"""Shards as items of the allocator: how a consumer keyspace decodes, and when a shard is consistent.

A consumer application's etcd prefix holds (Gazette ``consumer/key_space.go``)::

    <prefix>/items/<shard id>                          ShardSpec
    <prefix>/members/<zone>#<suffix>                   ConsumerSpec, under the member's lease
    <prefix>/assign/<shard id>#<zone>#<suffix>#<slot>  ReplicaStatus (empty = IDLE)

:class:`ShardDecoder` decodes and validates them for the generic allocator;
:func:`shard_is_consistent` is the gate by which the allocator removes a
replica only once another can take over (STANDBY or PRIMARY).
"""

from __future__ import annotations

from collections.abc import Sequence

from gazette.allocator import errors, keys
from gazette.consumer import protocol as pc

__all__ = ["ShardDecoder", "shard_is_consistent"]

_Code = pc.ReplicaStatus.Code


class ShardDecoder:
    """Decoder of a consumer keyspace (ShardSpec items, ConsumerSpec members, ReplicaStatus)."""

    def __init__(self, max_hot_standbys: int = 3) -> None:
        self.max_hot_standbys = max_hot_standbys

    def decode_item(self, item_id: str, value: bytes) -> keys.ItemValue:
        spec = pc.ShardSpec.FromString(value)
        pc.validate(spec)
        if spec.id != item_id:
            raise errors.DecodeError(
                item_id, f"ShardSpec ID doesn't match Item ID ({spec.id!r} vs {item_id!r})"
            )
        return keys.ItemValue(spec, pc.desired_replication(spec, self.max_hot_standbys))

    def decode_member(self, zone: str, suffix: str, value: bytes) -> keys.MemberValue:
        spec = pc.ConsumerSpec.FromString(value)
        pc.validate(spec)
        pid = spec.process_spec.id
        if (pid.zone, pid.suffix) != (zone, suffix):
            raise errors.DecodeError(
                f"{zone}#{suffix}",
                f"ConsumerSpec ID doesn't match the member key ({pid.zone}#{pid.suffix})",
            )
        return keys.MemberValue(spec, int(spec.shard_limit), bool(spec.exiting))

    def decode_assignment(
        self, item_id: str, zone: str, suffix: str, slot: int, value: bytes
    ) -> pc.ReplicaStatus:
        status = pc.ReplicaStatus.FromString(value)
        pc.validate(status)
        return status


def shard_is_consistent(
    _item: keys.Item, assignment: keys.KeyValue, assignments: Sequence[keys.KeyValue]
) -> bool:
    """Whether ``assignment``'s replica could take over (the allocator's consistency gate)."""
    code = assignment.decoded.value.code
    if code in (_Code.STANDBY, _Code.PRIMARY):
        return True
    if code == _Code.FAILED:
        # A failed replica may go once the primary has failed too: nothing better will come.
        return any(
            kv.decoded.slot == 0 and kv.decoded.value.code == _Code.FAILED for kv in assignments
        )
    return False
