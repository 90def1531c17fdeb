"""What the ``gazctl shards`` commands share: their flags and the consumer ``Shard`` RPCs.

- :func:`consumer_address` adds ``--consumer.address`` (env ``CONSUMER_ADDRESS``)
  and the consumer's authorization, as Gazette's gazctl: ``--consumer.auth-keys``
  signs a token per request, else ``--consumer.auth-token`` (or, ours,
  ``--consumer.auth-token-file``) is sent with every request;
  :func:`shard_selector_option` adds ``-l/--selector`` with help about shards.
- :class:`ShardClient` calls a consumer process's ``consumer.Shard`` API, as
  Gazette's ``consumer/shard_api.go`` helpers do, each request with a token of
  the claims Gazette's ``consumer/protocol/auth.go`` client asks for (List:
  LIST of its selector; Stat, GetHints: READ of ``id=<shard>``; Apply: APPLY;
  Unassign: APPLY of the shards' ids): every response is validated
  and a non-OK status is an error; :meth:`ShardClient.apply` sends changes in
  batches of ``--max-txn-size``.
- :func:`pick_first_hints`: the hints a recovery starts from (primary, else
  the newest backup, else none), as Gazette's ``PickFirstHints``.

Errors, each one line on stderr and exit status 1 (they are click exceptions)::

    ShardsError (click.ClickException)
    ├── ShardRPCError          the RPC failed (transport, or a gRPC status): .method, .code
    ├── ShardStatusError       the consumer answered a non-OK Status: .method, .status
    ├── JournalReferenceError  a shard names a journal that is missing or of the wrong
    │                          content type: .shard, .field
    ├── UncoveredFragmentError prune found a fragment no hints cover that isn't persisted
    │                          yet (a shard using the log isn't selected): .journal, .fragment
    └── RecoveryError          a recovery log or its hints can't be played or pruned
                               (the recoverylog error is its __cause__)

Usage::

    async with shards_api.ShardClient(address) as sc:
        resp = await sc.list_shards(pb.parse_selector("id=shard-000"))
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import click
import grpc

from gazette.broker import protocol as pb
from gazette.broker.protocol import auth, dial
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc
from gazette.gazctl import options

__all__ = [
    "ConsumerAddress",
    "JournalReferenceError",
    "RecoveryError",
    "ShardClient",
    "ShardRPCError",
    "ShardStatusError",
    "ShardsError",
    "UncoveredFragmentError",
    "consumer_address",
    "pick_first_hints",
    "shard_selector_option",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Seconds an RPC of a command may take.
RPC_TIMEOUT = 30.0
#: Lifetime of the tokens signed for a request (Gazette's client: a minute).
TOKEN_LIFETIME = 60.0


class ShardsError(click.ClickException):
    """Base of the errors of the ``gazctl shards`` commands."""


class ShardRPCError(ShardsError):
    """A Shard RPC failed before the consumer answered with a Status."""

    def __init__(self, method: str, address: str, code: grpc.StatusCode, details: str) -> None:
        self.method = method
        self.code = code
        hint = ""
        if code == grpc.StatusCode.UNAVAILABLE:
            hint = " (is a consumer running there? see --consumer.address / CONSUMER_ADDRESS)"
        super().__init__(f"{method} {address}: {code.name}: {details}{hint}")


class ShardStatusError(ShardsError):
    """The consumer answered a Shard RPC with a Status other than OK."""

    def __init__(self, method: str, status: int, detail: str = "") -> None:
        self.method = method
        self.status = status
        what = f" {detail}" if detail else ""
        name = pc.Status.Name(status)  # type: ignore[arg-type]
        super().__init__(f"{method}{what}: {name}{_status_hint(status)}")


def _status_hint(status: int) -> str:
    if status == pc.Status.ETCD_TRANSACTION_FAILED:
        return (
            " (a shard's revision is not its current one: it was changed since it was"
            " listed, a created shard exists already, or a deleted one does not; list"
            " the shards again, or use revision -1 to apply regardless)"
        )
    if status == pc.Status.SHARD_NOT_FOUND:
        return " (no such shard: see `gazctl shards list`)"
    return ""


class JournalReferenceError(ShardsError):
    """A shard's source or recovery log is not a journal it could use."""

    def __init__(self, shard: str, field: str, reason: str) -> None:
        self.shard = shard
        self.field = field
        super().__init__(f"{shard}: {field}: {reason}")


class UncoveredFragmentError(ShardsError):
    """A fragment of a recovery log that no hints cover is not persisted yet."""

    def __init__(self, journal: str, fragment: pb.Fragment) -> None:
        self.journal = journal
        self.fragment = fragment
        super().__init__(
            f"{journal}: fragment {fragment.begin}-{fragment.end} is not persisted yet, but no"
            " hints cover it: does the selector include every shard that uses this log?"
            " (nothing was deleted)"
        )


