"""The etcd client as Gazette uses it: ``aetcd`` plus its raw gRPC stubs.

``aetcd`` covers leases and simple reads and writes. Gazette also needs what it
doesn't expose (watches with progress notifications and "require leader",
transactions that report their revision, puts that keep a key's lease); for
those we call the generated stubs of ``aetcd.rpc`` on the client's own channel
rather than keep a client of our own. That channel is ours
(:class:`~gazette.keyspace.channel.EtcdChannel`): aetcd dials one plaintext
member only, while ``--etcd.address`` may list several, over TLS, with etcd
users (:mod:`gazette.keyspace.options`).
"""

from __future__ import annotations

import logging
from typing import Any

import aetcd
import aetcd.exceptions
import aetcd.rpc
import aetcd.watcher
import grpc

from gazette.broker.protocol import protocol_pb2
from gazette.keyspace import channel as channel_mod
from gazette.keyspace import errors
from gazette.keyspace import key_values as kvs
from gazette.keyspace import options as opts

log = logging.getLogger(__name__)

#: Re-exported from :mod:`gazette.keyspace.options`.
DEFAULT_ADDRESS = opts.DEFAULT_ADDRESS
EtcdConfig = opts.EtcdConfig

__all__ = [
    "DEFAULT_ADDRESS",
    "REQUIRE_LEADER",
    "Client",
    "EtcdConfig",
    "connect",
    "delete_all",
    "header_of",
    "key_value_of",
    "kv_stub",
    "metadata",
    "reauthenticate",
    "rpc_error",
    "txn",
    "watch_stub",
]

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
    # gRPC waits up to 2 minutes between reconnects to a member that was down, and
    # fails every call meanwhile: an etcd back after a restart went unused for
    # seconds (test_watch_restarts_when_etcd_restarts, on a loaded machine), while
    # member leases (--etcd.lease, 20 s) need it within a few.
    "grpc.max_reconnect_backoff_ms": 2000,
}


def _keepalive_options(every: float | None) -> dict[str, int]:
    """HTTP/2 pings every ``every`` s, the connection dropped if one goes unanswered as long.

    Over a connection into a network partition calls neither fail nor answer, and
    once the network heals TCP resumes only at its next retransmission, which
    backs off to many seconds: a member would rejoin (and its watch catch up) long
    after etcd is reachable again. A dropped connection is dialed afresh instead.
    Gazette's brokers ping every ``--etcd.lease`` / 4 (``mainboilerplate/etcd.go``);
    etcd answers pings sooner than its ``--grpc-keepalive-min-time`` (5 s) with a
    GOAWAY only while it sends us nothing, and members always have a watch and a
    keep-alive going.
    """
    if not every:
        return {}
    ms = max(1000, int(every * 1000))
    return {
        "grpc.keepalive_time_ms": ms,
        "grpc.keepalive_timeout_ms": ms,
        # grpc-core stops pinging after 2 pings sent without data otherwise.
        "grpc.http2.max_pings_without_data": 0,
    }


def _credentials(config: EtcdConfig) -> grpc.ChannelCredentials | None:
    """TLS credentials of ``config`` (None for plaintext endpoints); reads its PEM files."""
    if not config.tls:
        return None

    def pem(flag: str, path: str) -> bytes | None:
        return config.read_file(flag, path) if path else None

    return grpc.ssl_channel_credentials(
        root_certificates=pem("--etcd.trusted-ca-file", config.trusted_ca_file),
        private_key=pem("--etcd.cert-key-file", config.cert_key_file),
        certificate_chain=pem("--etcd.cert-file", config.cert_file),
    )


