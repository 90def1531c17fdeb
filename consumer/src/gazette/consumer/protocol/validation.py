"""Validation and derived values of consumer messages (Gazette `consumer/protocol/*_extensions.go`).

Rules and messages follow Gazette's; broker types inside consumer messages
(Header, Route, LabelSelector, ProcessSpec) are checked by
`gazette.broker.protocol`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from gazette.broker import protocol as pb
from gazette.consumer.protocol import protocol_pb2 as _pc
from gazette.consumer.recoverylog import recorded_op_pb2 as _rl
from gazette.consumer.recoverylog.validation import validate_fsm_hints, validate_segment

__all__ = [
    "MAX_SHARD_ID_LEN",
    "MIN_SHARD_ID_LEN",
    "desired_replication",
    "hint_backup_keys",
    "hint_primary_key",
    "label_set_ext",
    "recovery_log",
    "validate",
    "validate_shard_id",
]

MIN_SHARD_ID_LEN = 4
MAX_SHARD_ID_LEN = 512


def validate_shard_id(shard_id: str) -> None:
    """A token of 4..512 bytes: letters, numbers and ``-_+/.``."""
    pb.validate_token(shard_id, MIN_SHARD_ID_LEN, MAX_SHARD_ID_LEN, pb.TOKEN_SYMBOLS)


def recovery_log(spec: _pc.ShardSpec) -> str:
    """``<recovery_log_prefix>/<id>``, or "" when the shard has no recovery log."""
    if not spec.recovery_log_prefix:
        return ""
    return spec.recovery_log_prefix + "/" + spec.id


def hint_primary_key(spec: _pc.ShardSpec) -> str:
    """The etcd key of the hints recorded by the shard's primary."""
    return f"{spec.hint_prefix}/{spec.id}.primary"


def hint_backup_keys(spec: _pc.ShardSpec) -> list[str]:
    """The etcd keys of verified backup hints, newest first: ``.backup.0`` ... ``.backup.<n-1>``."""
    return [f"{spec.hint_prefix}/{spec.id}.backup.{i}" for i in range(spec.hint_backups)]


def desired_replication(spec: _pc.ShardSpec, max_hot_standbys: int = 3) -> int:
    """0 when disabled, else one primary plus hot standbys (capped by `max_hot_standbys`)."""
    if spec.disable:
        return 0
    return 1 + min(spec.hot_standbys, max_hot_standbys)


def label_set_ext(spec: _pc.ShardSpec) -> pb.LabelSet:
    """The spec's labels plus the meta-label ``id=<shard id>`` (what selectors match)."""
    return pb.union(pb.LabelSet(labels=[pb.Label(name="id", value=spec.id)]), spec.labels)


def _is_absolute_clean_path(p: str) -> bool:
    return p.startswith("/") and pb.path_clean(p) == p


def _validate_source(m: _pc.ShardSpec.Source) -> None:
    with pb.within("Journal"):
        pb.validate_journal(m.journal)
    if m.min_offset < 0:
        # Gazette's message says "> 0" although zero is accepted.
        raise pb.ValidationError(f"invalid MinOffset ({m.min_offset}; expected > 0)")


