"""word-count: n-grams of published texts, counted by shards in recorded SQLite stores.

Gazette's ``examples/word-count``, on :class:`~gazette.consumer.runtime.store_sqlite.SQLiteStore`
instead of RocksDB. Texts come in through the ``word_count.NGram/Publish``
RPC (any consumer process serves it): each is lowercased, split into runs of
letters, padded with ``START`` tokens in front and ``END`` tokens behind, and
every space-joined n-gram of N words (bigrams by default) is published as
``NGramCount{n_gram, count: 1}`` with ``publish_committed`` to one of the
``deltas`` partitions (a modulo mapping on the n-gram over the journals
labelled ``app.gazette.dev/message-type=word_count.NGramCount``; fixed
protobuf framing).

The **counter** (a consumer application: one shard per partition, each with
a recovery log and a hot standby) adds the deltas of a transaction up in
memory, and ``finalize_txn`` folds them into the ``counts`` table of the
shard's SQLite database, committed with the checkpoint. ``Query`` resolves
the shard (given, or the one reading the partition the prefix maps to) and
answers from its primary, forwarding there when the primary is elsewhere.

Run it::

    PYTHONPATH=examples/word_count python -m gazette.consumer \\
        --consumer.app word_count:Counter --etcd.prefix /gazette/consumers/word-count

    PYTHONPATH=examples/word_count python -m word_count publish --text "the quick fox"
    PYTHONPATH=examples/word_count python -m word_count query --prefix "the "

Journals are in ``journals.yaml`` (``gazctl journals apply``), shards in
``shards.yaml`` (``kubectl apply -f``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import word_count_pb2 as wc
import word_count_pb2_grpc as wc_grpc

from gazette import message
from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth, dial
from gazette.consumer import protocol as pc
from gazette.consumer import runtime
from gazette.consumer.runtime import resolver as resolver_mod
from gazette.consumer.runtime import store_sqlite

MESSAGE_TYPE = "word_count.NGramCount"
DELTAS_SELECTOR = pb.parse_selector(f"app.gazette.dev/message-type={MESSAGE_TYPE}")
#: Words per n-gram (Gazette's default is 2).
N = 2
START, END = "START", "END"

DDL = """
CREATE TABLE IF NOT EXISTS counts (
    n_gram TEXT PRIMARY KEY NOT NULL,
    n INTEGER NOT NULL
) WITHOUT ROWID
"""

_WORDS = re.compile(r"[^\W\d_]+")


class NGramCount(message.ProtoMessage[wc.NGramCount]):
    """One n-gram's count, as a message (the UUID in field ``uuid``)."""

    proto_type = wc.NGramCount


def n_grams(text: str, n: int = N) -> Iterator[str]:
    """The n-grams of ``text``: lowercased runs of letters, padded with START and END."""
    words = [START] * (n - 1) + _WORDS.findall(text.lower()) + [END] * (n - 1)
    for i in range(len(words) - n + 1):
        yield " ".join(words[i : i + n])


def count_text(text: str, n: int = N) -> collections.Counter[str]:
    """What publishing ``text`` adds to the counts (a model for tests)."""
    return collections.Counter(n_grams(text, n))


class Deltas:
    """Publishes the n-grams of texts to the deltas partitions."""

    def __init__(self, jc: client.JournalClient) -> None:
        self.jc = jc
        self._listing: pb.ListResponse | None = None
        self.mapping = message.ModuloMapping(
            lambda m: m.proto.n_gram.encode(), lambda: self._require_listing()
        )

    def _require_listing(self) -> pb.ListResponse:
        if self._listing is None:
            raise RuntimeError("Deltas.refresh() first: no listing of partitions")
        return self._listing

    async def refresh(self) -> None:
        listing = await client.list_journals(self.jc, DELTAS_SELECTOR)
        if not listing.journals:
            raise RuntimeError(f"no journals match {pb.format_selector(DELTAS_SELECTOR)}")
        self._listing = listing

    async def publish(self, appends: client.AppendService, text: str) -> int:
        """Publish ``text``'s n-grams, each committed; returns how many (after all landed)."""
        if self._listing is None:
            await self.refresh()
        publisher = message.Publisher(appends)
        ops = [
            publisher.publish_committed(self.mapping, NGramCount(wc.NGramCount(n_gram=g, count=1)))
            for g in n_grams(text)
        ]
        for op in ops:
            await op
        return len(ops)

    def journal_of(self, n_gram: str) -> str:
        return self.mapping(NGramCount(wc.NGramCount(n_gram=n_gram)))[0]


class Counter:
    """The consumer application: counts n-grams per shard in a recorded SQLite store."""

    def __init__(self) -> None:
        # Deltas of the open transaction, per store.
        self._pending: dict[int, collections.Counter[str]] = {}

    @classmethod
    def from_args(cls, args: Sequence[str]) -> Counter:
        argparse.ArgumentParser(prog="word_count:Counter", description=__doc__).parse_args(args)
        return cls()

    async def new_store(self, shard: runtime.Shard) -> runtime.Store:
        return await store_sqlite.SQLiteStore.open(shard, DDL)

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        return NGramCount()

    async def consume_message(
        self,
        shard: runtime.Shard,
        store: runtime.Store,
        envelope: message.Envelope,
        publisher: message.Publisher,
    ) -> None:
        msg = envelope.message
        assert isinstance(msg, NGramCount)
        if message.get_flags(msg.get_uuid()) == message.Flags.ACK_TXN:
            return  # An acknowledgement, not a delta.
        self._pending.setdefault(id(store), collections.Counter())[msg.proto.n_gram] += int(
            msg.proto.count
        )

    async def finalize_txn(
        self, shard: runtime.Shard, store: runtime.Store, publisher: message.Publisher
    ) -> None:
        assert isinstance(store, store_sqlite.SQLiteStore)
        pending = self._pending.pop(id(store), None)
        if pending:
            store.db.executemany(
                "INSERT INTO counts(n_gram, n) VALUES(?, ?) "
                "ON CONFLICT(n_gram) DO UPDATE SET n = n + excluded.n",
                pending.items(),
            )

    def register_services(self, server: Any, resolver: resolver_mod.Resolver) -> None:
        wc_grpc.add_NGramServicer_to_server(NGramService(resolver), server)


