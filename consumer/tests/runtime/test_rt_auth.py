"""Authorization of consumer processes: ``--consumer.auth-keys`` and the broker client's tokens.

Real parts: etcd, an in-process broker started with ``--broker.auth-keys``,
and two in-process consumer processes verifying ``consumer.Shard`` tokens
(Gazette ``consumer/protocol/auth.go``), one with its keys by flag, the other
from ``--consumer.auth-keys-file``; the first shows the broker its own signed
tokens (``--broker.auth-keys``), the second a minted one (``--broker.auth-token``).

- each Shard RPC needs its capability (List LIST; Stat, GetHints READ; Apply,
  Unassign APPLY), refusals are UNAUTHENTICATED with the reason;
- a token's selector limits List, Stat, GetHints, Apply and Unassign;
- a Stat proxied to the primary carries the process's own token, and a Stat
  ends when its token does;
- the shards consume and publish through brokers that require tokens;
- the keys file is reloaded: a new key verifies, a retired one is refused;
- an application's own RPC verifies tokens and forwards to the primary with
  the process's own (``Resolver.verify``, ``Resolver.authorize``).
"""

from __future__ import annotations

import asyncio
import base64
import pathlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from gazette import message
from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth, dial
from gazette.broker.server import testing as server_testing
from gazette.consumer import protocol as pc
from gazette.consumer import runtime
from gazette.consumer import testing as consumer_testing
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc
from gazette.consumer.runtime import config, process
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

BROKER_KEY = base64.b64encode(b"the brokers' key").decode()
CONSUMER_KEY = base64.b64encode(b"the consumers' key").decode()
NEW_KEY = base64.b64encode(b"the consumers' next key").decode()
BROKERS = auth.KeyedAuth(BROKER_KEY)
CONSUMERS = auth.KeyedAuth(CONSUMER_KEY)
Cap = auth.Capability

SOURCES = ["rtauth/in/part-0", "rtauth/in/part-1"]
OUT = "rtauth/out"
NDJSON = pb.CONTENT_TYPE_JSON_LINES
PREFIX = "/gazette/consumers/rt-auth"


class Num(message.JSONMessage):
    pass


class Echo:
    """Publishes each input number to OUT, in transaction."""

    async def new_store(self, shard: runtime.Shard) -> runtime.Store:
        return consumer_testing.MemoryStore()

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

    def register_services(self, server: grpc.aio.Server, resolver: Any) -> None:
        server.add_generic_rpc_handlers((Peek(resolver).handler(),))


PEEK = "/rtauth.Peek/Peek"


class Peek:
    """An application RPC (``rtauth.Peek/Peek``): which process serves a shard.

    As an application's own RPCs do: verify the caller's token (READ), resolve the
    shard under its claims, and answer from the primary, forwarding there with the
    process's own token when the primary is another process.
    """

    def __init__(self, resolver: Any) -> None:
        self.resolver = resolver

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            "rtauth.Peek",
            {
                "Peek": grpc.unary_unary_rpc_method_handler(
                    self.peek,
                    request_deserializer=pc.StatRequest.FromString,
                    response_serializer=pc.StatResponse.SerializeToString,
                )
            },
        )

    async def peek(self, request: pc.StatRequest, context: Any) -> pc.StatResponse:
        claims = await self.resolver.verify(context, Cap.READ)
        proxied = request.header if request.HasField("header") else None
        res = self.resolver.resolve(request.shard, proxied, claims)
        if res.status == pc.Status.OK and res.endpoint:
            forwarded = pc.StatRequest()
            forwarded.CopyFrom(request)
            forwarded.header.CopyFrom(res.header)
            call = self.resolver.channel(res.endpoint).unary_unary(
                PEEK,
                request_serializer=pc.StatRequest.SerializeToString,
                response_deserializer=pc.StatResponse.FromString,
            )
            resp: pc.StatResponse = await call(
                forwarded, metadata=self.resolver.authorize(Cap.READ, request.shard), timeout=20
            )
            return resp
        return pc.StatResponse(status=res.status, header=res.header)


