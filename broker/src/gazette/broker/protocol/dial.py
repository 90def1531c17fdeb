"""The dial seam: every gRPC channel and every gRPC server port of the brokers is made here.

Clients (:class:`gazette.broker.client.JournalClient`), a broker's channels to
its peers and to itself (the HTTP gateway), test seams and the broker's own
listening port all come through these functions, so that transport security
and credentials are decided in one place, as Gazette decides them:

- **Dialing**: the endpoint's scheme picks the transport (Gazette's
  ``NewDispatchedCredentials``, ``broker/protocol/dispatcher.go``):
  ``https://`` endpoints are dialed with TLS, using :attr:`DialConfig.tls`
  (a client certificate to present, and the CA that signs the servers'
  certificates; without one the default root pool), ``http://`` and
  ``unix://`` ones in the clear. A broker's server certificate is checked
  against the endpoint's host, so it names (SAN) every host or IP address
  brokers are dialed by.
- **Native calls**: :func:`native_channels` gives a client the native data
  plane's channels (:mod:`gazette.dataplane`, where it is installed), which carry
  its appends and reads over tonic with the same TLS, with far fewer wake-ups of
  the event loop than grpc.aio's.
- **Listening**: a broker's port is served by the native data plane
  (:func:`listen_native`, :mod:`gazette.dataplane`), which forwards what it
  does not serve itself to the broker's gRPC server on a private Unix socket;
  other servers (consumers, tests) listen with :func:`listen`.
  :attr:`ListenConfig.tls` set serves TLS with its certificate;
  with a CA too, every client must present a certificate it signed (Gazette's
  ``--broker.server-ca-file``, ``server/server.go`` ``BuildTLSConfig``).
  :func:`server_ssl_context` is the same for an HTTP/1 port (the gateway).

:class:`TLS` names PEM files; they are read when a channel or port is made,
and a file that can't be read or parsed raises ``pb.TLSConfigError`` naming it.

Per-call credentials are bearer tokens (:mod:`gazette.broker.protocol.auth`):
:func:`credentials` turns a client's ``--broker.auth-keys`` or
``--broker.auth-token`` into the authorizer whose metadata goes with each of
its calls, as Gazette's clients choose it (keys sign a token per call, scoped
to that call's journal and capability; else the static token; else nothing).

Usage::

    from gazette.broker.protocol import dial

    channel = dial.channel("http://broker-0:8080", dial.DialConfig(max_message_size=8 << 20))
    server = dial.server(dial.ListenConfig(max_receive_message_size=4 << 20))
    port = dial.listen(server, "127.0.0.1", 0)

    tls = dial.TLS(cert_file="node.crt", key_file="node.key", ca_file="ca.crt")
    secure = dial.ListenConfig(tls=tls)
    port = dial.listen(dial.server(secure), "127.0.0.1", 0, secure)
    channel = dial.channel(f"https://127.0.0.1:{port}", dial.DialConfig(tls=tls))

etcd is dialed by its own client library (``gazette.keyspace.connect``): it is
not a broker endpoint and has its own settings.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import inspect
import os
import shutil
import ssl
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

from gazette.broker.protocol import auth, errors, fragments

if TYPE_CHECKING:
    from gazette import dataplane

__all__ = [
    "CORE_TRANSPORT_FAILURE",
    "TLS",
    "DialConfig",
    "ListenConfig",
    "NativeChannels",
    "NativePort",
    "channel",
    "client_ssl_context",
    "code_of",
    "credentials",
    "listen",
    "listen_native",
    "native_channels",
    "rpc_code",
    "server",
    "server_ssl_context",
]


@dataclasses.dataclass(frozen=True)
class TLS:
    """PEM files of one side of TLS connections (paths; "" for none).

    As a server's: ``cert_file`` and ``key_file`` are served (both required),
    and ``ca_file``, when set, signs the certificates every client must present.
    As a client's: ``cert_file`` and ``key_file`` (optional, together) are
    presented to servers that ask, and ``ca_file`` signs the servers'
    certificates (default: the root pool gRPC ships with).
    """

    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise errors.TLSConfigError(
                "a TLS certificate and its key go together: "
                f"certificate {self.cert_file or '(none)'}, key {self.key_file or '(none)'}"
            )

    def pem(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(certificate chain, private key, CA) as read from the files (None if unset).

        Raises ``pb.TLSConfigError`` naming a file that can't be read, that
        holds no PEM certificate (or key), or a key that isn't its certificate's.
        """
        cert, key, ca = (_read(path) for path in (self.cert_file, self.key_file, self.ca_file))
        if cert is not None:
            # Let OpenSSL parse the pair now: gRPC would only say "handshake failed" later.
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            try:
                ctx.load_cert_chain(self.cert_file, self.key_file)
            except (ssl.SSLError, ValueError) as e:
                raise errors.TLSConfigError(
                    f"TLS certificate {self.cert_file} and key {self.key_file} "
                    f"don't load as a pair: {_why(e)}",
                    self.cert_file,
                ) from e
        if ca is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            try:
                ctx.load_verify_locations(cadata=ca.decode("ascii", "replace"))
            except (ssl.SSLError, ValueError) as e:
                raise errors.TLSConfigError(
                    f"TLS CA file {self.ca_file} holds no usable certificate: {_why(e)}",
                    self.ca_file,
                ) from e
        return cert, key, ca


