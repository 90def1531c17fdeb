"""Gazette's consumer protocol (alias ``pc``): shard specs, the Shard service messages, validation.

Re-exports every message and enum of the ``consumer`` protobuf package (the
generated `protocol_pb2`), and adds Gazette's rules and derived values:

- `validate(msg)` for ShardSpec, ConsumerSpec, ReplicaStatus and every Shard
  RPC message (broker messages are handed to `gazette.broker.protocol`), raising
  `gazette.broker.protocol.ValidationError`;
- `recovery_log(spec)`, `hint_primary_key(spec)`, `hint_backup_keys(spec)`,
  `desired_replication(spec, max_hot_standbys)`, `label_set_ext(spec)` (labels
  plus ``id=<shard>``).

Usage::

    from gazette.broker import protocol as pb
    from gazette.consumer import protocol as pc

    spec = pc.ShardSpec(id="shard-000", max_txn_duration=pb.duration_from_seconds(1), ...)
    pc.validate(spec)
    pc.recovery_log(spec)      # "<recovery_log_prefix>/shard-000"
"""

from gazette.consumer.protocol.protocol_pb2 import (
    ETCD_TRANSACTION_FAILED,
    NO_SHARD_PRIMARY,
    NOT_SHARD_PRIMARY,
    OK,
    SHARD_NOT_FOUND,
    SHARD_STOPPED,
    ApplyRequest,
    ApplyResponse,
    Checkpoint,
    ConsumerSpec,
    GetHintsRequest,
    GetHintsResponse,
    ListRequest,
    ListResponse,
    ReplicaStatus,
    ShardSpec,
    StatRequest,
    StatResponse,
    Status,
    UnassignRequest,
    UnassignResponse,
)
from gazette.consumer.protocol.validation import (
    MAX_SHARD_ID_LEN,
    MIN_SHARD_ID_LEN,
    desired_replication,
    hint_backup_keys,
    hint_primary_key,
    label_set_ext,
    recovery_log,
    validate,
    validate_shard_id,
)

__all__ = [
    "ETCD_TRANSACTION_FAILED",
    "MAX_SHARD_ID_LEN",
    "MIN_SHARD_ID_LEN",
    "NOT_SHARD_PRIMARY",
    "NO_SHARD_PRIMARY",
    "OK",
    "SHARD_NOT_FOUND",
    "SHARD_STOPPED",
    "ApplyRequest",
    "ApplyResponse",
    "Checkpoint",
    "ConsumerSpec",
    "GetHintsRequest",
    "GetHintsResponse",
    "ListRequest",
    "ListResponse",
    "ReplicaStatus",
    "ShardSpec",
    "StatRequest",
    "StatResponse",
    "Status",
    "UnassignRequest",
    "UnassignResponse",
    "desired_replication",
    "hint_backup_keys",
    "hint_primary_key",
    "label_set_ext",
    "recovery_log",
    "validate",
    "validate_shard_id",
]
