"""stream-sum from Kubernetes: ``kubectl apply`` of its Journals and Shards, consumers run it.

Real parts: a kube-apiserver with the CRDs, the operator, etcd, two broker
processes, PostgreSQL and two consumer processes of ``examples/stream_sum``.
The Shards are the example's own manifests (``examples/stream_sum/shards.yaml``);
the operator writes their ShardSpecs under the consumers' prefix, the consumer
processes pick them up, and the chunker's sums must all be right. Deleting a
Shard object (``deletionPolicy: Delete``) stops the shard.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from apiserver import kubeapi

from gazette.broker import client, testing
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.consumer import protocol as pc
from gazette.consumer import testing as consumer_testing
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "stream_sum"
sys.path.insert(0, str(EXAMPLE))
import stream_sum  # noqa: E402

CLUSTER = {"gazette.dev/cluster": "e2e"}
PARTS = 4


def journal(obj: str, name: str, message_type: str) -> dict[str, Any]:
    return {
        "apiVersion": "gazette.dev/v1alpha1",
        "kind": "Journal",
        "metadata": {"name": obj, "labels": {**CLUSTER, "app": "stream-sum"}},
        "spec": {
            "name": name,
            "replication": 2,
            "labels": [
                {"name": "app.gazette.dev/message-type", "value": message_type},
                {"name": "content-type", "value": "application/x-ndjson"},
            ],
            "fragment": {
                "length": 1 << 24,
                "compressionCodec": "SNAPPY",
                "stores": ["file:///"],
                "refreshInterval": "10s",
                "flushInterval": "1h",
            },
            "deletionPolicy": "Delete",
        },
    }


def manifests() -> list[dict[str, Any]]:
    docs = [
        journal(
            f"stream-sum-chunks-{i:03d}",
            f"examples/stream-sum/chunks/part-{i:03d}",
            stream_sum.CHUNK_TYPE,
        )
        for i in range(PARTS)
    ]
    docs.append(journal("stream-sum-sums", stream_sum.SUMS_JOURNAL, stream_sum.SUM_TYPE))
    for shard in yaml.safe_load_all((EXAMPLE / "shards.yaml").read_text()):
        shard["metadata"]["labels"].update(CLUSTER)
        shard["spec"]["deletionPolicy"] = "Delete"
        docs.append(shard)
    return docs


async def wait_ready(
    kube: kubeapi.KubeAPIServer, namespace: str, plural: str, count: int, kind: str = "Ready"
) -> None:
    async with asyncio.timeout(90):
        while True:
            out = await kube.kubectl_async("get", plural, "-n", namespace, "-o", "yaml")
            items = yaml.safe_load(out.stdout)["items"]
            ready = [
                o
                for o in items
                if any(
                    c.get("type") == kind and c.get("status") == "True"
                    for c in (o.get("status") or {}).get("conditions", [])
                )
            ]
            if len(ready) == count:
                return
            await asyncio.sleep(0.5)


async def test_kubectl_apply_of_stream_sum_runs_its_shards(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    gazette_etcd: ks_testing.EtcdServer,
    etcd_client: Any,
    etcd_roots: tuple[str, str],
    tmp_path: pathlib.Path,
) -> None:
    broker_root, consumers_root = etcd_roots
    prefix = f"{consumers_root}/stream-sum"
    brokers = testing.BrokerCluster(
        gazette_etcd.endpoint,
        work_dir=tmp_path / "brokers",
        brokers=2,
        etcd_prefix=broker_root,
        lease="3s",
    )
    with consumer_testing.PostgresServer(tmp_path / "pg") as pg, brokers:
        dsn = pg.create_database("stream_sum_e2e")
        start_operator(namespace)
        out = await kube.kubectl_async(
            "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(manifests())
        )
        assert out.stdout.count("created") == PARTS + 1 + PARTS, out.stdout
        await wait_ready(kube, namespace, "journals", PARTS + 1)
        # Applied: the ShardSpecs are in etcd (Ready comes once the consumers serve them).
        await wait_ready(kube, namespace, "shards", PARTS, kind="Applied")
        async with brokers.channel(0) as ch:
            stub = pb2_grpc.JournalStub(ch)
            for i in range(PARTS):
                await testing.wait_writable(stub, f"examples/stream-sum/chunks/part-{i:03d}")
            await testing.wait_writable(stub, stream_sum.SUMS_JOURNAL)

        consumers = consumer_testing.ConsumerCluster(
            "stream_sum:Summer",
            etcd_endpoint=gazette_etcd.endpoint,
            etcd_prefix=prefix,
            broker_address=brokers[0].endpoint,
            work_dir=tmp_path / "consumers",
            processes=2,
            lease="3s",
            app_args=["--postgres", dsn],
            env={"PYTHONPATH": str(EXAMPLE)},
        )
        try:
            with consumers:
                async with client.JournalClient(
                    client.ClientConfig(address=brokers[0].endpoint)
                ) as jc:
                    report = await stream_sum.run_chunker(
                        jc, streams=20, chunks_per_stream=20, concurrent=10, sum_timeout=60
                    )
                print(
                    f"\nstream-sum from kubectl: {report.streams} streams, {report.chunks} chunks,"
                    f" {report.correct} correct, {report.mismatched} mismatched,"
                    f" {report.duplicates} duplicates, {report.missing} missing"
                    f" in {report.seconds:.1f}s"
                )
                assert report.ok and report.correct == report.streams, consumers.logs(40)
                # Served: every Shard reports its primary, Ready.
                await wait_ready(kube, namespace, "shards", PARTS)

                # Deleting a Shard object stops its shard: its assignments go.
                await kube.kubectl_async(
                    "delete", "shard", "stream-sum-chunks-part-000", "-n", namespace
                )
                async with asyncio.timeout(60):
                    while True:
                        left = await etcd_client.get_prefix(
                            f"{prefix}/assign/chunks-part-000#".encode()
                        )
                        item = await etcd_client.get(f"{prefix}/items/chunks-part-000".encode())
                        if not left and item is None:
                            break
                        await asyncio.sleep(0.2)
                others = await etcd_client.get_prefix(f"{prefix}/assign/chunks-part-001#".encode())
                codes = sorted(pc.ReplicaStatus.FromString(kv.value).code for kv in others)
                assert pc.ReplicaStatus.PRIMARY in codes
                assert not consumers.exited_on_their_own(), consumers.logs(40)
        finally:
            await kube.kubectl_async(
                "delete", "shards,journals", "--all", "-n", namespace, "--wait=true", check=False
            )
            ks_testing.wipe_prefix(gazette_etcd.endpoint, broker_root + "/")
            ks_testing.wipe_prefix(gazette_etcd.endpoint, consumers_root + "/")