def _read(path: str) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise errors.TLSConfigError(f"reading {path}: {e.strerror or e}", path) from None


def _why(e: Exception) -> str:
    return str(getattr(e, "reason", None) or e)


@dataclasses.dataclass(frozen=True)
class DialConfig:
    """How channels to broker endpoints are made."""

    max_message_size: int | None = None
    """Largest message sent or received (None: gRPC's defaults)."""
    fast_reconnect: bool = True
    """Reconnect promptly when a broker comes back (gRPC backs off to 2 min by default)."""
    tls: TLS = TLS()
    """Used for ``https://`` endpoints: the client certificate and the servers' CA."""


# Connections a port serves at once, unless told (the native front door's default too).
DEFAULT_MAX_CONNECTIONS = 4096


@dataclasses.dataclass(frozen=True)
class ListenConfig:
    """How a broker's gRPC server takes connections."""

    max_receive_message_size: int = 4 << 20
    """Largest inbound message gRPC itself accepts."""
    reuse_port: bool = False
    """SO_REUSEPORT: off, so that two brokers never share (and steal) a port."""
    tls: TLS | None = None
    """Serve TLS with this certificate (None: plaintext); its CA makes client certificates required."""
    max_connections: int | None = None
    """Connections a port serves at once (None: :data:`DEFAULT_MAX_CONNECTIONS`)."""
    handshake_timeout: float = 10.0
    """Seconds a new connection has to send its HTTP/2 preface (and TLS handshake)."""
    process: str = "broker"
    """What serves the port (``broker``, ``consumer``): refusals name its flags."""

    def __post_init__(self) -> None:
        if self.tls is not None and not self.tls.cert_file:
            raise errors.TLSConfigError("serving TLS needs a certificate and its key")


def channel(endpoint: str, config: DialConfig = DialConfig()) -> grpc.aio.Channel:
    """A channel to a broker ``endpoint`` (``http://host:port``, ``https://host:port``,
    ``unix:///path``); ``https://`` dials TLS with ``config.tls``.

    Raises ``pb.TLSConfigError`` if an ``https://`` endpoint's TLS files don't load.
    """
    options: list[tuple[str, Any]] = []
    if config.max_message_size is not None:
        options += [
            ("grpc.max_receive_message_length", config.max_message_size),
            ("grpc.max_send_message_length", config.max_message_size),
        ]
    if config.fast_reconnect:
        options += [
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ]
    target = fragments.endpoint_grpc_addr(endpoint)
    if not fragments.endpoint_uses_tls(endpoint):
        return grpc.aio.insecure_channel(target, options=options)
    cert, key, ca = config.tls.pem()
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )
    return grpc.aio.secure_channel(target, creds, options=options)


# What grpc-core says of a call cut off with its connection when no status came
# (a peer killed while the call was sending).
CORE_TRANSPORT_FAILURE = "Internal error from Core"


