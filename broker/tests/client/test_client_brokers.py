"""The client against real broker processes (etcd, file:// and S3 stores)."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest

from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.client import metrics
from gazette.broker.fragment import testing as fragment_testing

pytestmark = pytest.mark.integration


def _config(cluster: testing.BrokerCluster, i: int = 0, **kw: object) -> client.ClientConfig:
    return client.ClientConfig(address=cluster[i].endpoint, **kw)  # type: ignore[arg-type]


async def _create(jc: client.JournalClient, *specs: pb.JournalSpec, within: float = 60.0) -> None:
    req = pb.ApplyRequest()
    for spec in specs:
        req.changes.add(upsert=spec)
    await client.apply_journals(jc, req)
    # Wait until every journal is assigned and writable (a zero-byte append commits nothing).
    deadline = time.monotonic() + within
    for spec in specs:
        while True:
            try:
                await asyncio.wait_for(client.append(jc, spec.name, b""), 10)
                break
            except (client.errors.ClientError, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)


async def _read_all(jc: client.JournalClient, journal: str, **fields: object) -> bytes:
    rr = client.RetryReader(jc, pb.ReadRequest(journal=journal, **fields))  # type: ignore[arg-type]
    async with rr:
        return b"".join([c async for c in rr])


async def test_concurrent_appends_to_many_journals_keep_order(
    brokers: testing.BrokerCluster,
) -> None:
    prefix = f"order-{uuid.uuid4().hex[:6]}/"
    journals = [f"{prefix}j{i}" for i in range(8)]
    writers, records = 4, 150
    async with client.JournalClient(_config(brokers, cache_size=64, zone="zone-a")) as jc:
        await _create(
            jc,
            *(testing.journal_spec(j, replication=2, stores=[brokers.store_url]) for j in journals),
        )
        await client.list_journals(jc, f"name:prefix={prefix}")  # Warm the route cache.

        async def writer(svc: client.AppendService, w: int) -> list[client.AsyncAppend]:
            out = []
            for s in range(records):
                journal = journals[(w * 7 + s) % len(journals)]
                out.append(svc.append(journal, b"<w%d.s%03d>\n" % (w, s)))
                if s % 10 == 0:
                    await asyncio.sleep(0)
            return out

        async with client.AppendService(jc) as svc, asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(writer(svc, w)) for w in range(writers)]
        appends = [aa for t in tasks for aa in t.result()]
        assert all(aa.done() and aa.error is None for aa in appends)
        # Batching: far fewer appends than records.
        assert len({id(aa) for aa in appends}) < writers * records

        seen = 0
        for j in journals:
            content = await _read_all(jc, j)
            recs = re.findall(rb"<w(\d)\.s(\d{3})>\n", content)
            assert b"".join(b"<w%s.s%s>\n" % r for r in recs) == content  # Nothing torn.
            seen += len(recs)
            for w in range(writers):
                mine = [int(s) for ww, s in recs if int(ww) == w]
                assert mine == sorted(mine) and len(set(mine)) == len(mine)
        assert seen == writers * records


async def test_read_survives_its_broker_being_killed(brokers: testing.BrokerCluster) -> None:
    journal = f"kill-{uuid.uuid4().hex[:6]}/journal"
    line = b"%08d " + b"x" * 1014 + b"\n"  # 1 KiB records, each numbered.
    total = 3000
    async with client.JournalClient(_config(brokers, 0)) as admin:
        await _create(
            admin,
            testing.journal_spec(
                journal, replication=3, stores=[brokers.store_url], length=256 * 1024
            ),
        )
        # Half the records now, the rest while the reader runs.
        await client.append(admin, journal, b"".join(line % i for i in range(total // 2)))

    # The reader keeps routes, prefers zone-b members, and doesn't let brokers proxy.
    cfg = _config(brokers, 0, cache_size=16, zone="zone-b")
    async with client.JournalClient(cfg) as jc, client.JournalClient(_config(brokers, 0)) as wc:
        await client.list_journals(jc, f"name={journal}")
        rr = client.RetryReader(jc, pb.ReadRequest(journal=journal, offset=0, block=True))
        got = bytearray()
        got += await rr.read()
        victim_endpoint = rr.reader.dispatched_to
        assert victim_endpoint, "the read went straight to a route member"
        victim = next(i for i, b in enumerate(brokers) if b.endpoint == victim_endpoint)
        assert victim != 0  # zone-b members are brokers 1 and 3; the writer uses broker 0.

        async def write_rest() -> None:  # Through broker 0, never the one killed.
            async with client.AppendService(wc) as svc:
                for i in range(total // 2, total):
                    svc.append(journal, line % i)
                    if i % 50 == 0:
                        await asyncio.sleep(0.01)

        async def read_while_writing() -> None:
            while True:
                got.extend(await rr.read())

        try:
            async with asyncio.timeout(90), asyncio.TaskGroup() as tg:
                reading = tg.create_task(read_while_writing())
                await asyncio.sleep(0.2)
                brokers.kill(victim)
                await write_rest()
                # The reader may be blocked at the head by now, which no empty append
                # wakes (that hung this test once): stop it. A read cut short loses
                # nothing, as its offset moves only with what it returned.
                reading.cancel()
            # Everything the journal holds now, read afresh from broker 0.
            final = await _read_all(wc, journal)
            async with asyncio.timeout(60):
                while len(got) < len(final):
                    got.extend(await rr.read())
        finally:
            await rr.close()
            brokers.restart(victim)

    # The read neither skipped nor repeated a byte across the kill.
    assert bytes(got) == final
    # Every record is there, first seen in the order written. (A batch whose
    # acknowledgement died with its broker is retried and may land twice: appends
    # are at least once; consumers de-duplicate by message UUID.)
    numbers = [int(n) for n in re.findall(rb"(\d{8}) x+\n", final)]
    assert len(numbers) * len(line % 0) == len(final)
    assert list(dict.fromkeys(numbers)) == list(range(total))


async def test_signed_url_read_from_s3(
    brokers: testing.BrokerCluster, s3_bucket: fragment_testing.S3Bucket
) -> None:
    journal = f"s3-{uuid.uuid4().hex[:6]}/journal"
    store = s3_bucket.store_url("fragments/")
    block = b"".join(b"%06d some log text to compress\n" % i for i in range(400))
    async with client.JournalClient(_config(brokers, 0)) as jc:
        await _create(
            jc,
            testing.journal_spec(
                journal, replication=2, stores=[store], codec=pb.GZIP, length=4096
            ),
        )
        # Each append beyond the fragment length rolls the spool: earlier fragments persist.
        for _ in range(4):
            await client.append(jc, journal, block)
        expected = block * 4

        # Wait until the stores hold fragments and brokers' indexes have listed them.
        persisted: list[pb.FragmentsResponse._Fragment] = []
        for _ in range(150):
            persisted = [
                f
                async for f in client.list_all_fragments(
                    jc, pb.FragmentsRequest(journal=journal, end_mod_time=2**40)
                )
            ]
            if len(persisted) >= 2:
                break
            await asyncio.sleep(0.2)
        assert len(persisted) >= 2, "fragments were not persisted to S3"
        assert all(f.spec.backing_store == store for f in persisted)

    before = metrics.FRAGMENT_OPEN.labels(journal, "GZIP")._value.get()
    cfg = _config(brokers, 0, cache_size=16)
    async with client.JournalClient(cfg) as direct:
        await client.list_journals(direct, f"name={journal}")
        got = await _read_all(direct, journal, do_not_proxy=True)
    assert got == expected
    opened = metrics.FRAGMENT_OPEN.labels(journal, "GZIP")._value.get() - before
    assert opened >= 2  # Persisted fragments came straight from S3 by presigned URL.

    # And the gzip files in the bucket are what the broker wrote (Gazette's names).
    keys = s3_bucket.object_keys()
    assert any(k.startswith(f"fragments/{journal}/") and k.endswith(".gz") for k in keys)


async def test_list_apply_fragments_and_store_health(brokers: testing.BrokerCluster) -> None:
    prefix = f"list-{uuid.uuid4().hex[:6]}/"
    async with client.JournalClient(_config(brokers, 1)) as jc:
        specs = [
            testing.journal_spec(f"{prefix}{n}", stores=[brokers.store_url], labels=[("topic", t)])
            for n, t in (("a", "logs"), ("b", "logs"), ("c", "metrics"))
        ]
        await _create(jc, *specs)
        logs = await client.list_journals(jc, f"topic=logs,name:prefix={prefix}")
        assert [j.spec.name for j in logs.journals] == [f"{prefix}a", f"{prefix}b"]
        assert all(j.mod_revision > 0 and j.route.members for j in logs.journals)
        spec = await client.get_journal(jc, f"{prefix}c")
        assert pb.value_of(spec.labels, "topic") == "metrics"
        with pytest.raises(client.errors.JournalNotFound):
            await client.get_journal(jc, f"{prefix}missing")

        # A stale expected revision fails the transaction.
        stale = pb.ApplyRequest()
        stale.changes.add(upsert=specs[0], expect_mod_revision=1)
        with pytest.raises(client.errors.EtcdTransactionFailed):
            await client.apply_journals(jc, stale)

        health = await client.fragment_store_health(jc, brokers.store_url)
        assert health.status == pb.OK


async def test_store_health_delete_probe_is_echoed(brokers: testing.BrokerCluster) -> None:
    async with client.JournalClient(client.ClientConfig(address=brokers[0].endpoint)) as jc:
        resp = await client.fragment_store_health(
            jc, brokers.store_url, check_delete_prefix="probe/"
        )
        assert resp.status == pb.OK
