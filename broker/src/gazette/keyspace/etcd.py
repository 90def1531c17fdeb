"""The etcd client as Gazette uses it: ``aetcd`` plus its raw gRPC stubs.

``aetcd`` covers connecting, leases and simple reads and writes. Gazette also
needs what it doesn't expose (watches with progress notifications and
"require leader", transactions that report their revision, puts that keep a
key's lease); for those we call the generated stubs of ``aetcd.rpc`` on the
client's own channel rather than keep a client of our own.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

import aetcd
import aetcd.exceptions
import aetcd.rpc
import grpc

from gazette.broker.protocol import protocol_pb2
from gazette.keyspace import errors
from gazette.keyspace import key_values as kvs

__all__ = [
    "DEFAULT_ADDRESS",
    "REQUIRE_LEADER",
    "EtcdConfig",
    "connect",
    "delete_all",
    "header_of",
    "key_value_of",
    "kv_stub",
    "metadata",
    "rpc_error",
    "txn",
    "watch_stub",
]

#: Gazette's default ``--etcd.address``.
DEFAULT_ADDRESS = "http://localhost:2379"

#: gRPC metadata asking etcd to end a watch when its member loses the raft
#: leader (etcd's ``hasleader`` key), so a partitioned member can't keep a
#: watcher blind while the watcher itself still holds its lease.
REQUIRE_LEADER = ("hasleader", "true")

# Watch batches can be far larger than gRPC's 4 MiB default (etcd sends up to
# a thousand revisions per response to a catching-up watcher); etcd's own Go
# client lifts the limit the same way.
_CHANNEL_OPTIONS = {
    "grpc.max_receive_message_length": -1,
    "grpc.max_send_message_length": -1,
}


@dataclasses.dataclass(frozen=True, slots=True)
class EtcdConfig:
    """The ``--etcd.*`` flags Gazette's binaries share.

    ``address`` is ``http://host:port`` (``--etcd.address``) and ``lease_ttl`` the
    seconds of a member's lease (``--etcd.lease``, default 20s).
    """

    address: str = DEFAULT_ADDRESS
    lease_ttl: float = 20.0


def _host_port(address: str) -> tuple[str, int]:
    url = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
    if url.scheme != "http":
        # aetcd builds insecure channels only; TLS needs a channel of our own.
        raise errors.EtcdError(f"unsupported etcd address scheme in {address!r} (expected http)")
    if not url.hostname:
        raise errors.EtcdError(f"etcd address {address!r} has no host")
    return url.hostname, url.port or 2379


async def connect(
    address: str = DEFAULT_ADDRESS, *, call_timeout: float | None = None
) -> aetcd.Client:
    """An ``aetcd.Client`` of ``address``, connected, with unbounded message sizes.

    ``call_timeout`` bounds each unary call aetcd makes (None: unbounded). Close it with
    ``await client.close()`` (or use it as an async context manager).
    """
    host, port = _host_port(address)
    client = aetcd.Client(
        host=host,
        port=port,
        timeout=None if call_timeout is None else int(max(1, call_timeout)),
        options=dict(_CHANNEL_OPTIONS),
    )
    try:
        await client.connect()
    except aetcd.exceptions.ClientError as e:
        raise errors.EtcdError(f"connecting to etcd at {address}: {e}") from e
    return client


async def _connected(client: aetcd.Client) -> None:
    try:
        await client.connect()
    except aetcd.exceptions.ClientError as e:
        raise errors.EtcdError(f"connecting to etcd: {e}") from e


async def kv_stub(client: aetcd.Client) -> Any:
    """The raw ``etcdserverpb.KV`` stub on ``client``'s channel."""
    await _connected(client)
    return client.kvstub


async def watch_stub(client: aetcd.Client) -> Any:
    """A raw ``etcdserverpb.Watch`` stub on ``client``'s channel."""
    await _connected(client)
    return aetcd.rpc.WatchStub(client.channel)


def metadata(client: aetcd.Client, *extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """Call metadata for raw stubs: the client's auth token (if any) and ``extra``."""
    return (*(client.metadata or ()), *extra)


def rpc_error(e: BaseException, what: str) -> errors.EtcdError:
    """An EtcdError saying ``what`` failed, for a gRPC or aetcd exception (raise it ``from e``)."""
    code: str | None = None
    if isinstance(e, grpc.aio.AioRpcError):
        code = e.code().name
        detail = e.details() or code
    else:
        cause = e.__cause__
        if isinstance(cause, grpc.aio.AioRpcError):
            code = cause.code().name
        detail = str(e) or type(e).__name__
    return errors.EtcdError(f"{what}: {detail}", code=code)


def header_of(h: Any) -> protocol_pb2.Header.Etcd:
    """Gazette's ``Header.Etcd`` from an etcd ``ResponseHeader``."""
    return protocol_pb2.Header.Etcd(
        cluster_id=h.cluster_id,
        member_id=h.member_id,
        revision=h.revision,
        raft_term=h.raft_term,
    )


def key_value_of(kv: Any) -> kvs.KeyValue:
    """Our raw (undecoded) KeyValue from an etcd ``mvccpb.KeyValue``."""
    return kvs.KeyValue(
        key=kv.key.decode("utf-8", "surrogateescape"),
        value=kv.value,
        create_revision=kv.create_revision,
        mod_revision=kv.mod_revision,
        version=kv.version,
        lease=kv.lease,
    )


async def txn(client: aetcd.Client, request: aetcd.rpc.TxnRequest, what: str) -> Any:
    """Run a raw etcd transaction (its ``TxnResponse``: ``succeeded``, ``header``, ``responses``).

    Raw, unlike ``aetcd.Client.transaction``, so callers get the header revision
    and every request field (e.g. ``PutRequest.ignore_lease``). Failures raise
    EtcdError saying ``what`` failed.
    """
    stub = await kv_stub(client)
    try:
        return await stub.Txn(request, metadata=metadata(client))
    except grpc.aio.AioRpcError as e:
        raise rpc_error(e, what) from e


async def delete_all(client: aetcd.Client) -> int:
    """Delete every key of the cluster (test clean-up); returns how many went."""
    stub = await kv_stub(client)
    try:
        resp = await stub.DeleteRange(
            aetcd.rpc.DeleteRangeRequest(key=b"\0", range_end=b"\0"),
            metadata=metadata(client),
        )
    except grpc.aio.AioRpcError as e:
        raise rpc_error(e, "deleting every key") from e
    return int(resp.deleted)