def to(journal: str) -> Callable[[message.Message], tuple[str, str]]:
    """A publisher's mapping of every message to ``journal``."""
    return lambda _m: (journal, NDJSON)


def shard_spec(shard_id: str, source: str, tier: str) -> pc.ShardSpec:
    spec = pc.ShardSpec(id=shard_id, hot_standbys=1)
    spec.sources.add(journal=source)
    spec.labels.labels.add(name="tier", value=tier)
    spec.max_txn_duration.CopyFrom(duration_pb2.Duration(nanos=200_000_000))
    return spec


def consumer_args(etcd: str, broker: str, suffix: str, *auth_args: str) -> list[str]:
    return [
        "--consumer.app", "unused:Unused",
        "--consumer.zone", "zone-a",
        "--consumer.id", suffix,
        "--consumer.host", "127.0.0.1",
        "--consumer.http-port", "-1",
        "--broker.address", broker,
        "--etcd.address", etcd,
        "--etcd.prefix", PREFIX,
        "--etcd.lease", "3s",
        "--consumer.drain-timeout", "5s",
        *auth_args,
    ]  # fmt: skip


def md(capability: int, selector: str = "", *, signer: auth.KeyedAuth = CONSUMERS) -> Any:
    return signer.authorize(auth.Claims(capability, pb.parse_selector(selector)), 600)


async def outcome(aw: Awaitable[Any]) -> str:
    try:
        await aw
    except grpc.aio.AioRpcError as e:
        return f"{e.code().name}: {e.details()}"
    return "ok"


class Env:
    def __init__(self, endpoints: list[str], keys_file: pathlib.Path, jc: client.JournalClient):
        self.endpoints = endpoints
        self.keys_file = keys_file
        self.jc = jc


