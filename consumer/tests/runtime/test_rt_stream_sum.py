"""stream-sum under faults: exactly-once on a real cluster, with processes SIGKILLed at random.

Real parts: etcd, 3 broker processes (RF 2 over 2 zones), PostgreSQL, 3 consumer
processes running ``examples/stream_sum`` (the summer, 1 hot standby per shard),
once with the SQL store and once with a JSON store recorded into each shard's
recovery log (hot standbys replay it; a promoted one hands it off). The chunker (in the test) writes interleaved streams of chunks and
checks every Sum; meanwhile consumers and brokers are SIGKILLed and restarted,
at least ``STREAM_SUM_KILLS`` times (10 by default) while ``STREAM_SUM_STREAMS``
streams (60) of 40 chunks are written. Every stream's Sum must
arrive once and be right: 0 mismatched, 0 duplicated, 0 missing; and no shard
may have failed (a duplicated or lost chunk fails the summer's SeqNo check).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gazette import keyspace
from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.consumer import testing as consumer_testing
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "stream_sum"
sys.path.insert(0, str(EXAMPLE))
import stream_sum  # noqa: E402

KILLS = int(os.environ.get("STREAM_SUM_KILLS", "10"))
STREAMS = int(os.environ.get("STREAM_SUM_STREAMS", "60"))
PARTS = 4


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with consumer_testing.PostgresServer(tmp_path_factory.mktemp("pg")) as server:
        yield server


RECOVERY_LOGS = "examples/stream-sum/recovery-logs"


def journal_specs(store_url: str, recovery: bool = False) -> list[pb.JournalSpec]:
    ndjson = (pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)
    specs = [
        testing.journal_spec(
            f"examples/stream-sum/chunks/part-{i:03d}",
            replication=2,
            stores=[store_url],
            labels=[ndjson, ("app.gazette.dev/message-type", stream_sum.CHUNK_TYPE)],
        )
        for i in range(PARTS)
    ]
    specs.append(
        testing.journal_spec(
            stream_sum.SUMS_JOURNAL,
            replication=2,
            stores=[store_url],
            labels=[ndjson, ("app.gazette.dev/message-type", stream_sum.SUM_TYPE)],
        )
    )
    if recovery:
        specs += [
            testing.journal_spec(
                f"{RECOVERY_LOGS}/chunks-part-{i:03d}",
                replication=2,
                stores=[store_url],
                labels=[(pb.LABEL_CONTENT_TYPE, "application/x-gazette-recoverylog")],
            )
            for i in range(PARTS)
        ]
    return specs


def shard_specs(recovery: bool = False) -> list[pc.ShardSpec]:
    """The Shard manifests of the example, as the operator would write them (with a
    recovery log each, and hints, when ``recovery``)."""
    from gazette.operator import mapping

    docs = list(yaml.safe_load_all((EXAMPLE / "shards.yaml").read_text()))
    specs = [mapping.shard_spec(d["spec"]) for d in docs]
    assert len(specs) == PARTS
    for spec in specs if recovery else ():
        spec.recovery_log_prefix = RECOVERY_LOGS
        spec.hint_prefix = "/gazette/hints/examples/stream-sum"
        spec.hint_backups = 2
    return specs


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


async def _failed_shards(etcd: Any, prefix: str) -> list[str]:
    out = []
    for kv in await etcd.get_prefix(f"{prefix}/assign/".encode()):
        status = pc.ReplicaStatus.FromString(kv.value)
        if status.code == pc.ReplicaStatus.FAILED:
            out.append(f"{kv.key.decode()}: {list(status.errors)}")
    return out


@pytest.mark.parametrize("store", ["postgres", "recovery-log"])
async def test_stream_sum_exactly_once_under_sigkills(
    store: str,
    etcd_server: ks_testing.EtcdServer,
    etcd: Any,
    postgres: Any,
    tmp_path: pathlib.Path,
) -> None:
    prefix = f"/gazette/consumers/stream-sum-{store}"
    recovery = store == "recovery-log"
    dsn = postgres.create_database(f"stream_sum_{store.replace('-', '_')}")
    rng = random.Random(int(os.environ.get("STREAM_SUM_SEED", str(time.time_ns()))))
    with testing.running_cluster(
        etcd_server.endpoint, tmp_path / "brokers", brokers=3, lease="3s"
    ) as brokers:
        async with client.JournalClient(client.ClientConfig(address=brokers[0].endpoint)) as jc:
            req = pb.ApplyRequest()
            for spec in journal_specs(brokers.store_url, recovery):
                req.changes.add(upsert=spec)
            await client.apply_journals(jc, req)
            for spec in journal_specs(brokers.store_url, recovery):
                async with brokers.channel(0) as ch:
                    from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc

                    await testing.wait_writable(pb2_grpc.JournalStub(ch), spec.name)
            await keyspace.apply_changes(
                etcd, prefix, [(s.id, s.SerializeToString(), 0) for s in shard_specs(recovery)]
            )
            consumers = consumer_testing.ConsumerCluster(
                "stream_sum:Summer",
                etcd_endpoint=etcd_server.endpoint,
                etcd_prefix=prefix,
                broker_address=",".join(b.endpoint for b in brokers.brokers[:1]),
                work_dir=tmp_path / "consumers",
                processes=3,
                zones=("zone-a", "zone-b", "zone-c"),
                lease="3s",
                app_args=["--postgres", dsn],
                env={"PYTHONPATH": str(EXAMPLE)},
            )
            with consumers:
                kills = {"consumer": 0, "broker": 0}

                async def chaos() -> None:
                    # Broker 0 is the one clients dial: the others are killed.
                    while sum(kills.values()) < KILLS:
                        await asyncio.sleep(rng.uniform(0.5, 2.0))
                        if rng.random() < 0.6:
                            i = rng.randrange(len(consumers))
                            await asyncio.to_thread(consumers.kill, i)
                            kills["consumer"] += 1
                            await asyncio.sleep(rng.uniform(0.0, 2.0))
                            await asyncio.to_thread(consumers.restart, i)
                        else:
                            i = rng.randrange(1, len(brokers))
                            await asyncio.to_thread(brokers.kill, i)
                            kills["broker"] += 1
                            await asyncio.sleep(rng.uniform(0.0, 2.0))
                            await asyncio.to_thread(brokers.restart, i)

                chaos_task = asyncio.create_task(chaos())
                try:
                    report = await stream_sum.run_chunker(
                        jc,
                        streams=STREAMS,
                        chunks_per_stream=40,
                        concurrent=20,
                        sum_timeout=120.0,
                        pace=0.015,
                    )
                finally:
                    async with asyncio.timeout(180):
                        await chaos_task
                failed = await _failed_shards(etcd, prefix)
                print(
                    f"\nstream-sum ({store}): {report.streams} streams, {report.chunks} chunks,"
                    f" {report.sums} sums: {report.correct} correct, {report.mismatched}"
                    f" mismatched, {report.duplicates} duplicates, {report.missing} missing"
                    f" (gaps) in {report.seconds:.1f}s; SIGKILLs: {kills}; failed shards: {failed}"
                )
                assert sum(kills.values()) >= KILLS
                assert report.duplicates == 0 and report.mismatched == 0 and report.missing == 0, (
                    consumers.logs(60)
                )
                assert report.correct == report.streams
                assert not failed, consumers.logs(60)
                assert not consumers.exited_on_their_own(), consumers.logs(60)
                # Each process serves Prometheus metrics: transactions, messages, lag per shard.
                texts = [
                    await asyncio.to_thread(_get, f"http://127.0.0.1:{p.http_port}/debug/metrics")
                    for p in consumers.processes
                ]
                joined = "\n".join(texts)
                for name in (
                    "gazette_shard_transactions_total",
                    "gazette_shard_read_messages_total",
                    "gazette_shard_lag_bytes",
                    "gazette_shard_up",
                ):
                    assert f"{name}{{" in joined, name
                assert not brokers.exited_on_their_own(), brokers.logs(60)