def rpc_code(e: grpc.RpcError) -> grpc.StatusCode:
    """The status code of a failed call, as Gazette's Go peers would see it.

    grpc-core ends a call whose connection broke mid-send with INTERNAL
    "Internal error from Core" where Go's gRPC says UNAVAILABLE (seen in the
    chaos suite's SIGKILLs, between brokers and at clients): it is read as
    UNAVAILABLE, which clients retry, rather than as a server's own failure.
    """
    return _as_go_reads(e.code(), e.details())


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def code_of(number: int, details: str = "") -> grpc.StatusCode:
    """The ``grpc.StatusCode`` of a status code ``number`` and its details (a native
    call's failure), read as :func:`rpc_code` reads a grpc.aio call's."""
    return _as_go_reads(_CODES.get(number, grpc.StatusCode.UNKNOWN), details)


def _as_go_reads(code: grpc.StatusCode, details: str | None) -> grpc.StatusCode:
    if code == grpc.StatusCode.INTERNAL and details == CORE_TRANSPORT_FAILURE:
        return grpc.StatusCode.UNAVAILABLE
    return code


class NativeChannels:
    """A client's channels of the native data plane, for its appends and reads
    (:func:`native_channels`).

    Endpoints are dialed as :func:`channel` dials them: ``https://`` with TLS of
    the :class:`DialConfig` (files read on the first such endpoint), ``http://``
    in the clear. ``unix://`` endpoints stay with grpc.aio: :meth:`append` gives None.
    """

    def __init__(self, native: dataplane.ClientChannels, config: DialConfig) -> None:
        self._native = native
        self._config = config
        self._targets: dict[str, str] = {}
        self._tls_loaded = False

    def append(
        self, endpoint: str, first: bytes, metadata: Sequence[tuple[str, str]] | None
    ) -> dataplane.AppendCall | None:
        """Start an Append RPC to ``endpoint`` with its serialized first message
        (None: this endpoint is grpc.aio's). Raises ``pb.TLSConfigError`` if an
        ``https://`` endpoint's TLS files don't load."""
        target = self._targets.get(endpoint)
        if target is None:
            target = self._targets[endpoint] = self._target(endpoint)
        if not target:
            return None
        return self._native.append(target, first, metadata)

    def read(
        self, endpoint: str, request: bytes, metadata: Sequence[tuple[str, str]] | None
    ) -> dataplane.ReadCall | None:
        """Start a Read RPC of a serialized ReadRequest, as :meth:`append` starts an append."""
        target = self._targets.get(endpoint)
        if target is None:
            target = self._targets[endpoint] = self._target(endpoint)
        if not target:
            return None
        return self._native.read(target, request, metadata)

    def _target(self, endpoint: str) -> str:
        address = fragments.endpoint_grpc_addr(endpoint)
        if address.startswith("unix://"):
            return ""
        if not fragments.endpoint_uses_tls(endpoint):
            return "http://" + address
        if not self._tls_loaded:
            cert, key, ca = self._config.tls.pem()
            self._native.set_tls(ca, cert, key)
            self._tls_loaded = True
        return "https://" + address

    def close(self) -> None:
        """Forget the channels: calls under way keep theirs."""
        self._native.close()


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    # On the future's loop, called soon after the native runtime answered: its
    # awaiter may have been cancelled meanwhile.
    if not future.done():
        future.set_result(value)


def native_channels(config: DialConfig = DialConfig()) -> NativeChannels | None:
    """Channels of the native data plane for a client's appends and reads, dialed as
    ``config`` says.

    None where :mod:`gazette.dataplane` is not installed (a client without the
    ``gazette-broker[server]`` extra): the client's calls all go through grpc.aio then.
    """
    try:
        from gazette import dataplane
    except ImportError:
        return None
    # The runtime's thread must be gone before the interpreter finalizes: were it to
    # take the GIL then (to log a connection closing), the process would abort (found
    # with one-shot gazctl appends over TLS). Registered once however many clients.
    atexit.unregister(dataplane.ClientChannels.shutdown)
    atexit.register(dataplane.ClientChannels.shutdown)
    # grpc's default limit of messages received, where the config sets none.
    limit = config.max_message_size if config.max_message_size is not None else 4 << 20
    return NativeChannels(dataplane.ClientChannels(_settle, limit), config)


def credentials(auth_keys: str = "", auth_token: str = "") -> auth.Authorizer:
    """The authorizer of a client's calls: keys if given, else a static token, else none.

    Raises ``pb.AuthorizationError`` if ``auth_keys`` don't decode.
    """
    return auth.new_authorizer(auth_keys, auth_token)


