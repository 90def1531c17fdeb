"""The HTTP port's /debug/ready and /debug/metrics routes, over a real loopback socket.

The gateway's ``http_gateway.Server`` serves them next to the journal routes;
no broker is needed, as the routes never dial one.
"""

from __future__ import annotations

import asyncio

from gazette.broker import http_gateway
from gazette.broker.server import metrics


async def _get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, body = data.split(b"\r\n\r\n", 1)
    return int(head.split(b" ")[1]), body


async def test_ready_and_metrics() -> None:
    ready = False
    server = http_gateway.Server(lambda: ready, grpc_endpoint="http://127.0.0.1:1")
    port = await server.start("127.0.0.1", 0)
    try:
        async with asyncio.timeout(10):
            assert (await _get(port, "/debug/ready"))[0] == 503
            ready = True
            assert (await _get(port, "/debug/ready"))[0] == 200
            metrics.server_started.inc("Append")
            status, body = await _get(port, "/debug/metrics")
            assert status == 200
            assert (
                b'gazette_journal_server_started_totals_total{operation="Append"}' in body
                or b'gazette_journal_server_started_totals{operation="Append"}' in body
            )
            assert (await _get(port, "/debug/nope"))[0] == 404
    finally:
        await server.close()
