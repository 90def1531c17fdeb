"""One gRPC channel to an etcd cluster: member failover, TLS, and etcd auth tokens.

:class:`EtcdChannel` looks like a ``grpc.aio.Channel`` to the generated etcd
stubs (``aetcd.rpc``) and to ``aetcd.Client``, and adds what they lack:

- **Several members.** It holds one real channel per ``--etcd.address``
  endpoint and sends each call to the current one. A member whose channel is
  in ``TRANSIENT_FAILURE``, or whose call failed ``UNAVAILABLE``, is passed
  over for the next. Unary calls that surely did not reach etcd (no
  connection), or that are safe to repeat (reads, authentication), are retried
  on the next member; others fail, and their callers retry as they do after
  any etcd failure. Streams (watches, lease keep-alives) open on the current
  member and are restarted by their owners.

  Why not one channel over many addresses? grpcio (Python) has no pluggable
  resolvers, and its static ``ipv4:a,b`` targets take IP literals only: DNS
  names of members (a StatefulSet's pods, whose IPs change as they restart)
  would be resolved once and go stale, and TLS would check every member's
  certificate against one authority. A channel per member keeps gRPC's own
  DNS re-resolution and per-host certificate checks. (etcd's Go client, which
  Gazette uses, registers a resolver of its own with grpc-go instead.)

- **TLS**: ``https://`` endpoints are dialed with ``grpc.ssl_channel_credentials``
  (the CA of ``--etcd.trusted-ca-file``, the client certificate of
  ``--etcd.cert-file`` / ``--etcd.cert-key-file``).

- **etcd auth**: with a :class:`TokenAuth`, every call carries the ``token``
  metadata etcd's ``Authenticate`` RPC hands out. etcd's simple tokens expire
  after ``--auth-token-ttl`` (5 minutes) without use, and are lost when the
  member restarts: a unary call refused for its token ("invalid auth token",
  "user name is empty", "revision of auth store is old") re-authenticates
  once and is retried. A stream that ends with such an error drops the token,
  so its owner's retry authenticates afresh (etcd 3.5 checks no token on lease
  keep-alives; this covers servers that do). etcd checks a watch's token only
  when the watch is created (an existing watch outlives its token); a refused
  create comes back as a cancelled watch, which :class:`~gazette.keyspace.KeySpace`
  answers by re-authenticating and watching again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import aetcd.rpc
import grpc

from gazette.keyspace import errors
from gazette.keyspace import options as opts

__all__ = ["EtcdChannel", "TokenAuth", "is_token_error"]

log = logging.getLogger(__name__)

_AUTHENTICATE = "/etcdserverpb.Auth/Authenticate"

# Unary methods that change nothing, so repeating them on another member after an
# ambiguous failure (the request may have reached the first) is harmless.
_REPEATABLE = frozenset(
    {
        "/etcdserverpb.KV/Range",
        "/etcdserverpb.Lease/LeaseTimeToLive",
        "/etcdserverpb.Lease/LeaseLeases",
        "/etcdserverpb.Cluster/MemberList",
        "/etcdserverpb.Maintenance/Status",
        "/etcdserverpb.Maintenance/Alarm",
        "/etcdserverpb.Auth/AuthStatus",
        _AUTHENTICATE,
    }
)

# etcd's refusals of a call's token (its rpctypes ErrGRPCInvalidAuthToken,
# ErrGRPCUserEmpty, ErrGRPCAuthOldRevision): a fresh token fixes each of them.
_TOKEN_ERRORS = (
    "invalid auth token",
    "user name is empty",
    "revision of auth store is old",
)


def is_token_error(e: grpc.aio.AioRpcError) -> bool:
    """Whether etcd refused a call because of its auth token (a fresh one may pass)."""
    details = e.details() or ""
    return e.code() in (
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.INVALID_ARGUMENT,
    ) and any(t in details for t in _TOKEN_ERRORS)


def _not_sent(e: grpc.aio.AioRpcError) -> bool:
    # gRPC's words for a call that found no connection to send itself on.
    details = e.details() or ""
    return e.code() == grpc.StatusCode.UNAVAILABLE and (
        "failed to connect" in details or "DNS resolution failed" in details
    )


class TokenAuth:
    """The auth token of one etcd user, fetched when needed and shared by all calls.

    ``password`` is called at each authentication (``--etcd.password-file`` is
    re-read). Concurrent refreshes of the same stale token make one
    ``Authenticate`` call.
    """

    def __init__(self, username: str, password: Callable[[], str]) -> None:
        self.username = username
        self._password = password
        self.token: str | None = None
        self._lock: asyncio.Lock | None = None
        #: How many tokens etcd handed out (tests and logs).
        self.authentications = 0

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("token", self.token),) if self.token else ()

    def drop(self, token: str | None) -> None:
        """Forget ``token`` (if still current): the next call authenticates first."""
        if token is not None and self.token == token:
            self.token = None

    async def ensure(self, channel: EtcdChannel, rpc_timeout: float | None) -> str:
        """The current token, authenticating first when there is none.

        ``rpc_timeout`` is the gRPC deadline of an ``Authenticate`` call.
        """
        token = self.token
        if token is not None:
            return token
        return await self.refresh(channel, None, rpc_timeout)

    async def refresh(
        self, channel: EtcdChannel, stale: str | None, rpc_timeout: float | None
    ) -> str:
        """A token other than ``stale``: the current one if it is newer, else a new one."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.token is not None and self.token != stale:
                return self.token
            request = aetcd.rpc.AuthenticateRequest(name=self.username, password=self._password())
            try:
                resp = await channel.unary_unary(
                    _AUTHENTICATE,
                    request_serializer=aetcd.rpc.AuthenticateRequest.SerializeToString,
                    response_deserializer=aetcd.rpc.AuthenticateResponse.FromString,
                    _authenticated=False,
                )(request, timeout=rpc_timeout)
            except grpc.aio.AioRpcError as e:
                if _auth_off(e):
                    # Calls go without a token until etcd turns auth on (then they are
                    # refused for it, and authenticate): a process may start before a
                    # setup job enables auth (the chart's bundled etcd).
                    if self.token != "":
                        log.warning(
                            "etcd has authentication off: calling without signing in as %r",
                            self.username,
                        )
                    self.token = ""
                    return self.token
                if e.code() in (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.PERMISSION_DENIED,
                    grpc.StatusCode.FAILED_PRECONDITION,
                ):
                    raise errors.EtcdAuthError(self.username, e.details() or e.code().name) from e
                raise
            self.token = str(resp.token)
            self.authentications += 1
            log.debug("authenticated to etcd as %r", self.username)
            return self.token


