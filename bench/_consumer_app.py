"""The consumer application of ``bench_consumer``: counts, or echoes for latency.

Messages of ``bench/throughput`` are counted into the transaction's state (one
PostgreSQL row per shard, written at each commit); messages of ``bench/latency``
are also echoed, uncommitted, to ``bench/echo`` with their publish time, so the
benchmark sees them once the consumer transaction committed.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from gazette import message
from gazette.broker import protocol as pb
from gazette.consumer import runtime
from gazette.consumer.runtime import store_sql

ECHO = "bench/echo"
LATENCY = "bench/latency"


def _echo(_msg: Any) -> tuple[str, str]:
    return ECHO, pb.CONTENT_TYPE_JSON_LINES


class Counter:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.counts: dict[int, int] = {}

    @classmethod
    def from_args(cls, args: Sequence[str]) -> Counter:
        parser = argparse.ArgumentParser()
        parser.add_argument("--postgres", required=True)
        return cls(parser.parse_args(list(args)).postgres)

    async def new_store(self, shard: runtime.Shard) -> runtime.Store:
        await store_sql.ensure_schema(
            self.dsn, "CREATE TABLE IF NOT EXISTS bench_counts (shard TEXT PRIMARY KEY, n BIGINT)"
        )
        return await store_sql.SQLStore.open(self.dsn, shard)

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        return message.JSONMessage()

    async def consume_message(
        self,
        shard: runtime.Shard,
        store: runtime.Store,
        envelope: message.Envelope,
        publisher: message.Publisher,
    ) -> None:
        key = id(store)
        self.counts[key] = self.counts.get(key, 0) + 1
        if envelope.journal.name == LATENCY:
            doc: dict[str, Any] = envelope.message.doc  # type: ignore[attr-defined]
            publisher.publish_uncommitted(_echo, message.JSONMessage({"UUID": "", "t": doc["t"]}))

    async def finalize_txn(
        self, shard: runtime.Shard, store: runtime.Store, publisher: message.Publisher
    ) -> None:
        assert isinstance(store, store_sql.SQLStore)
        conn = await store.transaction()
        await conn.execute(
            "INSERT INTO bench_counts VALUES (%s, %s)"
            " ON CONFLICT (shard) DO UPDATE SET n = EXCLUDED.n",
            (shard.id, self.counts.get(id(store), 0)),
        )
