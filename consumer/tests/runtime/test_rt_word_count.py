"""word-count under faults: recorded SQLite stores, hot standbys taking over, counts exact.

Real parts: etcd, 2 broker processes, 3 consumer processes of
``examples/word_count`` (4 shards, each with a recovery log and 1 hot standby,
over 3 zones). While texts are published (their n-gram counts kept in a model
here), a shard's primary is SIGKILLed ``WORD_COUNT_KILLS`` times (10 by
default); every other time its local directory is deleted first, as if the
node's disk went with it. Each time the time from the kill until another
process serves the shard as PRIMARY is measured: it must stay under the
consumer lease + 3 s. At the end every shard is read through the published
offsets (``Stat``) and queried (``NGram.Query``, forwarded to the primary by
whichever process is asked): the counts must equal the model exactly.
"""

from __future__ import annotations

import asyncio
import collections
import os
import pathlib
import random
import shutil
import sys
import time
from typing import Any

import pytest
import yaml

from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.protocol import dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.consumer import protocol as pc
from gazette.consumer import testing as consumer_testing
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "word_count"
sys.path.insert(0, str(EXAMPLE))
import word_count  # noqa: E402
import word_count_pb2 as wc  # noqa: E402
import word_count_pb2_grpc as wc_grpc  # noqa: E402

KILLS = int(os.environ.get("WORD_COUNT_KILLS", "10"))
LEASE_S = 3.0
PREFIX = "/gazette/consumers/word-count"
VOCABULARY = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "gazette",
    "journal",
    "broker",
    "shard",
    "append",
    "fragment",
    "replica",
    "standby",
    "primary",
    "recovery",
    "log",
    "etcd",
    "zone",
]


def journal_specs(store_url: str) -> list[pb.JournalSpec]:
    specs = [
        testing.journal_spec(
            f"examples/word-count/deltas/part-{i:03d}",
            replication=2,
            stores=[store_url],
            labels=[
                (pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_PROTOBUF_FIXED),
                ("app.gazette.dev/message-type", word_count.MESSAGE_TYPE),
            ],
        )
        for i in range(4)
    ]
    specs += [
        testing.journal_spec(
            f"examples/word-count/recovery-logs/shard-{i:03d}",
            replication=2,
            stores=[store_url],
            labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_RECOVERYLOG)],
        )
        for i in range(4)
    ]
    return specs


def shard_specs() -> list[pc.ShardSpec]:
    from gazette.operator import mapping

    docs = yaml.safe_load_all((EXAMPLE / "shards.yaml").read_text())
    return [mapping.shard_spec(d["spec"]) for d in docs]


async def assignments(etcd: Any) -> dict[str, list[tuple[int, str, int]]]:
    """Per shard: (slot, member suffix, status code) of each assignment."""
    out: dict[str, list[tuple[int, str, int]]] = collections.defaultdict(list)
    for kv in await etcd.get_prefix(f"{PREFIX}/assign/".encode()):
        shard, _zone, suffix, slot = kv.key.decode()[len(PREFIX) + 8 :].split("#")
        out[shard].append((int(slot), suffix, pc.ReplicaStatus.FromString(kv.value).code))
    return out


def primary_of(rows: list[tuple[int, str, int]]) -> str | None:
    for slot, suffix, code in rows:
        if slot == 0 and code == pc.ReplicaStatus.PRIMARY:
            return suffix
    return None


async def wait_all_ready(etcd: Any, shards: list[str], limit_s: float = 90.0) -> None:
    """Until every shard has a PRIMARY and a STANDBY."""
    deadline = time.monotonic() + limit_s
    while True:
        a = await assignments(etcd)
        if all(
            primary_of(a[s]) and any(c == pc.ReplicaStatus.STANDBY for _, _, c in a[s])
            for s in shards
        ):
            return
        assert time.monotonic() < deadline, f"shards not ready: {dict(a)}"
        await asyncio.sleep(0.1)