class NGramService(wc_grpc.NGramServicer):
    """``word_count.NGram``: Publish texts, Query counts."""

    def __init__(self, resolver: resolver_mod.Resolver) -> None:
        self.resolver = resolver
        self.deltas = Deltas(resolver.journal_client)

    async def Publish(
        self, request: wc.PublishRequest, context: grpc.aio.ServicerContext
    ) -> wc.PublishResponse:
        # With --consumer.auth-keys, the caller's token must grant APPEND (as in
        # Gazette's word-count); without keys, anyone may call.
        await self.resolver.verify(context, auth.Capability.APPEND)
        async with client.AppendService(self.resolver.journal_client) as appends:
            await self.deltas.publish(appends, request.text)
        return wc.PublishResponse()

    async def Query(
        self, request: wc.QueryRequest, context: grpc.aio.ServicerContext
    ) -> wc.QueryResponse:
        claims = await self.resolver.verify(context, auth.Capability.READ)
        shard_id = request.shard
        if not shard_id:
            await self.deltas.refresh()
            shard_id = self._shard_reading(self.deltas.journal_of(request.prefix))
        proxied = request.header if request.HasField("header") else None
        res = self.resolver.resolve(shard_id, proxied, claims)
        if res.status != pc.Status.OK:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"shard {shard_id}: {pc.Status.Name(res.status)}"
            )
        if res.endpoint:
            forwarded = wc.QueryRequest()
            forwarded.CopyFrom(request)
            forwarded.shard = shard_id
            forwarded.header.CopyFrom(res.header)
            stub = wc_grpc.NGramStub(self.resolver.channel(res.endpoint))
            resp: wc.QueryResponse = await stub.Query(
                forwarded,
                timeout=context.time_remaining(),
                metadata=self.resolver.authorize(auth.Capability.READ, shard_id),
            )
            return resp
        assert isinstance(res.store, store_sqlite.SQLiteStore)
        out = wc.QueryResponse()
        # GLOB on a prefix with its wildcards escaped would do too; a range is index-friendly.
        lo = request.prefix
        rows = res.store.db.execute(
            "SELECT n_gram, n FROM counts WHERE n_gram >= ? ORDER BY n_gram", (lo,)
        )
        for gram, n in rows:
            if not gram.startswith(lo):
                break
            out.grams.add(n_gram=gram, count=n)
        return out

    def _shard_reading(self, journal: str) -> str:
        state = self.resolver.svc.observed.state
        for kv in state.items:
            spec: pc.ShardSpec = kv.decoded.spec
            if any(src.journal == journal for src in spec.sources):
                return str(spec.id)
        raise RuntimeError(f"no shard reads {journal}")


# -- the command line: publish texts, query counts ----------------------------


def _metadata(token: str) -> auth.Metadata | None:
    return (("authorization", f"Bearer {token}"),) if token else None


async def _publish(address: str, texts: Sequence[str], token: str) -> None:
    async with dial.channel(address) as ch:
        stub = wc_grpc.NGramStub(ch)
        for text in texts:
            await stub.Publish(wc.PublishRequest(text=text), timeout=30, metadata=_metadata(token))


async def _query(address: str, prefix: str, shard: str, token: str) -> wc.QueryResponse:
    async with dial.channel(address) as ch:
        resp: wc.QueryResponse = await wc_grpc.NGramStub(ch).Query(
            wc.QueryRequest(prefix=prefix, shard=shard), timeout=30, metadata=_metadata(token)
        )
        return resp


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="word_count", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--consumer.address",
        dest="address",
        default="http://localhost:8080",
        help="a consumer process of word_count:Counter (default %(default)s)",
    )
    parser.add_argument(
        "--consumer.auth-token",
        dest="token",
        default=os.environ.get("CONSUMER_AUTH_TOKEN", ""),
        help="bearer token for a process run with --consumer.auth-keys (env CONSUMER_AUTH_TOKEN):"
        " publish needs APPEND, query READ; mint one with python -m gazette.broker.protocol.auth",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("publish", help="publish texts (--text, or stdin lines)")
    p.add_argument("--text", action="append", help="a text to count (repeatable)")
    q = sub.add_parser("query", help="print n-gram counts")
    q.add_argument("--prefix", default="", help="n-grams beginning with this")
    q.add_argument("--shard", default="", help="the shard to ask (default: by prefix)")
    args = parser.parse_args(argv)
    if args.command == "publish":
        texts = args.text or [line for line in sys.stdin.read().splitlines() if line.strip()]
        asyncio.run(_publish(args.address, texts, args.token))
        return 0
    resp = asyncio.run(_query(args.address, args.prefix, args.shard, args.token))
    for g in resp.grams:
        print(f"{g.count}\t{g.n_gram}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