def _validate_shard_spec(m: _pc.ShardSpec) -> None:
    with pb.within("Id"):
        validate_shard_id(m.id)
    if m.recovery_log_prefix:
        with pb.within("RecoveryLogPrefix"):
            pb.validate_journal(recovery_log(m))
    elif m.hint_prefix:
        raise pb.ValidationError(
            f"invalid non-empty HintPrefix with empty RecoveryLogPrefix ({m.hint_prefix})"
        )
    if m.recovery_log_prefix and not _is_absolute_clean_path(m.hint_prefix):
        raise pb.ValidationError(
            f"HintPrefix is not an absolute, clean, non-directory path ({m.hint_prefix})"
        )
    if m.hint_backups < 0:
        raise pb.ValidationError(f"invalid HintBackups ({m.hint_backups}; expected >= 0)")
    min_txn = pb.duration_nanos(m.min_txn_duration)
    if min_txn < 0:
        raise pb.ValidationError(f"invalid MinTxnDuration ({min_txn}; expected >= 0)")
    max_txn = pb.duration_nanos(m.max_txn_duration)
    if max_txn <= 0:
        raise pb.ValidationError(f"invalid MaxTxnDuration ({max_txn}; expected > 0)")
    with pb.within("LabelSet"):
        pb.validate_labelset(m.labels)
        pb.validate_single_value_labels(m.labels)
    if pb.values_of(m.labels, "id"):
        raise pb.ValidationError('Labels cannot include label "id"')
    prev: str | None = None
    for i, src in enumerate(m.sources):
        with pb.within(f"Sources[{i}]"):
            _validate_source(src)
        if prev is not None and src.journal <= prev:
            raise pb.ValidationError(
                f"Sources.Journal not in unique, sorted order (index {i}; {src.journal} <= {prev})"
            )
        prev = src.journal


def _validate_consumer_spec(m: _pc.ConsumerSpec) -> None:
    pb.validate(m.process_spec)


_CODES = frozenset(_pc.ReplicaStatus.Code.values())
_STATUSES = frozenset(_pc.Status.values())


def _validate_replica_status(m: _pc.ReplicaStatus) -> None:
    if m.code not in _CODES:
        raise pb.ValidationError(f"invalid code ({m.code})", ("Code",))
    if not m.errors:
        if m.code == _pc.ReplicaStatus.FAILED:
            raise pb.ValidationError("expected non-empty Errors with Code FAILED")
    elif m.code != _pc.ReplicaStatus.FAILED:
        raise pb.ValidationError("expected Code FAILED with non-empty Errors")


def _status_in(status: int) -> None:
    if status not in _STATUSES:
        raise pb.ValidationError(f"invalid status ({status})", ("Status",))


def _header_in(h: pb.Header) -> None:
    with pb.within("Header"):
        pb.validate(h)


def _offsets_in(offsets: Any, field: str) -> None:
    with pb.within(field):
        pb.validate_offsets(offsets)


def _validate_stat_request(m: _pc.StatRequest) -> None:
    if m.HasField("header"):
        _header_in(m.header)
    with pb.within("Shard"):
        validate_shard_id(m.shard)
    _offsets_in(m.read_through, "ReadThrough")


def _validate_stat_response(m: _pc.StatResponse) -> None:
    _status_in(m.status)
    _header_in(m.header)
    _offsets_in(m.read_through, "ReadThrough")
    _offsets_in(m.publish_at, "PublishAt")


def _validate_list_request(m: _pc.ListRequest) -> None:
    with pb.within("Selector"):
        pb.validate_selector(m.selector)


def _validate_list_response_shard(m: _pc.ListResponse.Shard) -> None:
    with pb.within("Spec"):
        _validate_shard_spec(m.spec)
    if m.mod_revision <= 0:
        raise pb.ValidationError(f"invalid ModRevision ({m.mod_revision}; expected > 0)")
    with pb.within("Route"):
        pb.validate(m.route)
    n_members, n_status = len(m.route.members), len(m.status)
    if n_members != n_status:
        raise pb.ValidationError(
            f"length of Route.Members and Status are not equal ({n_members} vs {n_status})"
        )
    for i, st in enumerate(m.status):
        with pb.within(f"Status[{i}]"):
            _validate_replica_status(st)


def _validate_list_response(m: _pc.ListResponse) -> None:
    _status_in(m.status)
    _header_in(m.header)
    for i, shard in enumerate(m.shards):
        with pb.within(f"Shards[{i}]"):
            _validate_list_response_shard(shard)


