"""The journal HTTP gateway (h11 server + Gateway) in front of a fake broker."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest
from client_fakes import FakeBroker

from gazette.broker import http_gateway, testing
from gazette.broker import protocol as pb
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc


@pytest.fixture
async def gw(fake: FakeBroker) -> AsyncIterator[str]:
    server = http_gateway.Server(lambda: True, grpc_endpoint=fake.endpoint)
    port = await server.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await server.close()


async def raw_request(base: str, request: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await writer.wait_closed()
    return data


async def test_put_then_get_round_trip(fake: FakeBroker, gw: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.put(f"{gw}/a/journal", data=b"hello\n") as resp:
            assert resp.status == 204
            assert resp.headers["X-Commit-Begin"] == "0"
            assert resp.headers["X-Commit-End"] == "6"
            assert resp.headers["X-Write-Head"] == "6"
            assert len(resp.headers["X-Commit-SHA1-Sum"]) == 40
            assert resp.headers["X-Route-Token"].startswith('members:<zone:"')
            # A gateway of its own (no port offset) names itself, as the client reached it.
            assert resp.headers["Location"] == f"{gw}/a/journal"
            assert "Date" in resp.headers
        async with http.put(f"{gw}/a/journal", data=b"world\n") as resp:
            assert resp.headers["X-Commit-End"] == "12"
        async with http.get(f"{gw}/a/journal?offset=0") as resp:
            assert resp.status == 206
            assert (
                resp.headers["Content-Range"] == "bytes 0-9223372036854775807/9223372036854775807"
            )
            assert resp.headers["X-Write-Head"] == "12"
            assert resp.headers["X-Fragment-Name"].startswith("0000000000000000-000000000000000c-")
            assert resp.headers["Trailer"] == "X-Close-Error"
            assert await resp.read() == b"hello\nworld\n"
        async with http.get(f"{gw}/a/journal?offset=6") as resp:
            assert await resp.read() == b"world\n"
    assert fake.appends == [("a/journal", b"hello\n"), ("a/journal", b"world\n")]


async def test_large_put_is_one_append(fake: FakeBroker, gw: str) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    async with aiohttp.ClientSession() as http, http.put(f"{gw}/big/journal", data=body) as resp:
        assert resp.status == 204
    assert fake.appends == [("big/journal", body)]


async def test_trailer_names_why_the_stream_ended(fake: FakeBroker, gw: str) -> None:
    fake.content["a/journal"] += b"abc"
    out = await raw_request(
        gw, b"GET /a/journal?offset=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 206 ")
    assert b"transfer-encoding: chunked" in head.lower()
    assert b"bc" in body
    assert b"X-Close-Error: OFFSET_NOT_YET_AVAILABLE" in body


async def test_head_is_metadata_only(fake: FakeBroker, gw: str) -> None:
    fake.content["a/journal"] += b"abc"
    async with aiohttp.ClientSession() as http, http.head(f"{gw}/a/journal") as resp:
        assert resp.status == 206
        assert resp.headers["X-Write-Head"] == "3"
    assert fake.read_requests[-1].metadata_only


@pytest.mark.parametrize(
    ("target", "status", "text"),
    [
        ("/a/journal?extra=1", 400, 'schema: invalid path "extra"'),
        ("/a/journal?block=maybe", 400, 'schema: error converting value for "block"'),
        ("/a/journal?offset=x", 400, 'schema: error converting value for "offset"'),
        ("/a//journal", 400, "Journal: must be a clean path"),
        ("/a/journal?offset=3", 416, "OFFSET_NOT_YET_AVAILABLE"),
    ],
)
async def test_read_errors(fake: FakeBroker, gw: str, target: str, status: int, text: str) -> None:
    fake.content["a/journal"] += b"abc"
    async with aiohttp.ClientSession() as http, http.get(gw + target) as resp:
        assert resp.status == status
        assert text in await resp.text()


async def test_missing_journal_is_404_and_failed_put_is_500(fake: FakeBroker, gw: str) -> None:
    fake.specs["other/journal"] = None  # type: ignore[assignment]  # Only other/journal exists.

    async def not_found(request, context):  # type: ignore[no-untyped-def]
        from gazette.broker import protocol as pb

        yield pb.ReadResponse(status=pb.JOURNAL_NOT_FOUND, header=fake.header())

    fake.Read = not_found  # type: ignore[method-assign]
    await fake.stop()
    await fake.start()
    server = http_gateway.Server(grpc_endpoint=fake.endpoint)
    port = await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/missing/journal") as resp:
                assert resp.status == 404
                assert await resp.text() == "JOURNAL_NOT_FOUND\n"
            async with http.put(f"http://127.0.0.1:{port}/missing/journal", data=b"x") as resp:
                assert resp.status == 500
                assert "JOURNAL_NOT_FOUND" in await resp.text()
            async with http.post(f"http://127.0.0.1:{port}/missing/journal", data=b"x") as resp:
                assert resp.status == 405
                assert resp.headers["Allow"] == "GET, HEAD, PUT"
                assert await resp.text() == "unknown method: POST\n"
    finally:
        await server.close()


async def test_blocking_read_streams_appends_and_ends_when_client_hangs_up(
    fake: FakeBroker, gw: str
) -> None:
    async with aiohttp.ClientSession() as http:
        # Headers come with the first response, which waits for the first commit.
        get = asyncio.ensure_future(http.get(f"{gw}/a/journal?offset=0&block=true"))
        await asyncio.sleep(0.05)
        assert not get.done()
        async with http.put(f"{gw}/a/journal", data=b"first\n"):
            pass
        resp = await asyncio.wait_for(get, 5)
        assert resp.status == 206
        assert await asyncio.wait_for(resp.content.readline(), 5) == b"first\n"
        async with http.put(f"{gw}/a/journal", data=b"second\n"):
            pass
        assert await asyncio.wait_for(resp.content.readline(), 5) == b"second\n"
        resp.close()
    # The gateway noticed the hang-up and cancelled the read: the fake's stream ended.
    for _ in range(100):
        if not fake.changed._waiters:  # type: ignore[attr-defined]
            break
        await asyncio.sleep(0.02)
    assert not fake.changed._waiters  # type: ignore[attr-defined]


async def test_debug_routes(gw: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{gw}/debug/ready") as resp:
            assert resp.status == 200
        async with http.get(f"{gw}/debug/metrics") as resp:
            assert resp.status == 200
            assert "python_info" in await resp.text() or "process_" in await resp.text()


# -- Bad input (a tester's findings) -----------------------------------------------------


@pytest.fixture
async def impatient_gw(fake: FakeBroker) -> AsyncIterator[str]:
    """A gateway that waits 0.5 s, not 30 s, for request body bytes."""
    config = http_gateway.ServerConfig(body_timeout=0.5)
    server = http_gateway.Server(grpc_endpoint=fake.endpoint, config=config)
    port = await server.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await server.close()


@pytest.mark.parametrize(
    ("target", "text"),
    [
        # Read as host "other" and path "/a/journal", it read a/journal.
        ("//other/a/journal", "Journal: cannot begin with '/' (/other/a/journal)"),
        ("//a//b", "Journal: must be a clean path (/a//b)"),
    ],
)
async def test_double_slash_is_a_path_not_a_host(
    fake: FakeBroker, gw: str, target: str, text: str
) -> None:
    fake.content["a/journal"] += b"abc"
    out = await raw_request(
        gw, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
    assert out.startswith(b"HTTP/1.1 400 "), out
    assert text.encode() in out
    assert not fake.read_requests


async def test_unknown_method_is_405_with_allow(gw: str) -> None:
    out = await raw_request(
        gw, b"DELETE /a/journal HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert out.startswith(b"HTTP/1.1 405 "), out
    assert b"\r\nallow: get, head, put\r\n" in out.lower()


async def put_slowly(
    base: str, path: str, chunks: int, *, chunk: bytes = b"x" * 65536, pause: float = 0.001
) -> tuple[bytes, int]:
    """A PUT that sends its body a chunk per `pause`, reading the response as it goes.

    The server answers long before the body ends. Returns what it answered and how many
    chunks were sent before the server stopped taking them: a server that lingers (reads
    and drops the rest of a refused body) takes all of them, one that closes at once
    resets the connection, which may cost the client the answer itself.
    """
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {chunks * len(chunk)}\r\n\r\n".encode()
    )
    sent = 0

    async def send() -> None:
        nonlocal sent
        with contextlib.suppress(ConnectionError):
            for _ in range(chunks):
                writer.write(chunk)
                await writer.drain()
                sent += 1
                await asyncio.sleep(pause)

    sender = asyncio.ensure_future(send())
    try:
        out = await asyncio.wait_for(reader.read(), 20)
        await asyncio.wait_for(sender, 20)
        return out, sent
    finally:
        sender.cancel()
        await asyncio.wait((sender,))
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_put_refused_mid_body_is_answered_not_reset(fake: FakeBroker) -> None:
    async def refuse(request_iterator, context):  # type: ignore[no-untyped-def]
        await anext(aiter(request_iterator))
        return pb.AppendResponse(status=pb.JOURNAL_NOT_FOUND, header=fake.header())

    fake.Append = refuse  # type: ignore[method-assign]
    await fake.stop()
    await fake.start()
    server = http_gateway.Server(grpc_endpoint=fake.endpoint)
    port = await server.start("127.0.0.1", 0)
    try:
        out, sent = await put_slowly(f"http://127.0.0.1:{port}", "/missing/journal", chunks=256)
    finally:
        await server.close()
    assert sent == 256
    assert out.startswith(b"HTTP/1.1 500 "), out[:200]
    assert b"connection: close" in out.lower()
    assert out.endswith(b"JOURNAL_NOT_FOUND\n")


async def test_stalled_put_body_is_408_and_commits_nothing(
    fake: FakeBroker, impatient_gw: str
) -> None:
    started = time.monotonic()
    out = await raw_request(
        impatient_gw,
        b"PUT /a/journal HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b",
    )
    assert out.startswith(b"HTTP/1.1 408 "), out
    assert b"request body sent nothing for 0.5s" in out
    assert time.monotonic() - started < 5
    assert fake.appends == []


@pytest.mark.parametrize(
    "request_head",
    [
        # Content-Length longer than the body.
        b"GET /a/journal HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc",
        # Chunked, and no chunk ever comes.
        b"GET /a/journal HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"PUT /a/journal HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    ],
)
async def test_body_that_never_comes_is_408(
    fake: FakeBroker, impatient_gw: str, request_head: bytes
) -> None:
    out = await raw_request(impatient_gw, request_head)
    assert out.startswith(b"HTTP/1.1 408 "), out
    assert fake.appends == []


# -- Against real brokers ------------------------------------------------------------------


async def _create_journal(cluster: testing.BrokerCluster, name: str) -> None:
    async with cluster.channel(0) as ch:
        stub = pb2_grpc.JournalStub(ch)
        spec = testing.journal_spec(name, replication=2, stores=[cluster.store_url])
        assert (await testing.apply_specs(stub, spec)).status == pb.OK
        await testing.wait_writable(stub, name)


@pytest.mark.integration
async def test_broker_gateway_answers_refused_and_stalled_puts(
    brokers: testing.BrokerCluster,
) -> None:
    base = f"http://127.0.0.1:{brokers[1].http_port}"
    # Refused at once (no such journal), while the body still streams: a 500, no reset.
    # The front door ends the exchange when the gateway answers, and must then read and
    # drop the rest of the body (for up to 2 s) rather than reset the client.
    out, sent = await put_slowly(
        base, f"/gateway-{uuid.uuid4().hex[:6]}/missing", chunks=50, pause=0.02
    )
    assert sent == 50
    assert out.startswith(b"HTTP/1.1 500 "), out[:300]
    assert out.endswith(b"JOURNAL_NOT_FOUND\n")

    # A body that stalls: the broker aborts the append (--broker.min-append-rate),
    # and the HTTP client hears of it well before the gateway's own body timeout.
    name = f"gateway-{uuid.uuid4().hex[:6]}/stall"
    await _create_journal(brokers, name)
    started = time.monotonic()
    out = await raw_request(
        base,
        f"PUT /{name} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b".encode(),
    )
    assert out.startswith(b"HTTP/1.1 500 "), out
    assert b"minimum append data rate" in out, out
    assert time.monotonic() - started < 15
    async with brokers.channel(0) as ch:
        content, _ = await testing.read(pb2_grpc.JournalStub(ch), name)
    assert content == b""  # Nothing of it committed.


@pytest.mark.integration
async def test_broker_answers_oversized_headers_431(brokers: testing.BrokerCluster) -> None:
    big = "Bearer " + "x" * 20_000
    for port in (brokers[1].http_port, brokers[1].port):
        out = await raw_request(
            f"http://127.0.0.1:{port}",
            f"GET /a/journal HTTP/1.1\r\nHost: x\r\nAuthorization: {big}\r\n\r\n".encode(),
        )
        assert out.startswith(b"HTTP/1.1 431 "), out[:300]


@pytest.mark.parametrize(
    ("fields", "answer"),
    [
        (
            {"Authorization": "Bearer " + "x" * 9000},
            b"header field authorization is longer than 8 KiB",
        ),
        ({f"X-{i}": "y" * 4000 for i in range(5)}, b"request header is longer than 16 KiB"),
    ],
)
async def test_oversized_headers_are_431(gw: str, fields: dict[str, str], answer: bytes) -> None:
    head = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    out = await raw_request(gw, f"GET /a/journal HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
    assert out.startswith(b"HTTP/1.1 431 "), out[:300]
    assert out.endswith(answer + b"\n")


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"HEAD /debug/ready HTTP/1.1\r\nHost: x\r\n", b"405"),
        (b"HEAD /a/journal HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 9000 + b"\r\n", b"431"),
    ],
)
async def test_a_refused_head_request_gets_headers_only(
    gw: str, head: bytes, status: bytes
) -> None:
    # A HEAD's answer has no body: sending one failed the connection's handler (h11's
    # "Too much data for declared Content-Length", found by fuzzing).
    loop = asyncio.get_running_loop()
    failures: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: failures.append(context))
    try:
        out = await raw_request(gw, head + b"Connection: close\r\n\r\n")
        await asyncio.sleep(0.1)
    finally:
        loop.set_exception_handler(previous)
    assert out.startswith(b"HTTP/1.1 " + status + b" "), out
    assert out.endswith(b"\r\n\r\n"), out
    assert not failures, failures


async def test_a_debug_only_server_times_out_silence_and_caps_connections() -> None:
    # As a consumer serves its HTTP port: no gateway, and it owns the port (no front door).
    config = http_gateway.ServerConfig(header_timeout=0.3, max_connections=2)
    server = http_gateway.Server(lambda: True, grpc_endpoint=None, config=config)
    port = await server.start("127.0.0.1", 0)
    base = f"http://127.0.0.1:{port}"
    try:
        out = await raw_request(base, b"GET /debug/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 200 ") and out.endswith(b"ready\n"), out
        out = await raw_request(base, b"GET /a/journal HTTP/1.1\r\nHost: x\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 404 ") and out.endswith(b"serves /debug/ only\n")

        # Half a request line: closed once the head is overdue.
        started = time.monotonic()
        out = await raw_request(base, b"GET /debug/rea")
        assert out == b"" and 0.25 < time.monotonic() - started < 3

        # Two held connections; a third is told why and closed.
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        await asyncio.sleep(0.05)
        out = await raw_request(base, b"GET /debug/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 503 "), out
        assert out.endswith(b"this server serves 2 connections at once, its most: try again soon\n")
        for _, writer in held:
            writer.close()
    finally:
        await server.close()