class RecoveryError(ShardsError):
    """A shard's recovery log or hints could not be played or pruned."""

    def __init__(self, shard: str, error: rl.errors.RecoveryLogError) -> None:
        self.shard = shard
        super().__init__(f"shard {shard}: {error}")


class ConsumerAddress(str):
    """``--consumer.address``, carrying the credentials of ``--consumer.auth-*``.

    A ``str`` so that every command keeps taking ``address: str`` and handing
    it to :class:`ShardClient`, which picks the credentials up from it.
    """

    credentials: auth.Authorizer
    #: ``--consumer.cert-file`` / ``--consumer.cert-key-file`` / ``--consumer.trusted-ca-file``:
    #: the TLS of an ``https://`` consumer address.
    tls: dial.TLS

    def __new__(
        cls,
        address: str,
        credentials: auth.Authorizer | None = None,
        tls: dial.TLS | None = None,
    ) -> ConsumerAddress:
        out = super().__new__(cls, address)
        out.credentials = credentials or auth.NoopAuth()
        out.tls = tls or dial.TLS()
        return out


def consumer_address(fn: F) -> F:
    """Add ``--consumer.address`` and ``--consumer.auth-*`` as an ``address`` argument.

    The command gets a :class:`ConsumerAddress`; a key that doesn't decode or a
    token file without a token is a usage error naming the flag.
    """
    params = [
        click.option(
            "--consumer.address",
            "address",
            envvar="CONSUMER_ADDRESS",
            default="http://localhost:8080",
            show_default=True,
            help="Service address of a consumer process of the application (env CONSUMER_ADDRESS).",
        ),
        click.option(
            "--consumer.auth-keys",
            "consumer_auth_keys",
            envvar="CONSUMER_AUTH_KEYS",
            default="",
            help="Whitespace or comma separated, base64-encoded keys: the first signs a "
            "token for each request to the consumer, scoped to what it needs (env "
            "CONSUMER_AUTH_KEYS). Wins over --consumer.auth-token.",
        ),
        click.option(
            "--consumer.auth-token",
            "consumer_auth_token",
            envvar="CONSUMER_AUTH_TOKEN",
            default="",
            help="Bearer token sent with every request to the consumer (env CONSUMER_AUTH_TOKEN).",
        ),
        click.option(
            "--consumer.auth-token-file",
            "consumer_auth_token_file",
            envvar="CONSUMER_AUTH_TOKEN_FILE",
            default="",
            type=click.Path(dir_okay=False),
            help="File holding the consumer's bearer token (e.g. a mounted secret), used when "
            "--consumer.auth-token is not given (env CONSUMER_AUTH_TOKEN_FILE).",
        ),
    ]
    params += [
        click.option(
            f"--consumer.{name}",
            f"consumer_{name.replace('-', '_')}",
            envvar=f"CONSUMER_{name.upper().replace('-', '_')}",
            default="",
            type=click.Path(dir_okay=False),
            help=f"{text} (env CONSUMER_{name.upper().replace('-', '_')}).",
        )
        for name, text in (
            ("cert-file", "PEM client certificate presented to an https:// consumer"),
            ("cert-key-file", "PEM private key of --consumer.cert-file"),
            ("trusted-ca-file", "PEM CA of the consumer's certificate (default: the root pool)"),
        )
    ]

    @functools.wraps(fn)
    def wrapper(
        address: str,
        consumer_auth_keys: str,
        consumer_auth_token: str,
        consumer_auth_token_file: str,
        consumer_cert_file: str,
        consumer_cert_key_file: str,
        consumer_trusted_ca_file: str,
        **kwargs: Any,
    ) -> Any:
        if not consumer_auth_keys and not consumer_auth_token and consumer_auth_token_file:
            consumer_auth_token = options.read_token_file(
                consumer_auth_token_file, "--consumer.auth-token-file"
            )
        try:
            credentials = dial.credentials(consumer_auth_keys, consumer_auth_token)
        except pb.AuthorizationError as e:
            raise click.BadParameter(str(e), param_hint="'--consumer.auth-keys'") from None
        tls = options.check_tls(
            consumer_cert_file, consumer_cert_key_file, consumer_trusted_ca_file, "--consumer"
        )
        return fn(address=ConsumerAddress(address, credentials, tls), **kwargs)

    for param in reversed(params):
        wrapper = param(wrapper)
    return wrapper  # type: ignore[return-value]


_SELECTOR_HELP = (
    "Label selector of shards, on their labels and the 'id' meta-label, e.g. "
    "'id=chunks-part-000', 'id in (a, b)', 'app=word-count, !canary'."
)


