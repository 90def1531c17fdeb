"""The journal HTTP gateway: ``GET`` / ``HEAD`` / ``PUT /<journal>`` over gRPC (Gazette `http_gateway.go`).

Each request becomes one ``protocol.Journal`` RPC on a gRPC channel (the
broker's own port, so the RPC is routed and proxied like any client's):

- ``GET /<journal>?offset=<int>&block=<bool>`` is a Read. The first response
  decides the status line and headers (``X-Route-Token``, ``Location``,
  ``X-Fragment-Name``, ``X-Fragment-Last-Modified``, ``X-Fragment-Location``,
  ``Content-Range``, ``X-Write-Head``); content then streams as chunks, and
  the ``X-Close-Error`` trailer says why the stream ended. ``HEAD`` is the
  same Read with ``metadata_only``.
- ``PUT /<journal>`` appends the request body as one atomic append, streamed
  as it arrives: 204 with ``X-Commit-Begin``, ``X-Commit-End``,
  ``X-Write-Head``, ``X-Commit-SHA1-Sum`` on success, 500 with the error
  text otherwise. The append ends as soon as the broker refuses it, even
  mid-body: the client then gets the broker's answer (and the connection
  closes), not a reset. A body that sends nothing for ``body_timeout``
  seconds is answered 408 and the append is cancelled, so nothing commits.

Status codes follow Gazette's gateway: OK 206 (GET / HEAD), JOURNAL_NOT_FOUND
404, INSUFFICIENT_JOURNAL_BROKERS 503, OFFSET_NOT_YET_AVAILABLE 416, any other
status 500; malformed queries and requests 400.

Authorization: the request's ``Authorization`` header (``Bearer <token>``) goes
with its RPC, so a broker with ``--broker.auth-keys`` judges the HTTP client's
own token: a refused one answers **401** (with ``WWW-Authenticate: Bearer``)
and the broker's reason, and a journal outside the token's selector is not
found (404). Gazette's gateway means to do the same (it exposes the header as
incoming gRPC metadata) but calls the broker through a client that signs its
own token for the journal, so the header never reaches the check. A PUT to a journal that does
not exist answers **500** ``JOURNAL_NOT_FOUND``, not 404: Gazette's gateway
answers every failed append with 500, and we keep its contract. Unlike
Gazette (400), an unknown method answers 405 with ``Allow: GET, HEAD, PUT``.

Request targets are paths (``/a/journal?offset=0``), or absolute URLs: a path
beginning ``//`` is a path, never a host (``GET //a/b`` asks for journal
``/a/b``, which is invalid, not for journal ``b`` on host ``a``).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import posixpath
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import grpc

from gazette import task
from gazette.broker import protocol as pb
from gazette.broker.protocol import gotext
from gazette.broker.protocol import protocol_pb2_grpc as pb_grpc

__all__ = [
    "CLOSE_ERROR_HEADER",
    "Gateway",
    "HttpError",
    "Reply",
    "parse_append_request",
    "parse_read_request",
]

log = logging.getLogger(__name__)

CLOSE_ERROR_HEADER = "X-Close-Error"
MAX_INT64 = (1 << 63) - 1
#: Bytes of a PUT body gathered into one AppendRequest.
APPEND_CHUNK = 1 << 17


class HttpError(Exception):
    """A request the gateway answers with ``status``, a text body and extra ``headers``."""

    def __init__(
        self, status: int, text: str, headers: list[tuple[str, str]] | None = None
    ) -> None:
        self.status = status
        self.text = text
        self.headers = headers or []
        super().__init__(f"{status}: {text}")


@dataclass
class Reply:
    """A response to send: status, headers, and a body (bytes or a stream of chunks).

    A streamed body ends with the trailers in ``trailers`` (filled as it streams).
    """

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    trailers: list[tuple[str, str]] = field(default_factory=list)


def _parse_bool(text: str) -> bool:
    # Go's strconv.ParseBool, as gorilla/schema uses it.
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(text)


def _query(raw: str, allowed: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in urllib.parse.parse_qsl(raw, keep_blank_values=True):
        name = key.lower()
        if name not in allowed:
            raise HttpError(400, f'schema: invalid path "{key}"')
        out[name] = value
    return out


def _journal_of(path: str) -> str:
    return urllib.parse.unquote(path)[1:]


def split_target(target: str) -> tuple[str, str]:
    """The (path, query) of an HTTP request target.

    ``urlsplit`` reads ``//a//b`` as host ``a`` and path ``//b``: an origin-form
    target (RFC 9112 §3.2.1, what clients send) has no host, so only absolute
    URLs go through it.
    """
    if target.startswith("/"):
        path, _, query = target.partition("?")
        return path, query.partition("#")[0]
    parts = urllib.parse.urlsplit(target)
    return parts.path or "/", parts.query


def parse_read_request(method: str, target: str) -> pb.ReadRequest:
    """The ReadRequest of a GET / HEAD; raises HttpError(400) when malformed."""
    path, raw_query = split_target(target)
    query = _query(raw_query, ("offset", "block"))
    req = pb.ReadRequest(journal=_journal_of(path), metadata_only=method == "HEAD")
    try:
        if query.get("offset", ""):
            req.offset = int(query["offset"])
    except ValueError:
        raise HttpError(400, 'schema: error converting value for "offset"') from None
    try:
        if query.get("block", ""):
            req.block = _parse_bool(query["block"])
    except ValueError:
        raise HttpError(400, 'schema: error converting value for "block"') from None
    try:
        pb.validate(req)
    except pb.ValidationError as e:
        raise HttpError(400, str(e)) from None
    return req


def parse_append_request(target: str) -> pb.AppendRequest:
    """The first AppendRequest of a PUT; raises HttpError(400) when malformed."""
    path, raw_query = split_target(target)
    _query(raw_query, ())
    req = pb.AppendRequest(journal=_journal_of(path))
    try:
        pb.validate(req)
    except pb.ValidationError as e:
        raise HttpError(400, str(e)) from None
    return req


def _header_fields(
    header: pb.Header, path: str, offset: int | None, host: str, scheme: str = "http"
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    route = header.route
    if route.members:
        # Go's net/http trims the value's trailing space when it writes the header.
        out.append(("X-Route-Token", gotext.message_text(route).strip()))
        if route.primary != -1 and len(route.endpoints) > route.primary:
            location = _location(route.endpoints[route.primary], path, offset, host, scheme)
            if location:
                out.append(("Location", location))
    return out


def _location(endpoint: str, path: str, offset: int | None, host: str, scheme: str = "http") -> str:
    """Where an HTTP client finds the journal at ``path``.

    Gazette's brokers serve HTTP on their gRPC port, so its Location is the
    primary's endpoint (ours too, asked there: ``offset`` 0). Ours also serve
    HTTP on a second port: with ``offset`` (the distance between the two ports,
    the same on every broker of a cluster) Location is the primary's HTTP port; without it (a gateway of its own) it is
    this gateway, as the client addressed it (``host``, by ``scheme``), which
    proxies any journal.
    """
    if offset is None:
        return f"{scheme}://{host}/{path.lstrip('/')}" if host else ""
    loc = urllib.parse.urlsplit(endpoint)
    if loc.port is None:
        return ""
    netloc = loc.netloc.rsplit(":", 1)[0] + f":{loc.port + offset}"
    joined = posixpath.join(loc.path or "/", path.lstrip("/"))
    return urllib.parse.urlunsplit(loc._replace(netloc=netloc, path=joined))


_READ_STATUS_CODES = {
    pb.JOURNAL_NOT_FOUND: 404,
    pb.INSUFFICIENT_JOURNAL_BROKERS: 503,
    pb.OFFSET_NOT_YET_AVAILABLE: 416,
}


class Gateway:
    """Serves the gateway's routes through ``channel`` (a grpc.aio channel to a broker)."""

    def __init__(self, channel: grpc.aio.Channel, location_port_offset: int | None = None) -> None:
        self._stub = pb_grpc.JournalStub(channel)
        #: See :func:`_location`; a broker sets it once both its ports are bound.
        self.location_port_offset = location_port_offset
        #: Scheme of Location headers that name this gateway ("https" when it serves TLS).
        self.scheme = "http"

    async def read(
        self, method: str, target: str, authorization: str = "", host: str = ""
    ) -> Reply:
        req = parse_read_request(method, target)
        path = split_target(target)[0]
        metadata = (("authorization", authorization),) if authorization else None
        call = self._stub.Read(req, metadata=metadata)
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as e:
            if (refused := _refused(e)) is not None:
                return refused
            log.warning("http_gateway: failed to proxy Read request: %s", e.details())
            return Reply(500, body=f"{e.code().name}: {e.details()}\n".encode())
        if first is grpc.aio.EOF:
            return Reply(500, body=b"broker terminated RPC\n")
        assert isinstance(first, pb.ReadResponse)

        headers: list[tuple[str, str]] = []
        if first.HasField("header"):
            headers += _header_fields(
                first.header, path, self.location_port_offset, host, self.scheme
            )
        if first.HasField("fragment"):
            frag = first.fragment
            headers.append(("X-Fragment-Name", pb.fragment_content_name(frag)))
            if frag.mod_time:
                headers.append(
                    ("X-Fragment-Last-Modified", email.utils.formatdate(frag.mod_time, usegmt=True))
                )
            if first.fragment_url:
                headers.append(("X-Fragment-Location", first.fragment_url))
            headers.append(("Content-Range", f"bytes {first.offset}-{MAX_INT64}/{MAX_INT64}"))
        if first.write_head:
            headers.append(("X-Write-Head", str(first.write_head)))

        if first.status != pb.OK:
            call.cancel()
            code = _READ_STATUS_CODES.get(first.status, 500)
            name = pb.enum_text(pb.Status, first.status)
            return Reply(code, headers, body=f"{name}\n".encode())
        if method == "HEAD":
            call.cancel()
            return Reply(206, headers)

        # Journal content is bytes: say so rather than let a client sniff it.
        headers.append(("Content-Type", "application/octet-stream"))
        headers.append(("Trailer", CLOSE_ERROR_HEADER))
        reply = Reply(206, headers)
        reply.stream = self._stream_content(call, req.offset, first, reply)
        return reply

    async def _stream_content(
        self, call: grpc.aio.UnaryStreamCall, offset: int, first: pb.ReadResponse, reply: Reply
    ) -> AsyncIterator[bytes]:
        # The first metadata may already have jumped ahead of the requested
        # offset (content below it was removed): tolerated, as Gazette does.
        offset = max(offset, first.offset)
        reason = "broker terminated RPC"
        try:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    break
                assert isinstance(resp, pb.ReadResponse)
                if resp.content:
                    if resp.offset != offset:
                        reason = "offset jump"
                        break
                    offset += len(resp.content)
                    yield resp.content
                    continue
                if resp.status != pb.OK:
                    reason = pb.enum_text(pb.Status, resp.status)
                    break
                if resp.offset > offset:
                    reason = "offset jump"
                    break
                if resp.fragment_url and not resp.HasField("fragment"):
                    break
        except grpc.aio.AioRpcError as e:
            reason = e.details() or e.code().name
            if e.code() != grpc.StatusCode.CANCELLED:
                log.warning("http_gateway: failed to proxy Read response: %s", reason)
        finally:
            call.cancel()
            reply.trailers.append((CLOSE_ERROR_HEADER, reason))

    async def append(
        self,
        target: str,
        body: Callable[[], Awaitable[bytes]],
        authorization: str = "",
        *,
        body_timeout: float | None = None,
        host: str = "",
    ) -> Reply:
        """Append the body (``body()`` returns its next bytes, b"" at the end) atomically.

        Reading the body stops as soon as the RPC ends (the broker refused the
        append, or gave up on a stalled body): its outcome is the reply. A
        ``body()`` that returns nothing for ``body_timeout`` seconds cancels the
        append and raises ``HttpError(408)``.
        """
        req = parse_append_request(target)
        path = split_target(target)[0]
        metadata = (("authorization", authorization),) if authorization else None
        call = self._stub.Append(metadata=metadata)
        ended = asyncio.Event()
        call.add_done_callback(lambda _call: ended.set())
        try:
            try:
                await call.write(req)
                pending = bytearray()
                while (chunk := await _next_body(body, ended, body_timeout)) is not None:
                    if chunk:
                        pending += chunk
                        if len(pending) >= APPEND_CHUNK:
                            await call.write(pb.AppendRequest(content=bytes(pending)))
                            pending.clear()
                        continue
                    if pending:
                        await call.write(pb.AppendRequest(content=bytes(pending)))
                    await call.write(pb.AppendRequest())
                    await call.done_writing()
                    break
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                # A write fails once the broker has answered: grpcio says "RPC already
                # finished", or reports its own INTERNAL error if the answer came
                # mid-write. The call's outcome is the real answer.
                pass
            resp = await call
        except grpc.aio.AioRpcError as e:
            if (refused := _refused(e)) is not None:
                return refused
            log.warning("http_gateway: failed to proxy Append request: %s", e.details())
            return Reply(500, body=f"{e.details() or e.code().name}\n".encode())
        except BaseException:
            call.cancel()  # The HTTP client went away or stalled: abort, so nothing commits.
            raise
        assert isinstance(resp, pb.AppendResponse)
        headers = _header_fields(resp.header, path, self.location_port_offset, host, self.scheme)
        if resp.HasField("commit"):
            headers += [
                ("X-Commit-Begin", str(resp.commit.begin)),
                ("X-Commit-End", str(resp.commit.end)),
                ("X-Write-Head", str(resp.commit.end)),
                ("X-Commit-SHA1-Sum", pb.sha1sum_hex(resp.commit.sum)),
            ]
        if resp.status == pb.OK:
            return Reply(204, headers)
        name = pb.enum_text(pb.Status, resp.status)
        detail = f": {resp.store_health_error}" if resp.store_health_error else ""
        # Like Gazette's gateway, every failed append is a 500 naming the status
        # (JOURNAL_NOT_FOUND too, where a GET answers 404).
        return Reply(500, headers, f"{name}{detail}\n".encode())


def _refused(e: grpc.aio.AioRpcError) -> Reply | None:
    """The reply to an RPC whose credentials the broker refused (None if it didn't)."""
    if e.code() == grpc.StatusCode.UNAUTHENTICATED:
        return Reply(
            401, [("WWW-Authenticate", "Bearer")], f"{e.details() or 'unauthenticated'}\n".encode()
        )
    if e.code() == grpc.StatusCode.PERMISSION_DENIED:
        return Reply(403, body=f"{e.details() or 'permission denied'}\n".encode())
    return None


async def _next_body(
    body: Callable[[], Awaitable[bytes]], ended: asyncio.Event, idle_limit: float | None
) -> bytes | None:
    """The next bytes of ``body``; None if the RPC ``ended`` first.

    Raises HttpError(408) when ``body`` gives nothing for ``idle_limit`` seconds.
    """
    if ended.is_set():
        return None
    try:
        async with asyncio.timeout(idle_limit):
            data, stopped = await task.race(body(), ended)  # The read always ends here.
    except TimeoutError:
        raise HttpError(408, f"request body sent nothing for {idle_limit:g}s") from None
    return None if stopped else data
