"""Consumer processes over mutual TLS (Gazette ``--consumer.server-cert-file`` and friends).

Two consumer processes serve ``consumer.Shard`` with TLS, require client
certificates, dial each other with their peer certificate, and reach
``https://`` brokers (real processes that require client certificates too)
with ``--broker.cert-file``:

- they announce ``https://`` endpoints; shards are assigned, consume from and
  publish to the brokers (through the TLS broker client);
- a Stat sent to the process that is not a shard's primary is proxied to it
  over the peers' TLS;
- ``gazctl shards list`` reaches them with ``--consumer.cert-file`` etc., and
  ``/debug/ready`` is served over HTTPS;
- a client without a certificate is refused at the handshake, and a TLS file
  that doesn't load is a usage error naming its flag.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Collection, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from gazette import message
from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.client import AsyncOperation
from gazette.broker.protocol import dial, tlstesting
from gazette.consumer import protocol as pc
from gazette.consumer import runtime
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc
from gazette.consumer.runtime import config, process
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

SOURCE = "rt-tls/in"
OUT = "rt-tls/out"
NDJSON = pb.CONTENT_TYPE_JSON_LINES


class Num(message.JSONMessage):
    pass


@dataclasses.dataclass
class Row:
    fence: int = 0
    checkpoint: bytes = b""


class MemoryStore:
    """A fenced checkpoint in a dict shared by the test's processes."""

    def __init__(self, rows: dict[str, Row], fqn: str) -> None:
        self.rows, self.fqn, self.fence = rows, fqn, 0

    async def restore_checkpoint(self, shard: runtime.Shard) -> pc.Checkpoint:
        row = self.rows.setdefault(self.fqn, Row())
        row.fence += 1
        self.fence = row.fence
        return pc.Checkpoint.FromString(row.checkpoint)

    def start_commit(
        self, shard: runtime.Shard, cp: pc.Checkpoint, wait_for: Collection[AsyncOperation]
    ) -> AsyncOperation:
        async def commit() -> None:
            for op in wait_for:
                await op.wait()
            row = self.rows[self.fqn]
            if row.fence != self.fence:
                raise RuntimeError("fenced out by a newer primary")
            row.checkpoint = cp.SerializeToString()

        return shard.run_operation("commit", commit())

    async def destroy(self) -> None:
        pass