def shard_selector_option(required: bool) -> Callable[[F], F]:
    """Add ``-l/--selector`` (a label selector of shards) as a ``selector`` argument."""
    return click.option("-l", "--selector", required=required, default="", help=_SELECTOR_HELP)


class ShardClient:
    """The ``consumer.Shard`` API of the consumer process at ``address``."""

    def __init__(self, address: str, credentials: auth.Authorizer | None = None) -> None:
        self.address = str(address)
        self._address = address
        #: Signs (or holds) the token of each request: given, else the address's own.
        self.credentials: auth.Authorizer = (
            credentials or getattr(address, "credentials", None) or auth.NoopAuth()
        )
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None

    async def __aenter__(self) -> ShardClient:
        tls = getattr(self._address, "tls", None) or dial.TLS()
        self._channel = dial.channel(self.address, dial.DialConfig(tls=tls))
        self._stub = pc_grpc.ShardStub(self._channel)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def _claims(self, method: str, request: Any) -> auth.Claims:
        """What a request needs, as Gazette's AuthShardClient asks for it."""
        sel = pb.LabelSelector()
        if method == "List":
            return auth.Claims(auth.Capability.LIST, request.selector)
        if method in ("Stat", "GetHints"):
            sel.include.labels.add(name="id", value=request.shard)
            return auth.Claims(auth.Capability.READ, sel)
        if method == "Unassign":
            for shard in sorted(set(request.shards)):
                sel.include.labels.add(name="id", value=shard)
        return auth.Claims(auth.Capability.APPLY, sel)

    async def _call(self, method: str, request: Any, detail: str = "") -> Any:
        """Call ``method``; a failed RPC, a non-OK Status or an invalid response raise."""
        assert self._stub is not None, "use ShardClient as `async with`"
        metadata = self.credentials.authorize(self._claims(method, request), TOKEN_LIFETIME)
        try:
            resp = await getattr(self._stub, method)(
                request, timeout=RPC_TIMEOUT, metadata=metadata or None
            )
        except grpc.aio.AioRpcError as e:
            raise ShardRPCError(method, self.address, e.code(), e.details() or "") from e
        if resp.status != pc.Status.OK:
            raise ShardStatusError(method, resp.status, detail)
        pc.validate(resp)
        return resp

    async def list_shards(self, selector: pb.LabelSelector) -> pc.ListResponse:
        """The shards ``selector`` selects (on their labels and ``id``), ordered on id."""
        resp: pc.ListResponse = await self._call("List", pc.ListRequest(selector=selector))
        return resp

    async def stat(self, shard: str) -> pc.StatResponse:
        """The offsets ``shard``'s primary has read (and committed) through, per journal."""
        resp: pc.StatResponse = await self._call("Stat", pc.StatRequest(shard=shard), shard)
        return resp

    async def apply(self, request: pc.ApplyRequest, max_txn_size: int = 0) -> pc.ApplyResponse:
        """Apply ``request`` in one etcd transaction, or in batches of ``max_txn_size``.

        Batches are applied in order and the first failure stops the rest (those
        before it stay applied), as Gazette's ``ApplyShardsInBatches``.
        """
        changes = list(request.changes)
        size = max_txn_size or max(1, len(changes))
        resp = pc.ApplyResponse()
        for i in range(0, max(1, len(changes)), size):
            batch = pc.ApplyRequest(changes=changes[i : i + size])
            detail = ""
            if len(changes) > size:
                detail = f"(changes {i}..{i + len(batch.changes) - 1} of {len(changes)})"
            resp = await self._call("Apply", batch, detail)
        return resp

    async def get_hints(self, shard_id: str) -> pc.GetHintsResponse:
        """The primary and backup recovery-log hints of ``shard_id``, as etcd holds them."""
        resp: pc.GetHintsResponse = await self._call("GetHints", pc.GetHintsRequest(shard=shard_id))
        if resp.status != pc.Status.OK:
            raise ShardStatusError("GetHints", resp.status, shard_id)
        return resp

    async def unassign(
        self, shards: list[str], *, only_failed: bool, dry_run: bool
    ) -> pc.UnassignResponse:
        resp: pc.UnassignResponse = await self._call(
            "Unassign",
            pc.UnassignRequest(shards=shards, only_failed=only_failed, dry_run=dry_run),
        )
        return resp


def pick_first_hints(resp: pc.GetHintsResponse, log: str) -> tuple[rl.FSMHints, str]:
    """The hints to recover from, and which they are: ``primary``, ``backup N`` or ``none``.

    Without any, playback starts at the beginning of ``log``.
    """
    if resp.primary_hints.HasField("hints"):
        return resp.primary_hints.hints, "primary"
    for i, backup in enumerate(resp.backup_hints):
        if backup.HasField("hints"):
            return backup.hints, f"backup {i}"
    return rl.FSMHints(log=log), "none"
