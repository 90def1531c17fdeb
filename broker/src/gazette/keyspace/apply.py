"""The checked transaction of Gazette's Apply RPCs, shared by every writer of specs.

The broker's ``Journal.Apply``, the consumer's ``Shard.Apply`` and the
Kubernetes operator all write specifications the same way: one etcd
transaction of puts and deletes under ``<root>/items/<name>``, each guarded
by the mod revision the writer last saw. Callers validate and encode the specs;
this module only knows keys, bytes and revisions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import NamedTuple

import aetcd
import aetcd.rpc

from gazette.broker.protocol import protocol_pb2
from gazette.keyspace import errors, etcd

__all__ = ["ANY_REVISION", "MUST_NOT_EXIST", "ApplyResult", "Change", "apply_changes", "item_key"]

#: ``expect_mod_revision`` meaning "apply whatever the current revision".
ANY_REVISION = -1
#: ``expect_mod_revision`` meaning "the key must not exist" (upserts only).
MUST_NOT_EXIST = 0

# What etcd answers (INVALID_ARGUMENT) to a txn over its --max-txn-ops.
_TOO_MANY_OPS = "too many operations in txn"


class Change(NamedTuple):
    """One change of an apply: a plain ``(name, value, expect_mod_revision)`` tuple works too.

    ``value`` is the encoded spec to put, or None to delete ``name``.
    ``expect_mod_revision``: ``0`` the key must not exist; ``-1`` unconditional;
    ``> 0`` the key's mod revision must equal it (a delete needs ``> 0`` or ``-1``).
    """

    name: str
    value: bytes | None
    expect_mod_revision: int


@dataclasses.dataclass(frozen=True, slots=True)
class ApplyResult:
    """Outcome of :func:`apply_changes`.

    ``revision`` is the transaction's etcd revision (also when it failed), which
    an Apply RPC waits its KeySpace to reach before replying, and ``etcd`` the
    transaction's whole header.
    """

    succeeded: bool
    revision: int
    etcd: protocol_pb2.Header.Etcd
    #: Whether it changed a key at all (not so when it only deleted absent keys):
    #: if not, ``revision`` is etcd's current one, which a KeySpace watching only
    #: its root may not see before the next change under it (etcd's revision also
    #: counts writes elsewhere: brokers' acknowledgement fences, other roots).
    changed: bool = True

    @property
    def status(self) -> protocol_pb2.Status.ValueType:
        """Gazette's status: ``OK``, or ``ETCD_TRANSACTION_FAILED`` when a guard failed."""
        return protocol_pb2.OK if self.succeeded else protocol_pb2.ETCD_TRANSACTION_FAILED


def item_key(root: str, name: str) -> str:
    """The etcd key of item (journal or shard) ``name`` under ``root``."""
    return f"{root}/items/{name}"


def _guard(key: bytes, change: Change) -> aetcd.rpc.Compare | None:
    expect = change.expect_mod_revision
    if expect < -1:
        raise ValueError(
            f"invalid expect_mod_revision of {change.name!r} ({expect}; expected >= -1)"
        )
    if change.value is None and expect == MUST_NOT_EXIST:
        raise ValueError(
            f"invalid expect_mod_revision of delete {change.name!r} (0; expected > 0 or -1)"
        )
    if expect == ANY_REVISION:
        return None
    # A missing key has mod revision 0, so one compare covers "must not exist" too.
    return aetcd.rpc.Compare(
        key=key,
        target=aetcd.rpc.Compare.MOD,
        result=aetcd.rpc.Compare.EQUAL,
        mod_revision=expect,
    )


async def apply_changes(
    client: aetcd.Client, root: str, changes: Iterable[Change | tuple[str, bytes | None, int]]
) -> ApplyResult:
    """Apply ``changes`` under ``<root>/items/`` in one etcd transaction, all or nothing.

    Returns whether every guard held. Raises ``ValueError`` for a malformed
    change, and :class:`~gazette.keyspace.errors.EtcdError` when etcd refuses the
    transaction itself (e.g. the same key twice, or more operations than its
    ``--max-txn-ops``, 128 by default: then the error names that limit, and its
    ``code`` is ``"INVALID_ARGUMENT"``).
    """
    compares: list[aetcd.rpc.Compare] = []
    ops: list[aetcd.rpc.RequestOp] = []
    for raw in changes:
        change = Change(*raw)
        key = item_key(root, change.name).encode()
        guard = _guard(key, change)
        if guard is not None:
            compares.append(guard)
        if change.value is None:
            ops.append(
                aetcd.rpc.RequestOp(request_delete_range=aetcd.rpc.DeleteRangeRequest(key=key))
            )
        else:
            ops.append(
                aetcd.rpc.RequestOp(request_put=aetcd.rpc.PutRequest(key=key, value=change.value))
            )

    try:
        resp = await etcd.txn(
            client,
            aetcd.rpc.TxnRequest(compare=compares, success=ops),
            f"applying {len(ops)} changes under {root}",
        )
    except errors.EtcdError as e:
        if e.code == "INVALID_ARGUMENT" and _TOO_MANY_OPS in str(e):
            # Gazette applies a request in one transaction too, and relays etcd's
            # bare "too many operations in txn request". Splitting would break the
            # all-or-nothing promise, so say which limit was hit and what to do.
            raise errors.EtcdError(
                f"an Apply of {len(ops)} changes is more than etcd takes in one "
                "transaction (its --max-txn-ops, 128 by default): apply fewer changes "
                "at a time, or raise --max-txn-ops",
                code=e.code,
            ) from e
        raise
    header = etcd.header_of(resp.header)
    changed = any(
        r.WhichOneof("response") != "response_delete_range" or r.response_delete_range.deleted
        for r in resp.responses
    )
    return ApplyResult(
        succeeded=bool(resp.succeeded),
        revision=int(header.revision),
        etcd=header,
        changed=bool(resp.succeeded) and changed,
    )
