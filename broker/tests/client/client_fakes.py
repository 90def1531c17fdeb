"""An in-process fake of ``protocol.Journal`` (grpc.aio on loopback), for client unit tests.

It keeps each journal's content in memory, appends atomically, serves reads as
fragments of ``fragment_size`` bytes, and can be told to misbehave: answer the
next appends with a status or a gRPC error, cut read streams short, or hand out
``file://`` signed URLs for "persisted" fragments.
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import hashlib
import pathlib

import grpc

from gazette.broker import protocol as pb
from gazette.broker.protocol import protocol_pb2_grpc as pb_grpc


def header(endpoint: str, members: int = 1, primary: int = 0) -> pb.Header:
    route = pb.Route(primary=primary)
    for i in range(members):
        route.members.add(zone="zone-a", suffix=f"broker-{i}")
        route.endpoints.append(endpoint)
    return pb.Header(
        process_id=pb.ProcessSpec.ID(zone="zone-a", suffix="broker-0"),
        route=route,
        etcd=pb.Header.Etcd(cluster_id=1, member_id=1, revision=10, raft_term=1),
    )


class FakeBroker(pb_grpc.JournalServicer):
    def __init__(self, fragment_size: int = 1 << 20, chunk_size: int = 32 * 1024) -> None:
        self.content: dict[str, bytearray] = collections.defaultdict(bytearray)
        self.specs: dict[str, pb.JournalSpec] = {}
        self.fragment_size = fragment_size
        self.chunk_size = chunk_size
        # A pb.Status to answer, a grpc.StatusCode to fail with ("injected failure"),
        # or a (grpc.StatusCode, details) pair.
        self.append_outcomes: list[int | grpc.StatusCode | tuple[grpc.StatusCode, str]] = []
        self.appends: list[tuple[str, bytes]] = []
        self.append_requests: list[pb.AppendRequest] = []
        self.read_requests: list[pb.ReadRequest] = []
        self.append_delay = 0.0
        self.cut_reads_after: int | None = None  # Content messages per read stream.
        self.persist_dir: pathlib.Path | None = None  # Serve file:// URLs for full fragments.
        self.codec = pb.NONE  # Of persisted fragments (GZIP files are written multi-member).
        self.changed = asyncio.Condition()
        self.server: grpc.aio.Server | None = None
        self.endpoint = ""

    async def start(self) -> str:
        self.server = grpc.aio.server()
        pb_grpc.add_JournalServicer_to_server(self, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        return self.endpoint

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)

    def header(self) -> pb.Header:
        return header(self.endpoint)

    # --- Append ---------------------------------------------------------------

    async def Append(self, request_iterator, context):  # type: ignore[no-untyped-def]
        first = None
        body = bytearray()
        committed = False
        async for req in request_iterator:
            if first is None:
                first = req
                continue
            if not req.content:
                committed = True
                break
            body += req.content
        if first is None or not committed:
            await context.abort(grpc.StatusCode.UNKNOWN, "append stream: unexpected EOF")
        self.append_requests.append(first)
        if self.append_delay:
            await asyncio.sleep(self.append_delay)
        if self.append_outcomes:
            outcome = self.append_outcomes.pop(0)
            if isinstance(outcome, grpc.StatusCode):
                await context.abort(outcome, "injected failure")
            if isinstance(outcome, tuple):
                await context.abort(*outcome)
            return pb.AppendResponse(status=outcome, header=self.header(), registers=pb.LabelSet())
        journal = first.journal
        if self.specs and journal not in self.specs:
            return pb.AppendResponse(status=pb.JOURNAL_NOT_FOUND, header=self.header())
        data = self.content[journal]
        begin = len(data)
        data += body
        self.appends.append((journal, bytes(body)))
        async with self.changed:
            self.changed.notify_all()
        commit = pb.Fragment(
            journal=journal,
            begin=begin,
            end=len(data),
            sum=pb.sha1sum_from_digest(hashlib.sha1(body).digest()),
            compression_codec=pb.NONE,
        )
        return pb.AppendResponse(
            status=pb.OK, header=self.header(), commit=commit, registers=pb.LabelSet()
        )

    # --- Read -----------------------------------------------------------------

    def _fragment(self, journal: str, offset: int) -> pb.Fragment:
        size = len(self.content[journal])
        begin = offset - offset % self.fragment_size
        end = min(begin + self.fragment_size, size)
        return pb.Fragment(journal=journal, begin=begin, end=end, compression_codec=self.codec)

    async def Read(self, request, context):  # type: ignore[no-untyped-def]
        self.read_requests.append(request)
        journal = request.journal
        data = self.content[journal]
        offset = request.offset if request.offset != -1 else len(data)
        first = True
        sent = 0
        while True:
            hdr = self.header() if first else None
            first = False
            while offset >= len(data):
                if not request.block:
                    resp = pb.ReadResponse(
                        status=pb.OFFSET_NOT_YET_AVAILABLE, offset=offset, write_head=len(data)
                    )
                    if hdr is not None:
                        resp.header.CopyFrom(hdr)
                    yield resp
                    return
                async with self.changed:
                    await self.changed.wait()
            frag = self._fragment(journal, offset)
            resp = pb.ReadResponse(status=pb.OK, offset=offset, write_head=len(data), fragment=frag)
            if hdr is not None:
                resp.header.CopyFrom(hdr)
            persisted = self.persist_dir is not None and frag.end - frag.begin == self.fragment_size
            if persisted:
                assert self.persist_dir is not None
                name = f"{journal}/{frag.begin:016x}-{frag.end:016x}.raw"
                path = self.persist_dir / name
                path.parent.mkdir(parents=True, exist_ok=True)
                raw = bytes(data[frag.begin : frag.end])
                if self.codec == pb.GZIP:
                    half = len(raw) // 2
                    raw = gzip.compress(raw[:half]) + gzip.compress(raw[half:])
                path.write_bytes(raw)
                resp.fragment_url = "file:///" + name
                resp.fragment.backing_store = "file:///"
                resp.fragment.mod_time = 1
            yield resp
            if persisted and request.do_not_proxy:
                return
            while offset < frag.end:
                chunk = bytes(data[offset : min(frag.end, offset + self.chunk_size)])
                if request.end_offset:
                    chunk = chunk[: request.end_offset - offset]
                yield pb.ReadResponse(offset=offset, content=chunk)
                offset += len(chunk)
                sent += 1
                if self.cut_reads_after is not None and sent >= self.cut_reads_after:
                    return  # A clean, early close: as a broker shutting down does.
                if request.end_offset and offset >= request.end_offset:
                    return

    # --- List / Apply / ListFragments ------------------------------------------

    async def List(self, request, context):  # type: ignore[no-untyped-def]
        resp = pb.ListResponse(status=pb.OK, header=self.header())
        resp.header.route.Clear()
        resp.header.route.primary = -1
        for name in sorted(self.specs):
            spec = self.specs[name]
            if pb.matches(request.selector, pb.label_set_ext(spec)):
                j = resp.journals.add(spec=spec, mod_revision=5, create_revision=5)
                j.route.CopyFrom(self.header().route)
        # Chunk like a broker does: 25 journals per message.
        journals = list(resp.journals)
        del resp.journals[:]
        resp.journals.extend(journals[:25])
        yield resp
        for i in range(25, len(journals), 25):
            yield pb.ListResponse(journals=journals[i : i + 25])

    async def Apply(self, request, context):  # type: ignore[no-untyped-def]
        for change in request.changes:
            if change.HasField("upsert"):
                self.specs[change.upsert.name] = change.upsert
            else:
                self.specs.pop(change.delete, None)
        resp = pb.ApplyResponse(status=pb.OK, header=self.header())
        resp.header.route.Clear()
        resp.header.route.primary = -1
        return resp

    async def ListFragments(self, request, context):  # type: ignore[no-untyped-def]
        data = self.content[request.journal]
        resp = pb.FragmentsResponse(status=pb.OK, header=self.header())
        offset = request.next_page_token
        limit = request.page_limit or 1000
        while offset < len(data) and len(resp.fragments) < limit:
            frag = self._fragment(request.journal, offset)
            frag.backing_store = "file:///"
            frag.mod_time = 100 + frag.begin // self.fragment_size
            f = resp.fragments.add(spec=frag)
            if request.HasField("signatureTTL"):
                f.signed_url = f"file:///{request.journal}/{frag.begin:016x}"
            offset = frag.end
        resp.next_page_token = offset if offset < len(data) else 0
        return resp

    async def FragmentStoreHealth(self, request, context):  # type: ignore[no-untyped-def]
        resp = pb.FragmentStoreHealthResponse(status=pb.OK, header=self.header())
        resp.header.route.Clear()
        resp.header.route.primary = -1
        if "broken" in request.fragment_store:
            resp.status = pb.FRAGMENT_STORE_UNHEALTHY
            resp.store_health_error = "injected: bucket is gone"
        return resp


class InstantClock:
    """A clock whose sleeps don't wait (they only yield to the loop), recording them."""

    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        await asyncio.sleep(0)