class _Malformed:
    """What a request that doesn't decode becomes, for its handler to refuse."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class _RefuseMalformed(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Answers a single request message that doesn't decode INVALID_ARGUMENT, naming its type.

    grpc-python decodes a request before its handler runs and answers a failure
    UNKNOWN ("Unexpected <class 'DecodeError'>"). The decoder is wrapped to hand the
    failure to the handler instead, which refuses it. Only RPCs of one request
    message: streamed requests are read by handlers of their own (a broker's, whose
    front door checks every message of them first).
    """

    async def intercept_service(
        self, continuation: Any, handler_call_details: grpc.HandlerCallDetails
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        decode = handler.request_deserializer

        def checked(data: bytes) -> Any:
            try:
                return decode(data)
            except Exception as e:  # noqa: BLE001 (protobuf's DecodeError, and any other)
                return _Malformed(f"malformed request message: {e}")

        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary_unary(request: Any, context: Any) -> Any:
                if isinstance(request, _Malformed):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
                return await inner(request, context)

            return handler._replace(request_deserializer=checked, unary_unary=unary_unary)
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream
            # Of the same shape as the handler: grpc.aio iterates an async generator's
            # responses, and awaits a coroutine that writes them with context.write.
            if inspect.isasyncgenfunction(inner_stream):

                async def responses(request: Any, context: Any) -> Any:
                    if isinstance(request, _Malformed):
                        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
                    async for response in inner_stream(request, context):
                        yield response

                return handler._replace(request_deserializer=checked, unary_stream=responses)

            async def writes(request: Any, context: Any) -> Any:
                if isinstance(request, _Malformed):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
                return await inner_stream(request, context)

            return handler._replace(request_deserializer=checked, unary_stream=writes)
        return handler


def server(config: ListenConfig = ListenConfig()) -> grpc.aio.Server:
    """A gRPC server, before any port is added (see :func:`listen`)."""
    return grpc.aio.server(
        interceptors=[_RefuseMalformed()],
        options=[
            ("grpc.max_receive_message_length", config.max_receive_message_size),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 1 if config.reuse_port else 0),
            # Behind the native front door the peer is a Unix socket away: window
            # probing would settle on small windows there, and each window update
            # is a wake-up of this process. Wide fixed windows instead.
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", 8 << 20),
            # Where clients reach this server directly (a consumer's port), what the
            # native front door enforces on a broker's: connections that send nothing
            # or half a handshake are closed after 10 s (gRPC's default: 120 s), and
            # connections past the limit are closed as they arrive.
            ("grpc.server_handshake_timeout_ms", round(config.handshake_timeout * 1000)),
            (
                "grpc.max_allowed_incoming_connections",
                config.max_connections or DEFAULT_MAX_CONNECTIONS,
            ),
        ],
    )


def listen(
    srv: grpc.aio.Server, host: str, port: int, config: ListenConfig = ListenConfig()
) -> int:
    """Add a listening port of ``host`` (``[::]`` for all) to ``srv``; the bound port, 0 if none.

    With ``config.tls`` the port serves TLS (client certificates required when
    it has a CA). Raises ``pb.TLSConfigError`` if its files don't load.
    """
    address = f"{host}:{port}"
    if config.tls is None:
        return int(srv.add_insecure_port(address))
    cert, key, ca = config.tls.pem()
    assert cert is not None and key is not None  # ListenConfig checked.
    creds = grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )
    return int(srv.add_secure_port(address, creds))


class NativePort:
    """A broker's listening port, served by the native data plane (:func:`listen_native`)."""

    def __init__(
        self, front: dataplane.FrontDoor, topology: dataplane.Topology, directory: str
    ) -> None:
        self._front = front
        self._directory = directory
        self.port: int = front.port
        """The bound port."""
        self.http_socket = os.path.join(directory, "http.sock")
        """Where an HTTP/1.1 server listens for what the port gets that isn't gRPC."""
        self.topology = topology
        """What the data plane knows of the cluster; the broker publishes into it."""

    def plane(self, wake_fd: int, **settings: Any) -> dataplane.Plane:
        """The native data plane on this port's threads (see gazette.broker.server.native)."""
        from gazette import dataplane  # The gazette-broker[server] extra.

        return dataplane.Plane(self._front, self.topology, wake_fd, **settings)

    def set_auth(self, keys: auth.KeyedAuth | auth.NoopAuth) -> None:
        """Refuse gRPC requests at the door, unread, unless their bearer token is
        signed by one of ``keys`` (NoopAuth: check nothing). The server still
        checks each token's claims."""
        if isinstance(keys, auth.KeyedAuth):
            self._front.set_auth_keys(list(keys.keys), keys.allow_missing)
        else:
            self._front.set_auth_keys(None)

    def stats(self) -> dict[str, int]:
        """Connections ``open``, and totals ``refused`` (at the limit), ``silent``
        (nothing sent in time) and ``accept_errors``."""
        return self._front.stats()

    async def stop(self, grace: float) -> None:
        """Stop accepting; let open calls finish for up to ``grace`` seconds; close them."""
        try:
            await asyncio.to_thread(self._front.stop, grace)
        finally:
            shutil.rmtree(self._directory, ignore_errors=True)