class Echo:
    """Publishes every input number to OUT, in the shard's transaction."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}

    async def new_store(self, shard: runtime.Shard) -> runtime.Store:
        return MemoryStore(self.rows, shard.fqn)

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        return Num()

    async def consume_message(
        self, shard: Any, store: Any, env: message.Envelope, pub: message.Publisher
    ) -> None:
        if message.get_flags(env.message.get_uuid()) == message.Flags.ACK_TXN:
            return
        doc = env.message.doc  # type: ignore[attr-defined]
        pub.publish_uncommitted(lambda _m: (OUT, NDJSON), Num({"UUID": "", "n": doc["n"]}))

    async def finalize_txn(self, shard: Any, store: Any, pub: message.Publisher) -> None:
        pass


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tlstesting.Certs:
    return tlstesting.make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def brokers(
    etcd_server: ks_testing.EtcdServer, certs: tlstesting.Certs, tmp_path: pathlib.Path
) -> Iterator[testing.BrokerCluster]:
    with testing.running_cluster(
        etcd_server.endpoint, tmp_path / "brokers", brokers=2, tls=certs
    ) as c:
        yield c


@pytest.fixture
async def jc(
    brokers: testing.BrokerCluster, certs: tlstesting.Certs
) -> AsyncIterator[client.JournalClient]:
    tls = certs.client_tls()
    cfg = client.ClientConfig(
        address=brokers[0].endpoint,
        cert_file=tls.cert_file,
        cert_key_file=tls.key_file,
        trusted_ca_file=tls.ca_file,
    )
    async with client.JournalClient(cfg) as jc:
        req = pb.ApplyRequest()
        for name in (SOURCE, OUT):
            spec = testing.journal_spec(
                name, replication=2, labels=[(pb.LABEL_CONTENT_TYPE, NDJSON)]
            )
            req.changes.add(upsert=spec)
        await client.apply_journals(jc, req)
        async with asyncio.timeout(60):
            for name in (SOURCE, OUT):
                while True:
                    try:
                        await asyncio.wait_for(client.append(jc, name, b""), 5)
                        break
                    except (client.errors.ClientError, TimeoutError):
                        await asyncio.sleep(0.2)
        yield jc


def consumer_config(
    etcd: str, broker: str, certs: tlstesting.Certs, suffix: str, *extra: str
) -> config.Config:
    return config.parse(
        [
            "--consumer.app", "unused:Unused",
            "--consumer.zone", "zone-a",
            "--consumer.id", suffix,
            "--consumer.host", "127.0.0.1",
            "--broker.address", broker,
            "--etcd.address", etcd,
            "--etcd.prefix", "/gazette/consumers/rt-tls",
            "--etcd.lease", "3s",
            "--consumer.drain-timeout", "5s",
            *certs.broker_args("consumer"),
            *certs.client_args(),
            *extra,
        ],
        env={},
    )  # fmt: skip


async def test_consumers_serve_and_proxy_over_mtls_and_reach_tls_brokers(
    etcd: Any,  # First, so that its teardown wipes the shard specs after all else stopped.
    etcd_server: ks_testing.EtcdServer,
    brokers: testing.BrokerCluster,
    jc: client.JournalClient,
    certs: tlstesting.Certs,
) -> None:
    app = Echo()
    stops = [asyncio.Event(), asyncio.Event()]
    starts: list[asyncio.Future[process.Serving]] = []
    async with asyncio.TaskGroup() as tg:
        for i, stop in enumerate(stops):
            cfg = consumer_config(etcd_server.endpoint, brokers[i].endpoint, certs, f"consumer-{i}")
            fut: asyncio.Future[process.Serving] = asyncio.get_running_loop().create_future()
            starts.append(fut)
            tg.create_task(process.serve(cfg, app, stop=stop, started=fut))
        try:
            async with asyncio.timeout(30):
                serving = await asyncio.gather(*starts)
            assert all(s.endpoint.startswith("https://127.0.0.1:") for s in serving)
            await _exercise(serving, jc, certs)
        finally:
            for stop in stops:
                stop.set()


async def _exercise(
    serving: list[process.Serving], jc: client.JournalClient, certs: tlstesting.Certs
) -> None:
    client_tls = dial.DialConfig(tls=certs.client_tls())
    async with dial.channel(serving[0].endpoint, client_tls) as ch:
        stub = pc_grpc.ShardStub(ch)
        spec = pc.ShardSpec(id="shard-tls", hot_standbys=1)
        spec.sources.add(journal=SOURCE)
        spec.max_txn_duration.CopyFrom(duration_pb2.Duration(nanos=200_000_000))
        resp = await stub.Apply(pc.ApplyRequest(changes=[pc.ApplyRequest.Change(upsert=spec)]))
        assert resp.status == pc.Status.OK
        async with asyncio.timeout(40):
            while True:
                listed = await stub.List(pc.ListRequest())
                codes = [sorted(s.code for s in sh.status) for sh in listed.shards]
                if codes == [[pc.ReplicaStatus.STANDBY, pc.ReplicaStatus.PRIMARY]]:
                    break
                await asyncio.sleep(0.1)
        route = listed.shards[0].route
        assert all(ep.startswith("https://") for ep in route.endpoints)

    # Consume over the TLS broker client, and publish in transactions.
    head = (
        await client.append(jc, SOURCE, b'{"UUID":"00000000-0000-0000-0000-000000000000","n":42}\n')
    ).commit.end
    # Stat with a read barrier at both processes: the standby proxies to the primary.
    for s in serving:
        async with dial.channel(s.endpoint, client_tls) as ch:
            stat = await pc_grpc.ShardStub(ch).Stat(
                pc.StatRequest(shard="shard-tls", read_through={SOURCE: head}), timeout=30
            )
            assert stat.status == pc.Status.OK, pc.Status.Name(stat.status)
            assert stat.read_through[SOURCE] >= head
    seq = message.Sequencer({}, [], 256)
    got: list[int] = []
    async with asyncio.timeout(30):
        while 42 not in got:
            got = []
            req = pb.ReadRequest(journal=OUT, offset=0, block=False)
            async with message.ReadCommittedIter(jc, req, lambda _s: Num(), seq) as it:
                async for env in it:
                    if message.get_flags(env.message.get_uuid()) != message.Flags.ACK_TXN:
                        got.append(int(env.message.doc["n"]))  # type: ignore[attr-defined]
            seq = message.Sequencer({}, [], 256)
            await asyncio.sleep(0.1)

    # gazctl shards, over mTLS with Gazette's --consumer.cert-file etc.
    tls = certs.client_tls()
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "gazette.gazctl", "shards", "list",
         "--consumer.address", serving[1].endpoint,
         "--consumer.cert-file", tls.cert_file,
         "--consumer.cert-key-file", tls.key_file,
         "--consumer.trusted-ca-file", tls.ca_file],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split()[:2] == ["shard-tls", "PRIMARY"], out.stdout

    # /debug/ready is served over HTTPS with the same certificate.
    url = f"https://127.0.0.1:{serving[0].http_port}/debug/ready"
    ready = await asyncio.to_thread(
        lambda: urllib.request.urlopen(url, timeout=10, context=certs.client_ssl_context()).read()
    )
    assert ready == b"ready\n"

    # No client certificate: refused at the handshake.
    no_cert = dial.DialConfig(tls=dial.TLS(ca_file=str(certs.ca_file)))
    async with dial.channel(serving[0].endpoint, no_cert) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pc_grpc.ShardStub(ch).List(pc.ListRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_consumer_tls_files_that_do_not_load_are_usage_errors(
    certs: tlstesting.Certs, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.crt")

    def error_of(*extra: str) -> str:
        with pytest.raises(SystemExit):
            consumer_config("http://x:1", "https://x:1", certs, "c-tls-0", *extra)
        return capsys.readouterr().err.splitlines()[-1]

    err = error_of("--consumer.peer-ca-file", missing)
    assert "error: --consumer.peer-ca-file: reading" in err and "nope.crt" in err, err
    err = error_of("--broker.cert-file", missing)
    assert "--broker.cert-file" in err and "nope.crt" in err, err
    cfg = consumer_config("http://x:1", "https://x:1", certs, "c-tls-0", "--consumer.port", "9443")
    assert cfg.consumer.endpoint == "https://127.0.0.1:9443"
