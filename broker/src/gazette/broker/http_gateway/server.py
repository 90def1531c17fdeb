"""An HTTP/1.1 server (h11 over asyncio streams) for a broker's HTTP port.

It serves the journal gateway (:class:`~gazette.broker.http_gateway.gateway.Gateway`)
on every path, and the diagnostics ``/debug/ready`` and ``/debug/metrics``
when given a ``ready`` callable; a broker process serves it on its HTTP
port (grpcio's own port speaks only HTTP/2)::

    http = http_gateway.Server(lambda: ready, grpc_endpoint=endpoint)
    port = await http.start(host, http_port)
    ...
    await http.close()

Connections are kept alive between requests; a client that disconnects
cancels its blocking read. A request body that sends nothing for
:attr:`ServerConfig.body_timeout` (30 s by default) is answered 408: a PUT
whose body stalls, or a request whose ``Content-Length`` promises more than
it sends (or that is chunked and sends no chunks), doesn't hold its
connection or its append for ever. A request answered before its body was
read (a PUT the broker refused mid-body) gets ``Connection: close``; the
server then stops writing and drops what the client still sends for a moment
before closing, so the client reads the answer instead of a reset.

TLS is the dial seam's (:mod:`gazette.broker.protocol.dial`): with
:attr:`ServerConfig.listen_config` carrying TLS the port serves HTTPS (and
requires client certificates when it has a CA), and the gateway's own channel
to ``grpc_endpoint`` is dialed as :attr:`ServerConfig.dial_config` says (an
``https://`` endpoint with its TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import http
import logging
from collections.abc import Callable

import grpc
import h11
import prometheus_client as prom

from gazette.broker import protocol as pb
from gazette.broker.http_gateway import gateway
from gazette.broker.protocol import auth as auth_
from gazette.broker.protocol import dial

__all__ = ["Server", "ServerConfig"]

log = logging.getLogger(__name__)

_MAX_HEADERS = 16 * 1024
# The longest header field taken (nginx's default buffer for one line is 8 KiB): the
# gateway passes Authorization on as gRPC metadata, and the broker's port takes at
# most 16 KiB of those (HTTP/2's default header list size).
_MAX_FIELD = 8 * 1024
_READ_SIZE = 64 * 1024
_METHODS = "GET, HEAD, PUT"


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Settings of the HTTP server of a broker's HTTP port."""

    #: Seconds a request body may send nothing before the request is answered 408.
    body_timeout: float = 30.0
    #: Seconds a request's head may take to arrive (and an idle keep-alive connection
    #: may wait for the next) before the connection is closed: where this server owns
    #: its port (a consumer's), not behind a broker's front door, which does the same.
    header_timeout: float = 10.0
    #: Connections served at once; more are answered 503 and closed.
    max_connections: int = dial.DEFAULT_MAX_CONNECTIONS
    #: After answering a request whose body was not all read: seconds, and bytes,
    #: of the client's remaining body to read and drop before closing, so that the
    #: client reads the answer rather than a connection reset.
    linger_timeout: float = 2.0
    linger_bytes: int = 16 << 20
    #: How the port is served: its ``tls`` makes it HTTPS (the broker's certificate).
    listen_config: dial.ListenConfig = dataclasses.field(default_factory=dial.ListenConfig)
    #: How the gateway dials ``grpc_endpoint`` (a broker's peer TLS, for ``https://``).
    dial_config: dial.DialConfig = dataclasses.field(default_factory=dial.DialConfig)


class _ClientGone(Exception):
    pass


class _Silent(Exception):
    """A request head (or the next request on a kept connection) didn't come in time."""


async def _refuse_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, most: int
) -> None:
    """Answer 503 and close; what the client sent is read (for at most a second) first,
    as closing with it unread would reset the connection before the answer is read."""
    body = f"this server serves {most} connections at once, its most: try again soon\n"
    with contextlib.suppress(ConnectionError, OSError, RuntimeError, TimeoutError):
        writer.write(
            (
                "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
                f"{body}"
            ).encode()
        )
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(1.0):
            while await reader.read(_READ_SIZE):
                pass
    writer.close()


class _Connection(h11.Connection):
    """An h11 server connection that knows whether the request in hand is a HEAD's:
    an answer to one has a body's headers but never its bytes (h11 refuses them)."""

    head_request = False


def _response(status: int, headers: list[tuple[str, str]]) -> h11.Response:
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    fields = [*headers, ("Date", email.utils.formatdate(usegmt=True))]
    if status >= 400:
        # As Go's http.Error: an error body is text, never to be sniffed as anything else.
        fields.append(("X-Content-Type-Options", "nosniff"))
    return h11.Response(status_code=status, headers=fields, reason=reason)