def listen_native(
    srv: grpc.aio.Server | None, host: str, port: int, config: ListenConfig = ListenConfig()
) -> NativePort:
    """Serve ``host:port`` (port 0: any) natively, forwarding to ``srv`` what it doesn't serve.

    Without ``srv`` the port serves HTTP only (a broker's ``--broker.http-port``),
    and answers gRPC calls UNIMPLEMENTED.

    ``srv`` gets a private Unix socket (in a fresh 0700 directory, removed by
    :meth:`NativePort.stop`); the native front door owns the TCP port, with TLS
    when ``config.tls`` says so. Requests that aren't gRPC go to an HTTP/1.1
    server on :attr:`NativePort.http_socket` (the broker's gateway), once one
    listens there; until then they are answered 503. Raises ``pb.TLSConfigError`` naming a TLS file
    that doesn't load, ``OSError`` if the port can't be bound, and ``ImportError``
    when the data plane is not installed (the ``gazette-broker[server]`` extra).
    """
    try:
        from gazette import dataplane  # The gazette-broker[server] extra.
    except ImportError as e:
        raise ImportError(
            "a broker's port is served by its native data plane, which is not installed "
            "(pip install 'gazette-broker[server]'; from a checkout, make install)"
        ) from e
    base = tempfile.gettempdir()
    # A Unix socket's path holds at most 107 bytes: under a deep TMPDIR (a test's work
    # directory, say) ours would not fit, and /tmp always does.
    if len(os.path.join(base, "gazette-broker-xxxxxxxx", "grpc.sock")) > 100:
        base = "/tmp"
    directory = tempfile.mkdtemp(prefix="gazette-broker-", dir=base)
    try:
        socket_path: str | None = None
        if srv is not None:
            socket_path = os.path.join(directory, "grpc.sock")
            if not srv.add_insecure_port(f"unix:{socket_path}"):
                raise OSError(f"the gRPC server could not listen on {socket_path}")
        cert = key = ca = None
        if config.tls is not None:
            config.tls.pem()  # Named errors for files that don't load.
            cert, key = config.tls.cert_file, config.tls.key_file
            ca = config.tls.ca_file or None
        front = dataplane.FrontDoor(
            host,
            port,
            socket_path,
            cert,
            key,
            ca,
            http_backend=os.path.join(directory, "http.sock"),
            max_connections=config.max_connections,
            process=config.process,
        )
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return NativePort(front, dataplane.Topology(), directory)


def server_ssl_context(config: ListenConfig) -> ssl.SSLContext | None:
    """The ``ssl`` context of an HTTP/1 port served as ``config`` says (None: plaintext).

    The broker's HTTP gateway serves its port with the broker's certificate and
    asks for client certificates as its gRPC port does (Gazette serves both on
    one TLS port). Raises ``pb.TLSConfigError`` if the files don't load.
    """
    if config.tls is None:
        return None
    config.tls.pem()  # Named errors for unreadable files.
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(config.tls.cert_file, config.tls.key_file)
    if config.tls.ca_file:
        ctx.load_verify_locations(config.tls.ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def client_ssl_context(tls: TLS = TLS()) -> ssl.SSLContext:
    """An ``ssl`` context of HTTPS requests to brokers (their gateways), as :func:`channel` dials.

    Raises ``pb.TLSConfigError`` if the files don't load.
    """
    tls.pem()
    ctx = ssl.create_default_context(cafile=tls.ca_file or None)
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return ctx
