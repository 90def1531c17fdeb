"""The dial seam: channels and server ports of brokers are made in one place."""

from __future__ import annotations

import asyncio

import grpc

from gazette.broker import protocol as pb
from gazette.broker.protocol import dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc


async def test_a_channel_reaches_a_server_listening_through_the_seam() -> None:
    class Servicer(pb2_grpc.JournalServicer):
        async def List(self, request, context):  # type: ignore[no-untyped-def]
            await context.write(pb.ListResponse(status=pb.OK))

    server = dial.server(dial.ListenConfig(max_receive_message_size=1 << 20))
    pb2_grpc.add_JournalServicer_to_server(Servicer(), server)
    port = dial.listen(server, "127.0.0.1", 0)
    assert port > 0
    await server.start()
    try:
        async with dial.channel(
            f"http://127.0.0.1:{port}", dial.DialConfig(max_message_size=2 << 20)
        ) as ch:
            stub = pb2_grpc.JournalStub(ch)
            got = [r async for r in stub.List(pb.ListRequest())]
            assert [r.status for r in got] == [pb.OK]
    finally:
        await server.stop(None)


async def test_the_server_refuses_messages_over_its_receive_size() -> None:
    class Servicer(pb2_grpc.JournalServicer):
        async def Apply(self, request, context):  # type: ignore[no-untyped-def]
            return pb.ApplyResponse(status=pb.OK)

    server = dial.server(dial.ListenConfig(max_receive_message_size=1024))
    pb2_grpc.add_JournalServicer_to_server(Servicer(), server)
    port = dial.listen(server, "127.0.0.1", 0)
    await server.start()
    try:
        async with dial.channel(f"http://127.0.0.1:{port}") as ch:
            big = pb.ApplyRequest(changes=[pb.ApplyRequest.Change(delete="x" * 4096)])
            try:
                await pb2_grpc.JournalStub(ch).Apply(big)
            except grpc.aio.AioRpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            else:
                raise AssertionError("an oversized message was accepted")
    finally:
        await server.stop(None)


async def test_a_direct_server_closes_silent_connections_and_those_over_its_limit() -> None:
    import time

    srv = dial.server(dial.ListenConfig(max_connections=2, handshake_timeout=0.5))
    port = dial.listen(srv, "127.0.0.1", 0)
    await srv.start()
    try:
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        started = time.monotonic()

        async def closed_after(reader: asyncio.StreamReader) -> float:
            await asyncio.wait_for(reader.read(), 5)
            return time.monotonic() - started

        took = await asyncio.gather(*(closed_after(r) for r, _ in conns))
        # Two served until their handshake ran out; the third closed as it arrived.
        assert sorted(took)[0] < 0.3 <= sorted(took)[1] < 3, took
        for _, w in conns:
            w.close()
    finally:
        await srv.stop(None)
