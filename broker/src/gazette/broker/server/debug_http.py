"""Diagnostics over HTTP/1.1: ``/debug/ready`` and ``/debug/metrics``.

grpcio owns its listening socket and speaks only HTTP/2, so unlike Gazette
(which sniffs one port) these are served on their own port
(``--broker.http-port``). A deliberately small asyncio server: two GET routes,
one request per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import prometheus_client as prom

_MAX_HEADER = 16 * 1024


class DebugServer:
    """Serves the diagnostics routes; ``ready()`` decides /debug/ready's answer."""

    def __init__(self, ready: Callable[[], bool], registry: prom.CollectorRegistry | None = None):
        self._ready = ready
        self._registry = registry or prom.REGISTRY
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port)
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            if len(head) > _MAX_HEADER:
                raise ValueError("header too large")
            method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            status, ctype, body = self._route(method, path.split("?", 1)[0])
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ValueError,
            ConnectionError,
        ):
            status, ctype, body = "400 Bad Request", "text/plain", b"bad request\n"
        with contextlib.suppress(ConnectionError):
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    def _route(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"method not allowed\n"
        if path == "/debug/ready":
            if self._ready():
                return "200 OK", "text/plain", b"ready\n"
            return "503 Service Unavailable", "text/plain", b"not ready\n"
        if path == "/debug/metrics":
            return "200 OK", prom.CONTENT_TYPE_LATEST, prom.generate_latest(self._registry)
        return "404 Not Found", "text/plain", b"not found\n"