def _validate_apply_change(m: _pc.ApplyRequest.Change) -> None:
    if m.HasField("upsert"):
        if m.delete:
            raise pb.ValidationError("both Upsert and Delete are set (expected exactly one)")
        with pb.within("Upsert"):
            _validate_shard_spec(m.upsert)
        if m.expect_mod_revision < 0 and m.expect_mod_revision != -1:
            raise pb.ValidationError(
                f"invalid ExpectModRevision ({m.expect_mod_revision}; expected >= 0 or -1)"
            )
        if m.HasField("primary_hints"):
            with pb.within("PrimaryHints"):
                validate_fsm_hints(m.primary_hints)
    elif m.delete:
        with pb.within("Delete"):
            validate_shard_id(m.delete)
        if m.expect_mod_revision <= 0 and m.expect_mod_revision != -1:
            raise pb.ValidationError(
                f"invalid ExpectModRevision ({m.expect_mod_revision}; expected > 0 or -1)"
            )
        if m.HasField("primary_hints"):
            raise pb.ValidationError("hints may be set only with an upsert, not a delete")
    else:
        raise pb.ValidationError("neither Upsert nor Delete are set (expected exactly one)")


def _validate_apply_request(m: _pc.ApplyRequest) -> None:
    for i, change in enumerate(m.changes):
        with pb.within(f"Changes[{i}]"):
            _validate_apply_change(change)


def _validate_status_header(m: Any) -> None:
    _status_in(m.status)
    _header_in(m.header)


def _validate_get_hints_request(m: _pc.GetHintsRequest) -> None:
    with pb.within("Shard"):
        validate_shard_id(m.shard)


def _validate_response_hints(m: _pc.GetHintsResponse.ResponseHints) -> None:
    if m.HasField("hints"):
        validate_fsm_hints(m.hints)


def _validate_get_hints_response(m: _pc.GetHintsResponse) -> None:
    _status_in(m.status)
    with pb.within("primary hints"):
        _validate_response_hints(m.primary_hints)
    for hints in m.backup_hints:
        with pb.within("backup hints"):
            _validate_response_hints(hints)


def _validate_unassign_request(m: _pc.UnassignRequest) -> None:
    for i, shard in enumerate(m.shards):
        with pb.within(f"Shards[{i}]"):
            validate_shard_id(shard)


def _validate_unassign_response(m: _pc.UnassignResponse) -> None:
    _status_in(m.status)
    if m.status != _pc.OK:
        raise pb.ValidationError(f"bad status: {_pc.Status.Name(m.status)}")


_VALIDATORS: dict[type[Message], Callable[[Any], None]] = {
    _pc.ShardSpec: _validate_shard_spec,
    _pc.ShardSpec.Source: _validate_source,
    _pc.ConsumerSpec: _validate_consumer_spec,
    _pc.ReplicaStatus: _validate_replica_status,
    _pc.StatRequest: _validate_stat_request,
    _pc.StatResponse: _validate_stat_response,
    _pc.ListRequest: _validate_list_request,
    _pc.ListResponse: _validate_list_response,
    _pc.ListResponse.Shard: _validate_list_response_shard,
    _pc.ApplyRequest: _validate_apply_request,
    _pc.ApplyRequest.Change: _validate_apply_change,
    _pc.ApplyResponse: _validate_status_header,
    _pc.GetHintsRequest: _validate_get_hints_request,
    _pc.GetHintsResponse: _validate_get_hints_response,
    _pc.GetHintsResponse.ResponseHints: _validate_response_hints,
    _pc.UnassignRequest: _validate_unassign_request,
    _pc.UnassignResponse: _validate_unassign_response,
    _rl.FSMHints: validate_fsm_hints,
    _rl.Segment: validate_segment,
}


def validate(msg: Message) -> None:
    """Validate a consumer (or recovery log, or broker) message; raise pb.ValidationError.

    Broker messages are passed on to `gazette.broker.protocol.validate`.
    """
    fn = _VALIDATORS.get(type(msg))
    if fn is None:
        pb.validate(msg)
    else:
        fn(msg)