class Server:
    """Serves the gateway (and optionally diagnostics) on one HTTP/1.1 port.

    ``grpc_endpoint`` is the broker endpoint (``http://host:port``) the gateway's
    RPCs go to (None: no gateway, ``/debug/`` alone, as a consumer serves it);
    ``ready`` enables the ``/debug/`` routes. With ``debug_auth``,
    those other than ``/debug/ready`` need a bearer token it verifies for LIST
    over every journal: metrics name journals and stores.
    """

    def __init__(
        self,
        ready: Callable[[], bool] | None = None,
        *,
        grpc_endpoint: str | None,
        registry: prom.CollectorRegistry | None = None,
        config: ServerConfig = ServerConfig(),
        debug_auth: auth_.ServerAuth | None = None,
    ) -> None:
        self._ready = ready
        self._debug_auth = debug_auth
        self._config = config
        self._registry = registry or prom.REGISTRY
        self._ssl = dial.server_ssl_context(config.listen_config)
        self._channel: grpc.aio.Channel | None = None
        self._gateway: gateway.Gateway | None = None
        if grpc_endpoint is not None:
            self._channel = dial.channel(grpc_endpoint, config.dial_config)
            self._gateway = gateway.Gateway(self._channel)
            self._gateway.scheme = "https" if self._ssl is not None else "http"

        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def location_port_offset(self) -> int | None:
        """The HTTP port minus the gRPC port of every broker (see ``gateway._location``)."""
        return None if self._gateway is None else self._gateway.location_port_offset

    @location_port_offset.setter
    def location_port_offset(self, offset: int | None) -> None:
        if self._gateway is not None:
            self._gateway.location_port_offset = offset

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port, ssl=self._ssl)
        return int(self._server.sockets[0].getsockname()[1])

    async def start_unix(self, path: str) -> None:
        """Serve on the Unix socket ``path``, in the clear: the broker's native front
        door forwards to it what its port gets that isn't gRPC (TLS, if any, ended
        there, so Location headers keep this server's scheme)."""
        self._server = await asyncio.start_unix_server(self._handle, path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            # Streaming reads never end by themselves: cut them.
            for task in list(self._connections):
                task.cancel()
            await self._server.wait_closed()
            self._server = None
        if self._channel is not None:
            await self._channel.close()

    # --- Connections ----------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self._config.max_connections:
            await _refuse_connection(reader, writer, self._config.max_connections)
            return
        self._connections.add(task)
        conn = _Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEADERS)
        try:
            while True:
                event = await self._next_event(conn, reader)
                if not isinstance(event, h11.Request):
                    break
                await self._serve(conn, event, reader, writer)
                if conn.their_state is h11.SEND_BODY and conn.our_state in (
                    h11.DONE,
                    h11.MUST_CLOSE,
                ):
                    await self._linger(reader, writer)
                    break
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except h11.RemoteProtocolError as e:
            with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
                await self._send_simple(conn, writer, e.error_status_hint, f"{e}\n".encode())
        except (ConnectionError, _ClientGone, asyncio.IncompleteReadError, _Silent):
            pass
        except asyncio.CancelledError:
            pass  # Server shutdown: this connection just ends.
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _next_event(
        self, conn: _Connection, reader: asyncio.StreamReader, *, in_body: bool = False
    ) -> object:
        """The next h11 event; in a body, HttpError(408) after ``body_timeout`` of silence."""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if not in_body:
                    try:
                        async with asyncio.timeout(self._config.header_timeout):
                            data = await reader.read(_READ_SIZE)
                    except TimeoutError:
                        raise _Silent from None
                    conn.receive_data(data)
                    continue
                try:
                    async with asyncio.timeout(self._config.body_timeout):
                        data = await reader.read(_READ_SIZE)
                except TimeoutError:
                    raise gateway.HttpError(
                        408, f"request body sent nothing for {self._config.body_timeout:g}s"
                    ) from None
                conn.receive_data(data)
                continue
            return event

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Half-close, then drop what the client still sends (bounded) before the close."""
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
        left = self._config.linger_bytes
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(self._config.linger_timeout):
                while left > 0 and (data := await reader.read(_READ_SIZE)):
                    left -= len(data)

    async def _send(
        self, conn: _Connection, writer: asyncio.StreamWriter, event: h11.Event
    ) -> None:
        data = conn.send(event)
        if data:
            writer.write(data)
            await writer.drain()

    async def _send_simple(
        self,
        conn: _Connection,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        headers: list[tuple[str, str]] | None = None,
        content_type: str = "text/plain; charset=utf-8",
    ) -> None:
        fields = [*(headers or [])]
        if status != 204:  # A 204 has no body, so no body headers either.
            fields += [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        await self._send(conn, writer, _response(status, fields))
        if body and not conn.head_request:
            await self._send(conn, writer, h11.Data(data=body))
        await self._send(conn, writer, h11.EndOfMessage())

    async def _drain_body(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        while conn.their_state is h11.SEND_BODY:
            event = await self._next_event(conn, reader, in_body=True)
            if isinstance(event, h11.ConnectionClosed):
                raise _ClientGone

    # --- Requests -------------------------------------------------------------

    async def _serve(
        self,
        conn: _Connection,
        request: h11.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("utf-8", "replace")
        conn.head_request = method == "HEAD"
        auth = host = ""
        head = len(request.target)
        for name, value in request.headers:
            if name == b"authorization":
                auth = value.decode("latin-1")
            elif name == b"host":
                host = value.decode("latin-1")
            head += len(name) + len(value) + 4
            if len(value) > _MAX_FIELD:
                field = name.decode("latin-1")
                await self._refuse_head(conn, writer, f"header field {field} is", _MAX_FIELD)
                return
        path = target.split("?", 1)[0]
        if head > _MAX_HEADERS:
            # h11 checks the head's size only when it arrives in pieces.
            await self._refuse_head(conn, writer, "request header is", _MAX_HEADERS)
            return

        try:
            if self._ready is not None and path.startswith("/debug/"):
                await self._drain_body(conn, reader)
                status, ctype, body = self._debug(method, path, auth)
                extra = (
                    [("Allow", "GET")]
                    if status == 405
                    else [("WWW-Authenticate", "Bearer")]
                    if status == 401
                    else []
                )
                await self._send_simple(conn, writer, status, body, extra, content_type=ctype)
                return
            if self._gateway is None:
                await self._drain_body(conn, reader)
                raise gateway.HttpError(404, "this port serves /debug/ only")
            if method in ("GET", "HEAD"):
                await self._drain_body(conn, reader)
                reply = await self._gateway.read(method, target, auth, host)
            elif method == "PUT":

                async def next_body() -> bytes:
                    while conn.their_state is h11.SEND_BODY:
                        event = await self._next_event(conn, reader, in_body=True)
                        if isinstance(event, h11.Data):
                            return bytes(event.data)
                        if isinstance(event, h11.ConnectionClosed):
                            raise _ClientGone
                    return b""

                reply = await self._gateway.append(
                    target, next_body, auth, body_timeout=self._config.body_timeout, host=host
                )
            else:
                await self._drain_body(conn, reader)
                raise gateway.HttpError(
                    405, f"unknown method: {method}", headers=[("Allow", _METHODS)]
                )
        except gateway.HttpError as e:
            # Maybe before the body was all read: then the connection closes after.
            await self._send_simple(
                conn, writer, e.status, f"{e.text}\n".encode(), self._closing(conn, e.headers)
            )
            return

        if reply.stream is None:
            await self._send_simple(
                conn, writer, reply.status, reply.body, self._closing(conn, reply.headers)
            )
            return
        await self._send(conn, writer, _response(reply.status, reply.headers))
        await self._stream(conn, reader, writer, reply)

    async def _stream(
        self,
        conn: _Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        reply: gateway.Reply,
    ) -> None:
        assert reply.stream is not None
        stream = reply.stream

        async def pump() -> None:
            async for chunk in stream:
                await self._send(conn, writer, h11.Data(data=chunk))

        # A blocking read may wait for ever: watch the socket too, so a client
        # that hangs up cancels the read instead of leaving it (and its RPC)
        # behind. Both tasks are always awaited before we return.
        pump_task = asyncio.ensure_future(pump())
        watch_task = asyncio.ensure_future(reader.read(1))
        extra = b""
        try:
            done, _ = await asyncio.wait(
                (pump_task, watch_task), return_when=asyncio.FIRST_COMPLETED
            )
            if watch_task in done:
                extra = watch_task.result()
                if not extra:
                    raise _ClientGone
                await pump_task  # Pipelined bytes: not a hang-up; finish this response.
            pump_task.result()
        finally:
            for task in (pump_task, watch_task):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await task
            await stream.aclose()  # type: ignore[attr-defined]
        if extra:
            conn.receive_data(extra)
        await self._send(conn, writer, h11.EndOfMessage(headers=reply.trailers))

    def _debug_refusal(self, authorization: str) -> str | None:
        """Why a ``/debug/`` request's token doesn't do (see the class), or None."""
        assert self._debug_auth is not None
        metadata = [("authorization", authorization)] if authorization else []
        try:
            claims = self._debug_auth.verify(metadata, auth_.Capability.LIST)
        except pb.AuthorizationError as e:
            return str(e)
        if claims.selector.include.labels or claims.selector.exclude.labels:
            return "/debug/ needs a token whose selector selects every journal"
        return None

    async def _refuse_head(
        self, conn: _Connection, writer: asyncio.StreamWriter, what: str, limit: int
    ) -> None:
        text = f"{what} longer than {limit // 1024} KiB\n".encode()
        await self._send_simple(conn, writer, 431, text, self._closing(conn, []))

    @staticmethod
    def _closing(conn: _Connection, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """``headers``, plus ``Connection: close`` when the request body is not all read."""
        if conn.their_state is h11.SEND_BODY:
            return [*headers, ("Connection", "close")]
        return headers

    def _debug(self, method: str, path: str, authorization: str) -> tuple[int, str, bytes]:
        assert self._ready is not None
        if method != "GET":
            return 405, "text/plain", b"method not allowed\n"
        if path == "/debug/ready":
            if self._ready():
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", b"not ready\n"
        if self._debug_auth is not None:
            refusal = self._debug_refusal(authorization)
            if refusal is not None:
                return 401, "text/plain", f"{refusal}\n".encode()
        if path == "/debug/metrics":
            return 200, prom.CONTENT_TYPE_LATEST, prom.generate_latest(self._registry)
        return 404, "text/plain", b"not found\n"
