"""Issue 29's attacks, rerun against real brokers: does the broker stay ready and bounded?

Two broker processes (``--broker.auth-keys``, a file:// store) over a real etcd on
loopback, and an attacker in this process. Each row prints what the attack got
and how the broker held up:

- *connection flood*: ``BENCH_ATTACK_CONNECTIONS`` (default 18,000, under this
  process's open-files limit) connections to one broker's two ports, half to each,
  each sending half a request line and nothing more, for ``BENCH_ATTACK_SECONDS``
  (default 20: the attacker reopens what the broker closes). Meanwhile a client
  with an established channel appends (appends/s before and during), and an
  established HTTP keep-alive connection asks ``/debug/ready`` every 0.5 s
  (answers, worst latency). Printed: the broker's peak file descriptors and RSS,
  connections refused and closed for silence, and "Too many open files" lines in
  its log.
- *untokened Applies*: 8 concurrent 60 MiB Apply calls without a token
  (``--broker.max-grpc-recv-size`` 64 MiB): their outcome and the broker's RSS
  before, at peak and after.
- *SSRF*: FragmentStoreHealth with a READ token of one journal, naming an S3
  endpoint of the attacker's: the answer and how many connections reached it.
- *corrupt frame through a proxy*: a valid first Append message, then one that
  doesn't decode, to the broker that is not the journal's primary: the status
  and how long it took.
- *garbage*: 300 random bytes as a ListFragments request: the status.
- *20 KB header*: a gateway GET with a 20 KB Authorization header: the status.

Not pass/fail: figures to compare with the issue's table (``python -m bench attacks``).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import multiprocessing
import os
import pathlib
import tempfile
import time
import uuid

import grpc

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import auth
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.keyspace import testing as ks_testing

CONNECTIONS = int(os.environ.get("BENCH_ATTACK_CONNECTIONS", "18000"))
SECONDS = float(os.environ.get("BENCH_ATTACK_SECONDS", "20"))
KEY = base64.b64encode(b"bench attacks: the cluster's key").decode()


#: Every capability over every journal: the clients that aren't attacking.
ADMIN = auth.KeyedAuth(KEY).authorize(auth.Claims(auth.Capability.ALL), 3600)


async def _writable_journal(
    cluster: testing.BrokerCluster, stub: pb2_grpc.JournalStub, name: str
) -> None:
    spec = testing.journal_spec(name, replication=1, stores=[cluster.store_url])
    assert (await testing.apply_specs(stub, spec, metadata=ADMIN)).status == pb.OK
    await testing.wait_writable(stub, name, metadata=ADMIN)


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return -1


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


class _Peak:
    """Samples a process's RSS and descriptors every 50 ms while entered."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss = self.fds = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.rss = max(self.rss, _rss_mib(self.pid))
            self.fds = max(self.fds, _fds(self.pid))
            await asyncio.sleep(0.05)

    async def __aenter__(self) -> _Peak:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def _flood(port: int, count: int, until: float) -> int:
    """Keep ``count`` half-sent requests open to ``port`` until ``until``; opened in all."""
    opened = 0
    sem = asyncio.Semaphore(512)

    async def one() -> None:
        nonlocal opened
        while time.monotonic() < until:
            async with sem:
                try:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection("127.0.0.1", port), 5
                    )
                except (OSError, TimeoutError):
                    await asyncio.sleep(0.2)
                    continue
            opened += 1
            try:
                writer.write(b"GET /debug/ready HT")
                with contextlib.suppress(OSError):
                    await writer.drain()
                # Hold it until the broker closes it (or the flood ends), then reopen.
                while time.monotonic() < until and not reader.at_eof():
                    with contextlib.suppress(TimeoutError, OSError):
                        await asyncio.wait_for(reader.read(4096), 0.5)
            finally:
                writer.close()

    await asyncio.gather(*(one() for _ in range(count)))
    return opened


def _flood_process(port: int, count: int, seconds: float) -> int:
    """One attacker: :func:`_flood` in a process of its own."""
    return asyncio.run(_flood(port, count, time.monotonic() + seconds))


