"""``gazctl shards list --lag`` against a real broker and a consumer process reading.

Real parts: etcd, an in-process broker, and an in-process consumer process whose
one shard counts JSON messages into an in-memory store. The application holds
its messages at a gate: the lag shows what the shard has yet to read, then falls
to 0 once the gate opens and the shard catches up.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import time
from typing import Any

import pytest
from click.testing import CliRunner, Result
from google.protobuf import duration_pb2

from gazette import keyspace, message
from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.server import testing as server_testing
from gazette.consumer import protocol as pc
from gazette.consumer import runtime
from gazette.consumer import testing as consumer_testing
from gazette.gazctl import cli
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SOURCE = "lag/in"
PREFIX = "/gazette/consumers/gazctl-lag"
NDJSON = pb.CONTENT_TYPE_JSON_LINES


class Num(message.JSONMessage):
    pass


class GatedCount:
    """Counts messages, each only once ``gate`` is open."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.seen = 0

    async def new_store(self, shard: runtime.Shard) -> runtime.Store:
        return consumer_testing.MemoryStore()

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        return Num()

    async def consume_message(
        self, shard: Any, store: Any, env: message.Envelope, pub: message.Publisher
    ) -> None:
        await self.gate.wait()
        self.seen += 1

    async def finalize_txn(self, shard: Any, store: Any, pub: message.Publisher) -> None:
        pass


async def _gaz(broker: str, consumer: str, *args: str) -> Result:
    env = {"BROKER_ADDRESS": broker, "CONSUMER_ADDRESS": consumer}
    result = await asyncio.to_thread(CliRunner().invoke, cli.gazctl, list(args), env=env)
    assert result.exit_code == 0, f"gazctl {' '.join(args)}: {result.output}"
    return result


def _json_lag(result: Result) -> Any:
    """The ``lag`` member of the one shard of ``shards list --lag -o json``."""
    (shard,) = json.loads(result.output)["shards"]
    return shard["lag"]


async def _listed_until(broker: str, consumer: str, text: str, within: float = 30) -> str:
    """`gazctl shards list --lag`, again until its table shows ``text``."""
    deadline = time.monotonic() + within
    while True:
        out = (await _gaz(broker, consumer, "shards", "list", "--lag")).output
        if text in out:
            return out
        assert time.monotonic() < deadline, out
        await asyncio.sleep(0.2)


async def test_lag_shows_unread_bytes_and_falls_to_zero_once_caught_up(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    async with (
        server_testing.InProcessCluster(etcd_server.endpoint, work_dir=tmp_path, brokers=1) as c,
        client.JournalClient(client.ClientConfig(address=c[0].endpoint)) as jc,
    ):
        spec = testing.journal_spec(SOURCE, labels=[(pb.LABEL_CONTENT_TYPE, NDJSON)])
        await client.apply_journals(
            jc, pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec)])
        )
        async with asyncio.timeout(30):
            while True:
                try:
                    await asyncio.wait_for(client.append(jc, SOURCE, b""), 5)
                    break
                except (client.errors.ClientError, TimeoutError):
                    await asyncio.sleep(0.1)
        shard = pc.ShardSpec(id="shard-lag")
        shard.sources.add(journal=SOURCE)
        shard.max_txn_duration.CopyFrom(duration_pb2.Duration(nanos=100_000_000))
        await keyspace.apply_changes(etcd, PREFIX, [("shard-lag", shard.SerializeToString(), 0)])

        app = GatedCount()
        args = consumer_testing.argv(etcd=etcd_server.endpoint, broker=c[0].endpoint, prefix=PREFIX)
        async with consumer_testing.serving(args, app) as srv:
            broker, consumer = c[0].endpoint, srv.endpoint
            body = b"".join(
                b'{"UUID":"00000000-0000-0000-0000-000000000000","n":%d}\n' % i for i in range(50)
            )
            head = (await client.append(jc, SOURCE, body)).commit.end

            # Held at the gate: nothing is committed, so the whole journal is unread.
            out = await _listed_until(broker, consumer, f"{SOURCE}:{head}")
            assert re.search(r"^ID\s+Status\s+Primary\s+Replicas\s+Lag$", out, re.M), out
            yaml_out = (
                await _gaz(broker, consumer, "shards", "list", "--lag", "-o", "yaml")
            ).output
            assert f"comment: {SOURCE} read through 0, lag {head} bytes" in yaml_out, yaml_out
            assert _json_lag(
                await _gaz(broker, consumer, "shards", "list", "--lag", "-o", "json")
            ) == {
                "sources": [
                    {"journal": SOURCE, "read_through": 0, "write_head": head, "lag": head}
                ],
                "total": head,
            }

            app.gate.set()
            out = await _listed_until(broker, consumer, f"{SOURCE}:0")
            assert app.seen == 50
            yaml_out = (
                await _gaz(broker, consumer, "shards", "list", "--lag", "-o", "yaml")
            ).output
            assert f"comment: {SOURCE} read through {head}, lag 0 bytes" in yaml_out, yaml_out
            assert _json_lag(
                await _gaz(broker, consumer, "shards", "list", "--lag", "-o", "json")
            ) == {
                "sources": [
                    {"journal": SOURCE, "read_through": head, "write_head": head, "lag": 0}
                ],
                "total": 0,
            }


async def test_lag_of_a_shard_without_a_primary_says_why(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    async with server_testing.InProcessCluster(
        etcd_server.endpoint, work_dir=tmp_path, brokers=1
    ) as c:
        shard = pc.ShardSpec(id="shard-off", disable=True)
        shard.sources.add(journal=SOURCE)
        shard.max_txn_duration.CopyFrom(duration_pb2.Duration(seconds=1))
        prefix = PREFIX + "-off"
        await keyspace.apply_changes(etcd, prefix, [("shard-off", shard.SerializeToString(), 0)])
        args = consumer_testing.argv(etcd=etcd_server.endpoint, broker=c[0].endpoint, prefix=prefix)
        async with consumer_testing.serving(args, consumer_testing.DisabledShards()) as srv:
            out = (await _gaz(c[0].endpoint, srv.endpoint, "shards", "list", "--lag")).output
            assert re.search(r"shard-off\s+.*<NO_SHARD_PRIMARY>", out), out
            said = await _gaz(c[0].endpoint, srv.endpoint, "shards", "list", "--lag", "-o", "json")
            assert _json_lag(said) == {"error": "NO_SHARD_PRIMARY"}, said.output