async def test_word_count_standbys_take_over_and_counts_stay_exact(
    etcd_server: ks_testing.EtcdServer, etcd: Any, tmp_path: pathlib.Path
) -> None:
    from gazette import keyspace

    rng = random.Random(int(os.environ.get("WORD_COUNT_SEED", str(time.time_ns()))))
    specs = shard_specs()
    shard_ids = [s.id for s in specs]
    with testing.running_cluster(
        etcd_server.endpoint, tmp_path / "brokers", brokers=2, lease="3s"
    ) as brokers:
        async with client.JournalClient(client.ClientConfig(address=brokers[0].endpoint)) as jc:
            req = pb.ApplyRequest()
            for spec in journal_specs(brokers.store_url):
                req.changes.add(upsert=spec)
            await client.apply_journals(jc, req)
            async with brokers.channel(0) as ch:
                for spec in journal_specs(brokers.store_url):
                    await testing.wait_writable(pb2_grpc.JournalStub(ch), spec.name)
            await keyspace.apply_changes(
                etcd, PREFIX, [(s.id, s.SerializeToString(), 0) for s in specs]
            )
            consumers = consumer_testing.ConsumerCluster(
                "word_count:Counter",
                etcd_endpoint=etcd_server.endpoint,
                etcd_prefix=PREFIX,
                broker_address=brokers[0].endpoint,
                work_dir=tmp_path / "consumers",
                processes=3,
                zones=("zone-a", "zone-b", "zone-c"),
                lease=f"{LEASE_S:.0f}s",
                env={"PYTHONPATH": str(EXAMPLE)},
            )
            # Each process keeps its shards' local stores under a TMPDIR of its own.
            local_dirs = []
            for i, p in enumerate(consumers.processes):
                d = tmp_path / f"local-{i}"
                d.mkdir()
                local_dirs.append(d)
                p.env = {**p.env, "TMPDIR": str(d)}
            with consumers:
                await wait_all_ready(etcd, shard_ids)
                model: collections.Counter[str] = collections.Counter()
                stop = asyncio.Event()
                published = 0

                async def writer() -> None:
                    nonlocal published
                    deltas = word_count.Deltas(jc)
                    async with client.AppendService(jc) as appends:
                        while not stop.is_set():
                            text = " ".join(rng.choices(VOCABULARY, k=rng.randrange(3, 12)))
                            await deltas.publish(appends, text)
                            model.update(word_count.count_text(text))
                            published += 1
                            await asyncio.sleep(0.005)

                writer_task = asyncio.create_task(writer())
                takeovers: list[tuple[str, str, float]] = []
                try:
                    for k in range(KILLS):
                        await asyncio.sleep(rng.uniform(0.5, 1.5))
                        sid = rng.choice(shard_ids)
                        # The allocator may be handing the shard back to the restarted
                        # process (slot 0 not yet PRIMARY): kill its primary once it has one.
                        deadline = time.monotonic() + 60
                        while (old := primary_of((a := await assignments(etcd))[sid])) is None:
                            assert time.monotonic() < deadline, f"{sid}: no primary: {dict(a)}"
                            await asyncio.sleep(0.05)
                        i = int(old.rsplit("-", 1)[1])
                        mode = "sigkill" if k % 2 == 0 else "wipe+sigkill"
                        if mode == "wipe+sigkill":
                            for d in local_dirs[i].glob(f"{sid}-*"):
                                shutil.rmtree(d, ignore_errors=True)
                        t0 = time.monotonic()
                        await asyncio.to_thread(consumers.kill, i)
                        while True:
                            now = await assignments(etcd)
                            new = primary_of(now[sid])
                            if new is not None and new != old:
                                break
                            assert time.monotonic() - t0 < 60, f"{sid}: no takeover: {dict(now)}"
                            await asyncio.sleep(0.05)
                        takeovers.append((sid, mode, time.monotonic() - t0))
                        await asyncio.to_thread(consumers.restart, i)
                        await wait_all_ready(etcd, shard_ids)
                finally:
                    stop.set()
                    async with asyncio.timeout(60):
                        await writer_task

                # Read every shard through what was published, then query it.
                heads = {
                    s.sources[0].journal: int(
                        (await client.append(jc, s.sources[0].journal, b"")).commit.end
                    )
                    for s in specs
                }
                got: collections.Counter[str] = collections.Counter()
                async with dial.channel(consumers[0].endpoint) as ch:
                    for s in specs:
                        journal = s.sources[0].journal
                        deadline = time.monotonic() + 60
                        while True:
                            stat = await pc_grpc.ShardStub(ch).Stat(
                                pc.StatRequest(shard=s.id, read_through={journal: heads[journal]}),
                                timeout=30,
                            )
                            if stat.status == pc.Status.OK:
                                break
                            assert time.monotonic() < deadline, pc.Status.Name(stat.status)
                            await asyncio.sleep(0.2)
                        resp = await wc_grpc.NGramStub(ch).Query(
                            wc.QueryRequest(shard=s.id), timeout=30
                        )
                        for g in resp.grams:
                            assert g.n_gram not in got, f"{g.n_gram} counted by two shards"
                            got[g.n_gram] = g.count
                    # A query by prefix finds its shard by the mapping.
                    some = next(iter(model))
                    by_prefix = await wc_grpc.NGramStub(ch).Query(
                        wc.QueryRequest(prefix=some), timeout=30
                    )
                    assert {g.n_gram: g.count for g in by_prefix.grams}[some] == model[some]

                worst = max(t for _, _, t in takeovers)
                print(
                    f"\nword-count: {published} texts, {sum(model.values())} n-grams,"
                    f" {len(model)} distinct; {len(takeovers)} SIGKILLed primaries;"
                    f" takeover s: "
                    + ", ".join(f"{sid}/{mode} {t:.2f}" for sid, mode, t in takeovers)
                    + f"; worst {worst:.2f} (limit {LEASE_S + 3:.1f})"
                )
                missing = {g: n for g, n in model.items() if got.get(g) != n}
                assert not missing, f"{len(missing)} wrong counts, e.g. {list(missing.items())[:5]}"
                assert got == model
                assert worst < LEASE_S + 3, takeovers
                assert not consumers.exited_on_their_own(), consumers.logs(60)
        assert not brokers.exited_on_their_own(), brokers.logs(60)