async def _row_flood(cluster: testing.BrokerCluster) -> None:

    broker = cluster.brokers[0]
    assert broker.proc is not None
    name = f"attack/flood-{uuid.uuid4().hex[:6]}"
    async with cluster.channel(0) as ch:
        stub = pb2_grpc.JournalStub(ch)
        await _writable_journal(cluster, stub, name)

        async def appends(seconds: float) -> tuple[int, int]:
            ok = failed = 0
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    resp = await testing.append(stub, name, [b"x" * 100], metadata=ADMIN)
                    ok += resp.status == pb.OK
                except grpc.aio.AioRpcError:
                    failed += 1
                    await asyncio.sleep(0.1)
            return ok, failed

        before, _ = await appends(3)
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.http_port)
        ready: list[float] = []
        ready_failures = 0

        async def probe(until: float) -> None:
            nonlocal ready_failures
            while time.monotonic() < until:
                started = time.monotonic()
                try:
                    writer.write(b"GET /debug/ready HTTP/1.1\r\nHost: x\r\n\r\n")
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                    await asyncio.wait_for(reader.readexactly(6), 10)  # "ready\n"
                    if head.startswith(b"HTTP/1.1 200 "):
                        ready.append(time.monotonic() - started)
                    else:
                        ready_failures += 1
                except (OSError, asyncio.IncompleteReadError, TimeoutError):
                    ready_failures += 1
                await asyncio.sleep(0.5)

        pid = broker.proc.pid
        log_mark = broker.log_path.stat().st_size
        # The attackers are processes of their own (two, one per port): sharing this
        # event loop, they would starve the client measured here, not the broker.
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
            floods = [
                asyncio.wrap_future(pool.submit(_flood_process, port, CONNECTIONS // 2, SECONDS))
                for port in (broker.port, broker.http_port)
            ]
            await asyncio.sleep(1)  # Let them start.
            until = time.monotonic() + SECONDS - 1
            async with _Peak(pid) as peak:
                (during, failed), _ = await asyncio.gather(appends(SECONDS - 1), probe(until))
                opened = sum(await asyncio.gather(*floods))
        writer.close()
        with broker.log_path.open("rb") as f:
            f.seek(log_mark)
            emfile = f.read().count(b"Too many open files")
        metrics = await _metrics(broker.http_port)
    print(
        f"  connection flood: {CONNECTIONS:,} held ({opened:,} opened in {SECONDS:g}s) |"
        f" appends/s {before / 3:,.0f} before, {during / SECONDS:,.0f} during"
        f" ({failed} failed) | /debug/ready on a kept connection: {len(ready)} answered,"
        f" {ready_failures} not, worst {max(ready, default=0) * 1000:.1f} ms |"
        f" broker peak {peak.fds:,} fds, {peak.rss} MiB RSS | refused"
        f" {metrics.get('gazette_broker_connections_refused_total', 0):,.0f}, silent"
        f" {metrics.get('gazette_broker_connections_silent_total', 0):,.0f} |"
        f" 'Too many open files' in its log: {emfile}"
    )


async def _metrics(http_port: int) -> dict[str, float]:
    """Sums of the broker's front-door counters (over both ports), from /debug/metrics."""
    reader, writer = await asyncio.open_connection("127.0.0.1", http_port)
    writer.write(b"GET /debug/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    text = (await reader.read()).decode(errors="replace")
    writer.close()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("gazette_broker_connections_"):
            key, _, value = line.rpartition(" ")
            metric = key.split("{", 1)[0]
            out[metric] = out.get(metric, 0.0) + float(value)
    return out


async def _row_applies(cluster: testing.BrokerCluster) -> None:

    broker = cluster.brokers[1]
    assert broker.proc is not None
    big = pb.ApplyRequest()
    big.changes.add().upsert.CopyFrom(pb.JournalSpec(name="x/" + "a" * (60 << 20)))
    opts = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    channel = grpc.aio.insecure_channel(broker.address, options=opts)
    stub = pb2_grpc.JournalStub(channel)

    async def one() -> str:
        try:
            await stub.Apply(big, timeout=60)
            return "OK"
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name}: {(e.details() or '')[:50]}"

    before = _rss_mib(broker.proc.pid)
    started = time.monotonic()
    async with _Peak(broker.proc.pid) as peak:
        outcomes = await asyncio.gather(*(one() for _ in range(8)))
        await asyncio.sleep(1)
    took = time.monotonic() - started - 1
    await channel.close()
    print(
        f"  8 x 60 MiB untokened Applies: {sorted(set(outcomes))} in {took:.1f}s | broker RSS"
        f" {before} MiB before, {peak.rss} MiB peak, {_rss_mib(broker.proc.pid)} MiB after"
    )


async def _row_ssrf(cluster: testing.BrokerCluster) -> None:

    hits = 0

    async def count(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal hits
        hits += 1
        w.close()

    listener = await asyncio.start_server(count, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    md = auth.KeyedAuth(KEY).authorize(
        auth.Claims(auth.Capability.READ, pb.parse_selector("name=attack/one")), 600
    )
    req = pb.FragmentStoreHealthRequest(
        fragment_store=f"s3://b/p/?endpoint=http://127.0.0.1:{port}"
    )
    async with cluster.channel(0) as ch:
        try:
            resp = await pb2_grpc.JournalStub(ch).FragmentStoreHealth(req, metadata=md, timeout=60)
            got = pb.Status.Name(resp.status)
        except grpc.aio.AioRpcError as e:
            got = f"{e.code().name}: {e.details()}"
    await asyncio.sleep(5)
    listener.close()
    print(f"  SSRF (READ token, attacker's endpoint): {got} | connections to it in 5s: {hits}")


async def _row_corrupt(cluster: testing.BrokerCluster) -> None:

    name = f"attack/corrupt-{uuid.uuid4().hex[:6]}"
    async with cluster.channel(0) as ch:
        stub = pb2_grpc.JournalStub(ch)
        await _writable_journal(cluster, stub, name)
        _, meta = await testing.read(stub, name, -1, metadata=ADMIN)
    primary = meta[0].header.route.members[meta[0].header.route.primary]
    proxy = next(i for i, b in enumerate(cluster.brokers) if b.id != primary)

    async def requests():  # type: ignore[no-untyped-def]
        yield pb.AppendRequest(journal=name).SerializeToString()
        yield b"\x12\x02\xff\xfe"

    async with cluster.channel(proxy) as ch:
        call = ch.stream_unary("/protocol.Journal/Append", request_serializer=lambda b: b)
        started = time.monotonic()
        try:
            await call(requests(), metadata=ADMIN, timeout=30)
            got = "OK"
        except grpc.aio.AioRpcError as e:
            got = f"{e.code().name}: {(e.details() or '')[:90]}"
        took = time.monotonic() - started
        garbage = ch.unary_unary("/protocol.Journal/ListFragments", request_serializer=lambda b: b)
        try:
            await garbage(os.urandom(300), metadata=ADMIN, timeout=10)
            random_got = "OK"
        except grpc.aio.AioRpcError as e:
            random_got = f"{e.code().name}: {(e.details() or '')[:90]}"
    print(f"  corrupt frame via a proxy: {got} in {took * 1000:.0f} ms")
    print(f"  300 random bytes as ListFragments: {random_got}")


async def _row_header(cluster: testing.BrokerCluster) -> None:

    out = []
    for port in (cluster.brokers[0].port, cluster.brokers[0].http_port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        big = "Bearer " + "x" * 20_000
        writer.write(
            f"GET /attack/one HTTP/1.1\r\nHost: x\r\nAuthorization: {big}\r\n\r\n".encode()
        )
        line = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
        out.append(line.decode().strip())
        writer.close()
    print(f"  20 KB Authorization on the gateway (gRPC port, HTTP port): {out}")


async def _run(cluster: testing.BrokerCluster) -> None:
    await _row_flood(cluster)
    await _row_applies(cluster)
    await _row_ssrf(cluster)
    await _row_corrupt(cluster)
    await _row_header(cluster)


def main() -> None:

    cache = pathlib.Path(".cache")
    with tempfile.TemporaryDirectory(
        prefix="bench-attacks-", dir=cache if cache.is_dir() else None
    ) as tmp:
        work = pathlib.Path(tmp)
        with (
            ks_testing.EtcdServer(work_dir=work / "etcd") as etcd,
            testing.running_cluster(
                etcd.endpoint,
                work,
                brokers=2,
                extra_args=[
                    "--broker.auth-keys",
                    KEY,
                    "--broker.max-grpc-recv-size",
                    str(64 << 20),
                ],
            ) as cluster,
        ):
            print("attacks (issue 29), 2 brokers with --broker.auth-keys:")
            asyncio.run(_run(cluster))


if __name__ == "__main__":
    main()