class Client(aetcd.Client):  # type: ignore[misc]  # aetcd is untyped.
    """An ``aetcd.Client`` on an :class:`~gazette.keyspace.channel.EtcdChannel`.

    aetcd dials one plaintext ``host:port`` and keeps a token it never renews;
    this client's channel fails over between the members of ``config.address``,
    dials TLS, and sends (and renews) the token of ``config.username``. Build it
    with :func:`connect`.
    """

    def __init__(
        self,
        config: EtcdConfig,
        *,
        call_timeout: float | None = None,
        keepalive: float | None = None,
    ) -> None:
        super().__init__(
            timeout=None if call_timeout is None else int(max(1, call_timeout)),
            options=dict(_CHANNEL_OPTIONS) | _keepalive_options(keepalive),
        )
        self.config = config
        self._endpoints = config.endpoints
        self._credentials = _credentials(config)
        self.token_auth: channel_mod.TokenAuth | None = None
        if config.username:
            self.token_auth = channel_mod.TokenAuth(config.username, config.read_password)

    async def connect(self) -> None:
        """Make the channel and stubs (no call to etcd; aetcd's connect would dial its own)."""
        if self._connected.is_set():
            return
        ch = channel_mod.EtcdChannel(
            self._endpoints,
            credentials=self._credentials,
            options=tuple(self._options.items()),
            auth=self.token_auth,
        )
        self.channel = ch
        self.metadata = None  # The channel adds the token to every call.
        self.auth_stub = aetcd.rpc.AuthStub(ch)
        self.kvstub = aetcd.rpc.KVStub(ch)
        self.clusterstub = aetcd.rpc.ClusterStub(ch)
        self.leasestub = aetcd.rpc.LeaseStub(ch)
        self.maintenancestub = aetcd.rpc.MaintenanceStub(ch)
        self._watcher = aetcd.watcher.Watcher(
            aetcd.rpc.WatchStub(ch), timeout=self._timeout, metadata=None
        )
        self._connected.set()


async def connect(
    config: EtcdConfig | str = DEFAULT_ADDRESS,
    *,
    call_timeout: float | None = None,
    keepalive: float | None = None,
) -> aetcd.Client:
    """A :class:`Client` of ``config`` (or of an ``--etcd.address`` string), with
    unbounded message sizes.

    ``call_timeout`` bounds each unary call aetcd makes (None: unbounded).
    ``keepalive`` (seconds) pings the connection that often and drops it when a ping
    goes unanswered as long (see :func:`_keepalive_options`; members pass a quarter
    of their lease). Nothing
    is dialed yet, except that with ``config.username`` the user authenticates
    now, so a wrong password fails here with
    :class:`~gazette.keyspace.errors.EtcdAuthError`; if etcd can't be reached
    the first call authenticates instead. Bad options raise
    :class:`~gazette.keyspace.errors.EtcdConfigError`. Close the client with
    ``await client.close()`` (or use it as an async context manager).
    """
    cfg = EtcdConfig(address=config) if isinstance(config, str) else config
    cfg.check()
    client = Client(cfg, call_timeout=call_timeout, keepalive=keepalive)
    await client.connect()
    if client.token_auth is not None:
        try:
            await client.token_auth.ensure(client.channel, call_timeout or 10.0)
        except grpc.aio.AioRpcError as e:
            log.warning(
                "could not authenticate to etcd at %s yet (will retry on first use): %s",
                cfg.address,
                e.details() or e.code().name,
            )
        except errors.EtcdAuthError:
            await client.close()
            raise
    return client


async def reauthenticate(client: aetcd.Client) -> bool:
    """Replace ``client``'s auth token by a fresh one; False if it has no user.

    For refusals the channel can't see, such as a watch that etcd cancels
    because its stream's token expired.
    """
    auth = getattr(client, "token_auth", None)
    if not isinstance(auth, channel_mod.TokenAuth):
        return False
    await client.connect()
    await auth.refresh(client.channel, auth.token, None)
    return True


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
    """An EtcdError saying ``what`` failed, for a gRPC or aetcd exception (raise it ``from e``).

    A failed TLS handshake gets a hint naming the flags that set it up: gRPC
    reports it as a bare UNAVAILABLE.
    """
    code: str | None = None
    if isinstance(e, grpc.aio.AioRpcError):
        code = e.code().name
        detail = e.details() or code
    else:
        cause = e.__cause__
        if isinstance(cause, grpc.aio.AioRpcError):
            code = cause.code().name
        detail = str(e) or type(e).__name__
    if any(word in detail for word in ("SSL", "handshake", "certificate", "TLS")):
        detail += (
            " (a TLS failure: check --etcd.trusted-ca-file against etcd's certificate, "
            "and --etcd.cert-file / --etcd.cert-key-file against etcd's --trusted-ca-file)"
        )
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