def _auth_off(e: grpc.aio.AioRpcError) -> bool:
    # etcd's answer to Authenticate while auth is disabled (rpctypes ErrGRPCAuthNotEnabled).
    return e.code() == grpc.StatusCode.FAILED_PRECONDITION and (
        "authentication is not enabled" in (e.details() or "")
    )


def _with_token(
    metadata: Sequence[tuple[str, str]] | None, token: str | None
) -> tuple[tuple[str, str], ...] | None:
    if not token:
        return tuple(metadata) if metadata is not None else None
    return (*(metadata or ()), ("token", token))


class EtcdChannel:
    """A ``grpc.aio.Channel`` look-alike over one real channel per etcd member.

    Built by :func:`gazette.keyspace.etcd.connect`; see the module docstring.
    """

    def __init__(
        self,
        endpoints: Sequence[opts.Endpoint],
        *,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        auth: TokenAuth | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = tuple(endpoints)
        self.auth = auth
        self._channels: list[grpc.aio.Channel] = []
        for ep in self.endpoints:
            if ep.tls:
                if credentials is None:
                    raise ValueError(f"{ep.url} needs TLS credentials")
                self._channels.append(grpc.aio.secure_channel(ep.target, credentials, options))
            else:
                self._channels.append(grpc.aio.insecure_channel(ep.target, options))
        self._current = 0
        self._calls: dict[tuple[int, str], Any] = {}

    # --- Choosing a member ----------------------------------------------------

    @property
    def current(self) -> opts.Endpoint:
        """The member calls go to now."""
        return self.endpoints[self._current]

    def _pick(self) -> int:
        """The current member, moving past those gRPC knows to be unreachable now."""
        n = len(self._channels)
        if n == 1:
            return 0
        for step in range(n):
            i = (self._current + step) % n
            state = self._channels[i].get_state(try_to_connect=True)
            if state != grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                if i != self._current:
                    self._switch(i, "unreachable")
                return i
        return self._current  # All down: keep trying the current one.

    def _failed(self, index: int, e: grpc.aio.AioRpcError) -> None:
        """A call to member ``index`` failed UNAVAILABLE: move on, if it is still current."""
        if len(self._channels) > 1 and index == self._current:
            self._switch((index + 1) % len(self._channels), e.details() or e.code().name)

    def _switch(self, index: int, why: str) -> None:
        log.warning(
            "etcd member %s failed (%s): switching to %s",
            self.endpoints[self._current].url,
            why,
            self.endpoints[index].url,
        )
        self._current = index

    def _multicallable(self, index: int, kind: str, method: str, ser: Any, deser: Any) -> Any:
        key = (index, method)
        call = self._calls.get(key)
        if call is None:
            factory = getattr(self._channels[index], kind)
            call = factory(method, request_serializer=ser, response_deserializer=deser)
            self._calls[key] = call
        return call

    # --- Calls ----------------------------------------------------------------

    async def _unary(
        self,
        method: str,
        ser: Any,
        deser: Any,
        authenticated: bool,
        request: Any,
        rpc_timeout: float | None,
        metadata: Sequence[tuple[str, str]] | None,
    ) -> Any:
        deadline = None if rpc_timeout is None else time.monotonic() + rpc_timeout
        auth = self.auth if authenticated else None
        reauthenticated = False
        members_tried = 0
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            token = await auth.ensure(self, left) if auth is not None else None
            index = self._pick()
            call = self._multicallable(index, "unary_unary", method, ser, deser)
            try:
                return await call(request, timeout=left, metadata=_with_token(metadata, token))
            except grpc.aio.AioRpcError as e:
                if auth is not None and not reauthenticated and is_token_error(e):
                    reauthenticated = True
                    log.info("etcd refused our auth token (%s): authenticating again", e.details())
                    await auth.refresh(self, token, left)
                    continue
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                self._failed(index, e)
                members_tried += 1
                if members_tried >= len(self._channels):
                    raise
                if not (method in _REPEATABLE or _not_sent(e)):
                    raise

    def _stream(
        self, kind: str, method: str, ser: Any, deser: Any, request: Any, kwargs: dict[str, Any]
    ) -> _StreamCall:
        token = self.auth.token if self.auth is not None else None
        index = self._pick()
        call = self._multicallable(index, kind, method, ser, deser)
        kwargs["metadata"] = _with_token(kwargs.get("metadata"), token)
        inner = call(request, **kwargs) if request is not None else call(**kwargs)
        return _StreamCall(inner, self, index, token)

    def _stream_failed(self, index: int, token: str | None, e: grpc.aio.AioRpcError) -> None:
        if self.auth is not None and is_token_error(e):
            self.auth.drop(token)
        elif e.code() == grpc.StatusCode.UNAVAILABLE:
            self._failed(index, e)

    # --- The grpc.aio.Channel surface the stubs use ----------------------------

    def unary_unary(
        self,
        method: str,
        request_serializer: Any = None,
        response_deserializer: Any = None,
        _registered_method: bool = False,
        _authenticated: bool = True,
    ) -> Callable[..., Any]:
        def call(
            request: Any,
            *,
            timeout: float | None = None,
            metadata: Sequence[tuple[str, str]] | None = None,
            **_: Any,
        ) -> Any:
            return self._unary(
                method,
                request_serializer,
                response_deserializer,
                _authenticated,
                request,
                timeout,
                metadata,
            )

        return call

    def unary_stream(
        self,
        method: str,
        request_serializer: Any = None,
        response_deserializer: Any = None,
        _registered_method: bool = False,
    ) -> Callable[..., Any]:
        return self._streaming("unary_stream", method, request_serializer, response_deserializer)

    def stream_unary(
        self,
        method: str,
        request_serializer: Any = None,
        response_deserializer: Any = None,
        _registered_method: bool = False,
    ) -> Callable[..., Any]:
        return self._streaming("stream_unary", method, request_serializer, response_deserializer)

    def stream_stream(
        self,
        method: str,
        request_serializer: Any = None,
        response_deserializer: Any = None,
        _registered_method: bool = False,
    ) -> Callable[..., Any]:
        return self._streaming("stream_stream", method, request_serializer, response_deserializer)

    def _streaming(
        self, kind: str, method: str, serializer: Any, deserializer: Any
    ) -> Callable[..., Any]:
        # Generated stubs pass the request (or request iterator) positionally.
        def call(request: Any = None, **kwargs: Any) -> _StreamCall:
            return self._stream(kind, method, serializer, deserializer, request, kwargs)

        return call

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._channels[self._current].get_state(try_to_connect)

    async def channel_ready(self) -> None:
        await self._channels[self._pick()].channel_ready()

    async def close(self, grace: float | None = None) -> None:
        for ch in self._channels:
            await ch.close(grace)

    async def __aenter__(self) -> EtcdChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _StreamCall:
    """A stream's call, reporting how it ended to its :class:`EtcdChannel`.

    Reads pass through; an error that ends the stream first tells the channel
    (a stale token is dropped, an unreachable member passed over), then is
    raised as it was.
    """

    def __init__(self, inner: Any, channel: EtcdChannel, index: int, token: str | None) -> None:
        self._inner = inner
        self._channel = channel
        self._index = index
        self._token = token

    def _report(self, e: grpc.aio.AioRpcError) -> None:
        self._channel._stream_failed(self._index, self._token, e)

    async def read(self) -> Any:
        try:
            return await self._inner.read()
        except grpc.aio.AioRpcError as e:
            self._report(e)
            raise

    async def write(self, request: Any) -> None:
        try:
            await self._inner.write(request)
        except grpc.aio.AioRpcError as e:
            self._report(e)
            raise

    async def _iterate(self) -> Any:
        try:
            async for msg in self._inner:
                yield msg
        except grpc.aio.AioRpcError as e:
            self._report(e)
            raise

    def __aiter__(self) -> Any:
        return self._iterate()

    def __await__(self) -> Any:
        # A stream-unary call is awaited for its one response.
        try:
            return (yield from self._inner.__await__())
        except grpc.aio.AioRpcError as e:
            self._report(e)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