@pytest.fixture
async def env(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[Env]:
    async with (
        server_testing.InProcessCluster(
            etcd_server.endpoint,
            work_dir=tmp_path,
            brokers=1,
            extra_args=["--broker.auth-keys", BROKER_KEY],
        ) as c,
        client.JournalClient(
            client.ClientConfig(address=c[0].endpoint, auth_keys=BROKER_KEY)
        ) as jc,
    ):
        req = pb.ApplyRequest()
        for name in [*SOURCES, OUT]:
            spec = testing.journal_spec(name, labels=[(pb.LABEL_CONTENT_TYPE, NDJSON)])
            req.changes.add(upsert=spec)
        await client.apply_journals(jc, req)
        async with asyncio.timeout(30):
            for name in [*SOURCES, OUT]:
                while True:
                    try:
                        await asyncio.wait_for(client.append(jc, name, b""), 5)
                        break
                    except (client.errors.ClientError, TimeoutError):
                        await asyncio.sleep(0.1)

        keys_file = tmp_path / "consumer-keys"
        keys_file.write_text(CONSUMER_KEY + "\n")
        # The second process may read what the broker's token selects, no more.
        broker_token = BROKERS.sign(auth.Claims(Cap.ALL, pb.parse_selector("name:prefix=rtauth/")))
        auth_args = [
            ["--consumer.auth-keys", CONSUMER_KEY, "--broker.auth-keys", BROKER_KEY],
            ["--consumer.auth-keys-file", str(keys_file), "--broker.auth-token", broker_token],
        ]
        configs = [
            config.parse(consumer_args(etcd_server.endpoint, c[0].endpoint, f"consumer-{i}", *args))
            for i, args in enumerate(auth_args)
        ]
        stops = [asyncio.Event() for _ in configs]
        starts: list[asyncio.Future[process.Serving]] = []
        tasks = []
        for cfg, stop in zip(configs, stops, strict=True):
            fut: asyncio.Future[process.Serving] = asyncio.get_running_loop().create_future()
            starts.append(fut)
            tasks.append(asyncio.create_task(process.serve(cfg, Echo(), stop=stop, started=fut)))
        try:
            async with asyncio.timeout(30):
                serving = await asyncio.gather(*starts)
            yield Env([s.endpoint for s in serving], keys_file, jc)
        finally:
            for stop in stops:
                stop.set()
            async with asyncio.timeout(30):
                await asyncio.gather(*tasks, return_exceptions=True)
        for t in tasks:
            assert t.exception() is None


def stub_of(ch: grpc.aio.Channel) -> Any:
    return pc_grpc.ShardStub(ch)


async def apply_shards(stub: Any) -> None:
    req = pc.ApplyRequest()
    req.changes.add(upsert=shard_spec("shard-000", SOURCES[0], "gold"), expect_mod_revision=0)
    req.changes.add(upsert=shard_spec("shard-001", SOURCES[1], "lead"), expect_mod_revision=0)
    resp = await stub.Apply(req, metadata=md(Cap.APPLY))
    assert resp.status == pc.Status.OK
    async with asyncio.timeout(30):
        while True:
            listed = await stub.List(pc.ListRequest(), metadata=md(Cap.LIST))
            codes = [sorted(s.code for s in shard.status) for shard in listed.shards]
            if codes == [[pc.ReplicaStatus.STANDBY, pc.ReplicaStatus.PRIMARY]] * 2:
                return
            await asyncio.sleep(0.1)


def rpcs(stub: Any) -> dict[str, Any]:
    """Each RPC of consumer.Shard, called with the given metadata."""

    async def apply(m: Any) -> None:
        req = pc.ApplyRequest()
        req.changes.add(upsert=shard_spec("shard-000", SOURCES[0], "gold"), expect_mod_revision=-1)
        assert (await stub.Apply(req, metadata=m)).status == pc.Status.OK

    async def list_(m: Any) -> None:
        assert (await stub.List(pc.ListRequest(), metadata=m)).status == pc.Status.OK

    async def stat(m: Any) -> None:
        resp = await stub.Stat(pc.StatRequest(shard="shard-000"), metadata=m, timeout=20)
        assert resp.status == pc.Status.OK

    async def hints(m: Any) -> None:
        resp = await stub.GetHints(pc.GetHintsRequest(shard="shard-000"), metadata=m)
        assert resp.status == pc.Status.OK

    async def unassign(m: Any) -> None:
        req = pc.UnassignRequest(shards=["shard-000"], dry_run=True)
        assert (await stub.Unassign(req, metadata=m)).status == pc.Status.OK

    return {"List": list_, "Stat": stat, "GetHints": hints, "Apply": apply, "Unassign": unassign}


NEEDS = {"List": "LIST", "Stat": "READ", "GetHints": "READ", "Apply": "APPLY", "Unassign": "APPLY"}


async def test_each_shard_rpc_needs_its_capability_and_a_valid_token(env: Env) -> None:
    async with dial.channel(env.endpoints[0]) as ch:
        stub = stub_of(ch)
        await apply_shards(stub)
    for endpoint in env.endpoints:  # Keys by flag, and from the file.
        async with dial.channel(endpoint) as ch:
            calls = rpcs(stub_of(ch))
            for cap in ("LIST", "READ", "APPLY"):
                for rpc, call in calls.items():
                    got = await outcome(call(md(auth.Capability[cap])))
                    if NEEDS[rpc] == cap:
                        assert got == "ok", (endpoint, rpc, got)
                    else:
                        want = f"missing required {NEEDS[rpc]} capability"
                        assert got == f"UNAUTHENTICATED: authorization is {want}", (rpc, got)
            refused = {
                "missing or empty Authorization token": None,
                "verifying Authorization: token signature is invalid": md(Cap.ALL, signer=BROKERS),
                "invalid or unsupported Authorization header": (("authorization", "Basic x"),),
            }
            for why, m in refused.items():
                for rpc, call in calls.items():
                    got = await outcome(call(m))
                    assert got.startswith(f"UNAUTHENTICATED: {why}"), (rpc, got)


async def test_a_selector_limited_token_sees_only_its_shards(env: Env) -> None:
    async with dial.channel(env.endpoints[0]) as ch:
        await apply_shards(stub_of(ch))
    gold = md(Cap.ALL, "tier=gold")
    by_id = md(Cap.ALL, "id=shard-000")
    for endpoint in env.endpoints:
        async with dial.channel(endpoint) as ch:
            stub = stub_of(ch)
            listed = await stub.List(pc.ListRequest(), metadata=gold)
            assert [s.spec.id for s in listed.shards] == ["shard-000"]
            listed = await stub.List(
                pc.ListRequest(selector=pb.parse_selector("tier=lead")), metadata=gold
            )
            assert not listed.shards
            # Stat and GetHints: a shard outside the selector does not exist.
            stat = await stub.Stat(pc.StatRequest(shard="shard-001"), metadata=gold)
            assert stat.status == pc.Status.SHARD_NOT_FOUND
            assert not stat.header.route.members
            hints = await stub.GetHints(pc.GetHintsRequest(shard="shard-001"), metadata=gold)
            assert hints.status == pc.Status.SHARD_NOT_FOUND
            # Every process answers a selected Stat: the primary's own, or proxied to it
            # under the process's token (the client's selects this shard alone).
            stat = await stub.Stat(pc.StatRequest(shard="shard-000"), metadata=by_id, timeout=20)
            assert stat.status == pc.Status.OK, stat
            # Apply: upserts by their new labels, deletes by id alone; one refusal refuses all.
            req = pc.ApplyRequest()
            req.changes.add(
                upsert=shard_spec("shard-000", SOURCES[0], "gold"), expect_mod_revision=-1
            )
            assert (await stub.Apply(req, metadata=gold)).status == pc.Status.OK
            req.changes.add(
                upsert=shard_spec("shard-001", SOURCES[1], "lead"), expect_mod_revision=-1
            )
            got = await outcome(stub.Apply(req, metadata=gold))
            assert got == "UNAUTHENTICATED: not authorized to shard-001"
            relabel = pc.ApplyRequest()
            relabel.changes.add(
                upsert=shard_spec("shard-000", SOURCES[0], "lead"), expect_mod_revision=-1
            )
            got = await outcome(stub.Apply(relabel, metadata=gold))
            assert got == "UNAUTHENTICATED: not authorized to shard-000"
            delete = pc.ApplyRequest()
            delete.changes.add(delete="shard-000", expect_mod_revision=-1)
            got = await outcome(stub.Apply(delete, metadata=gold))
            assert got == "UNAUTHENTICATED: not authorized to shard-000"
            # Unassign: by id alone too.
            dry = pc.UnassignRequest(shards=["shard-000"], dry_run=True)
            assert (await stub.Unassign(dry, metadata=by_id)).status == pc.Status.OK
            got = await outcome(stub.Unassign(dry, metadata=gold))
            assert got == "UNAUTHENTICATED: not authorized to shard-000"
            both = pc.UnassignRequest(shards=["shard-000", "shard-001"], dry_run=True)
            got = await outcome(stub.Unassign(both, metadata=by_id))
            assert got == "UNAUTHENTICATED: not authorized to shard-001"
            both_ids = md(Cap.APPLY, "id in (shard-000, shard-001)")
            assert (await stub.Unassign(both, metadata=both_ids)).status == pc.Status.OK


async def test_a_stat_ends_when_its_token_expires(env: Env) -> None:
    async with dial.channel(env.endpoints[0]) as ch:
        stub = stub_of(ch)
        await apply_shards(stub)
        short = CONSUMERS.authorize(auth.Claims(Cap.READ), 2)
        started = time.monotonic()
        # A read barrier far past the head: it would wait for ever.
        req = pc.StatRequest(shard="shard-000", read_through={SOURCES[0]: 1 << 40})
        got = await outcome(stub.Stat(req, metadata=short, timeout=30))
        assert got == "DEADLINE_EXCEEDED: context deadline exceeded"
        assert time.monotonic() - started < 15


async def test_shards_consume_and_publish_through_brokers_that_require_tokens(env: Env) -> None:
    async with dial.channel(env.endpoints[0]) as ch:
        await apply_shards(stub_of(ch))
    n = 20
    async with client.AppendService(env.jc) as svc:
        pub = message.Publisher(svc)
        for i in range(n):
            pub.publish_committed(to(SOURCES[i % 2]), Num({"UUID": "", "n": i}))
        for op in svc.pending_except(""):
            await op
    seen: list[int] = []
    async with asyncio.timeout(30):
        while len(seen) < n:
            seen = []
            seq = message.Sequencer({}, [], 256)
            req = pb.ReadRequest(journal=OUT, offset=0, block=False)
            async with message.ReadCommittedIter(env.jc, req, lambda _s: Num(), seq) as it:
                async for e in it:
                    if message.get_flags(e.message.get_uuid()) != message.Flags.ACK_TXN:
                        seen.append(int(e.message.doc["n"]))  # type: ignore[attr-defined]
            await asyncio.sleep(0.2)
    assert sorted(seen) == list(range(n))


async def test_the_consumer_keys_file_is_reloaded(env: Env) -> None:
    new = auth.KeyedAuth(NEW_KEY)
    async with dial.channel(env.endpoints[1]) as ch:
        stub = stub_of(ch)

        async def listing(signer: auth.KeyedAuth) -> str:
            return await outcome(stub.List(pc.ListRequest(), metadata=md(Cap.LIST, signer=signer)))

        assert await listing(CONSUMERS) == "ok"
        assert (await listing(new)).startswith("UNAUTHENTICATED: verifying Authorization")
        env.keys_file.write_text(f"{NEW_KEY}\n{CONSUMER_KEY}\n")
        await until(listing, new, "ok")
        assert await listing(CONSUMERS) == "ok"
        env.keys_file.write_text(NEW_KEY)
        got = await until(listing, CONSUMERS, "UNAUTHENTICATED")
        assert (
            got
            == "UNAUTHENTICATED: verifying Authorization: token signature is invalid: signature is invalid"
        )
        env.keys_file.write_text("garbage!")  # Logged; the keys in force stay.
        await asyncio.sleep(3)
        assert await listing(new) == "ok"


async def until(
    listing: Callable[[auth.KeyedAuth], Awaitable[str]], signer: auth.KeyedAuth, want: str
) -> str:
    """Poll ``listing(signer)`` until its outcome starts with ``want`` (a reload's effect)."""
    deadline = time.monotonic() + 20
    while True:
        got = await listing(signer)
        if got.startswith(want):
            return got
        assert time.monotonic() < deadline, got
        await asyncio.sleep(0.1)


# -- Flags -------------------------------------------------------------------------------


def test_auth_flags_parse_and_bad_ones_are_usage_errors(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = consumer_args("http://127.0.0.1:1", "http://127.0.0.1:2", "consumer-9")
    keys = tmp_path / "keys"
    keys.write_text(CONSUMER_KEY)
    cfg = config.parse(
        [*base, "--consumer.auth-keys-file", str(keys)],
        env={"BROKER_AUTH_KEYS": BROKER_KEY, "BROKER_AUTH_TOKEN": "t"},
    )
    assert cfg.consumer.auth_keys_file == str(keys)
    assert (cfg.broker.auth_keys, cfg.broker.auth_token) == (BROKER_KEY, "t")
    assert CONSUMER_KEY not in repr(cfg) and BROKER_KEY not in repr(cfg)
    cfg = config.parse(base, env={"CONSUMER_AUTH_KEYS": CONSUMER_KEY})
    assert cfg.consumer.auth_keys == CONSUMER_KEY
    bad = {
        ("--consumer.auth-keys", "!!"): "--consumer.auth-keys: failed to decode key at index 0",
        ("--broker.auth-keys", "!!"): "--broker.auth-keys: failed to decode key at index 0",
        (
            "--consumer.auth-keys", CONSUMER_KEY, "--consumer.auth-keys-file", str(keys),
        ): "--consumer.auth-keys and --consumer.auth-keys-file are mutually exclusive",
        ("--consumer.auth-keys-file", str(tmp_path / "none")): (
            f"--consumer.auth-keys-file: reading {tmp_path / 'none'}: No such file or directory"
        ),
    }  # fmt: skip
    for args, want in bad.items():
        with pytest.raises(SystemExit) as exc:
            config.parse([*base, *args], env={})
        assert exc.value.code == 2
        assert want in capsys.readouterr().err, args
    with pytest.raises(SystemExit):
        config.parse(["--help"], env={"CONSUMER_AUTH_KEYS": CONSUMER_KEY})
    helps = capsys.readouterr().out
    for flag in ("--consumer.auth-keys", "--consumer.auth-keys-file", "--broker.auth-token"):
        assert flag in helps
    assert CONSUMER_KEY not in helps


async def test_an_application_rpc_verifies_tokens_and_forwards_with_its_own(env: Env) -> None:
    async with dial.channel(env.endpoints[0]) as ch:
        await apply_shards(stub_of(ch))
        listed = await stub_of(ch).List(pc.ListRequest(), metadata=md(Cap.LIST))
    route = next(s.route for s in listed.shards if s.spec.id == "shard-000")
    primary = route.members[route.primary].suffix

    for endpoint in env.endpoints:  # The primary itself, and a process that forwards.
        async with dial.channel(endpoint) as ch:
            peek = ch.unary_unary(
                PEEK,
                request_serializer=pc.StatRequest.SerializeToString,
                response_deserializer=pc.StatResponse.FromString,
            )
            req = pc.StatRequest(shard="shard-000")
            resp = await peek(req, metadata=md(Cap.READ, "id=shard-000"), timeout=20)
            assert resp.status == pc.Status.OK, resp
            assert resp.header.process_id.suffix == primary  # Served by the primary.

            refused = {
                "missing or empty Authorization token": None,
                "authorization is missing required READ capability": md(Cap.APPEND),
                "verifying Authorization: token signature is invalid": md(Cap.READ, signer=BROKERS),
            }
            for why, m in refused.items():
                got = await outcome(peek(req, metadata=m, timeout=20))
                assert got.startswith(f"UNAUTHENTICATED: {why}"), got
            # A selector that leaves the shard out: it does not exist for this caller.
            resp = await peek(req, metadata=md(Cap.READ, "tier=lead"), timeout=20)
            assert resp.status == pc.Status.SHARD_NOT_FOUND


# -- Fuzzed requests -------------------------------------------------------------------

#: Requests per RPC (the whole fuzz takes a few seconds).
FUZZ_EXAMPLES = 150
FUZZ_DEADLINE = 5.0


def _fuzzed_request(rpc: str, rng: Any) -> bytes:
    """Wire bytes of a ``rpc`` request: garbage, or a message of generated fields,
    now and then with a string field's bytes that aren't UTF-8 spliced in."""
    import random as random_

    assert isinstance(rng, random_.Random)

    def text() -> str:
        pool = ["", "x", "a/b", "../..", "\x00", "é" * 3, " ", "-" * 600, "shard;meta"]
        return rng.choice([*pool, "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(20))])

    def number() -> int:
        return rng.choice([0, -1, 1, 2**31, -(2**63), 2**63 - 1, rng.randrange(-1000, 1000)])

    kind = rng.randrange(10)
    if kind == 0:
        return rng.randbytes(rng.randrange(300))
    if kind == 1:
        return bytes([rng.randrange(256)]) + b"\xff" * rng.randrange(1, 12)  # Cut varints.
    if rpc == "List":
        msg: Any = pc.ListRequest()
        msg.selector.include.labels.add(name=text(), value=text())
    elif rpc == "Stat":
        msg = pc.StatRequest(shard=text())
        if rng.random() < 0.3:
            msg.header.etcd.revision = rng.choice([0, 1, 2])  # Not one to wait for.
            msg.header.process_id.zone = text()
        msg.read_through[text()] = number()
    elif rpc == "Apply":
        msg = pc.ApplyRequest()
        change = msg.changes.add(expect_mod_revision=number())
        if rng.random() < 0.5:
            change.delete = text()
        else:
            change.upsert.id = text()
            change.upsert.sources.add(journal=text(), min_offset=number())
            change.upsert.hot_standbys = number() % 100
    elif rpc == "GetHints":
        msg = pc.GetHintsRequest(shard=text())
    else:
        msg = pc.UnassignRequest(shards=[text()], only_failed=rng.random() < 0.5, dry_run=True)
    wire: bytes = msg.SerializeToString()
    if rng.random() < 0.2:
        # A later value of a string field wins: field 2 of Stat/Unassign-ish, 1 of others.
        field = 2 if rpc == "Stat" else 1
        wire += bytes([(field << 3) | 2, 2, 0xFF, 0xFE])
    return wire


async def test_fuzzed_shard_requests_get_clear_answers(env: Env) -> None:
    """Every Shard RPC, sent generated and malformed requests by a caller with every
    capability: each gets a response or a gRPC status with short details (no traceback,
    no repr) within a deadline, and the consumer serves as before after."""
    import collections
    import random

    rng = random.Random(29)
    responses = {
        "List": pc.ListResponse,
        "Stat": pc.StatResponse,
        "Apply": pc.ApplyResponse,
        "GetHints": pc.GetHintsResponse,
        "Unassign": pc.UnassignResponse,
    }
    counts: dict[str, collections.Counter[str]] = {}
    samples: dict[str, str] = {}
    async with dial.channel(env.endpoints[0]) as ch:
        for rpc, response in responses.items():
            counts[rpc] = collections.Counter()
            method = ch.unary_unary(
                f"/consumer.Shard/{rpc}",
                request_serializer=lambda b: b,
                response_deserializer=response.FromString,
            )
            for _ in range(FUZZ_EXAMPLES):
                wire = _fuzzed_request(rpc, rng)
                try:
                    resp = await method(wire, metadata=md(Cap.ALL), timeout=FUZZ_DEADLINE)
                    counts[rpc][pc.Status.Name(resp.status)] += 1
                except grpc.aio.AioRpcError as e:
                    code, details = e.code(), e.details() or ""
                    assert code not in (
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.UNAUTHENTICATED,
                    ), (rpc, wire, code, details)
                    for bad in (
                        "Traceback",
                        "object at 0x",
                        "Exception calling application",
                        "Unexpected <class",  # An undecoded request is INVALID_ARGUMENT.
                    ):
                        assert bad not in details, (rpc, wire, details)
                    assert details and len(details) < 2000, (rpc, wire, details)
                    counts[rpc][code.name] += 1
                    samples.setdefault(f"{rpc} {code.name}", details)
        # Unharmed: it still lists and stats.
        listed = await pc_grpc.ShardStub(ch).List(pc.ListRequest(), metadata=md(Cap.ALL))
        assert listed.status == pc.Status.OK
    print(f"\nfuzzed consumer.Shard: { {rpc: dict(c) for rpc, c in counts.items()} }")
    print("\n".join(f"  {k}: {v[:150]}" for k, v in sorted(samples.items())))
