"""Authorization on real brokers: ``--broker.auth-keys`` and bearer tokens (Gazette auth/auth.go).

In-process clusters (``gazette.broker.server.testing``) over the real etcd,
every broker sharing the same keys. Tokens are minted here with
:class:`gazette.broker.protocol.auth.KeyedAuth` and sent as raw gRPC metadata,
so each check is of the broker alone:

- a token of one capability allows exactly the RPCs needing it;
- a token's selector limits List, Read, Append, Apply, ListFragments and the
  HTTP gateway to the journals it selects;
- expired, wrong-key, malformed, non-bearer and missing tokens are refused
  with UNAUTHENTICATED and a message saying why; ``AA==`` lets untokened
  requests through;
- replication, proxied appends and forwarded reads and fragment listings work
  (the brokers sign narrowed tokens for their peers), and an RPC ends when its
  token expires.
"""

from __future__ import annotations

import asyncio
import base64
import pathlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import grpc
import prometheus_client
import pytest

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import auth
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import service
from gazette.broker.server import testing as server_testing
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEY_ONE = base64.b64encode(b"first key: signs and verifies").decode()
KEY_TWO = base64.b64encode(b"second key: verifies only").decode()
KEYS = f"{KEY_ONE}, {KEY_TWO}"
SIGNER = auth.KeyedAuth(KEYS)
Cap = auth.Capability


def bearer(
    capability: int,
    selector: str = "",
    *,
    signer: auth.KeyedAuth = SIGNER,
    lifetime: float = 600,
) -> tuple[tuple[str, str], ...]:
    return signer.authorize(auth.Claims(capability, pb.parse_selector(selector)), lifetime)


ALL = bearer(Cap.ALL)


def stub_of(ch: grpc.aio.Channel) -> pb2_grpc.JournalAsyncStub:
    return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]


async def outcome(aw: Awaitable[Any]) -> str:
    """``ok`` or ``CODE: details`` of an RPC."""
    try:
        await aw
    except grpc.aio.AioRpcError as e:
        return f"{e.code().name}: {e.details()}"
    return "ok"


def spec(
    name: str, topic: str, cluster: server_testing.InProcessCluster, **kw: Any
) -> pb.JournalSpec:
    kw.setdefault("stores", [cluster.store_url])
    return testing.journal_spec(name, labels=[("topic", topic)], **kw)


@pytest.fixture
async def cluster(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[server_testing.InProcessCluster]:
    async with server_testing.InProcessCluster(
        etcd_server.endpoint,
        work_dir=tmp_path,
        brokers=3,
        extra_args=["--broker.auth-keys", KEYS],
    ) as c:
        yield c


async def _setup(cluster: server_testing.InProcessCluster, *specs: pb.JournalSpec) -> None:
    async with cluster.channel(0) as ch:
        resp = await testing.apply_specs(stub_of(ch), *specs, metadata=ALL)
        assert resp.status == pb.OK
        for s in specs:
            await testing.wait_writable(stub_of(ch), s.name, metadata=ALL)


# -- A capability per RPC ----------------------------------------------------------------


def _rpcs(
    stub: pb2_grpc.JournalAsyncStub, journal: str, store: str
) -> dict[str, Callable[[Any], Awaitable[Any]]]:
    """Each RPC of protocol.Journal, called with the given metadata."""

    async def list_(md: Any) -> None:
        async for _ in stub.List(pb.ListRequest(), metadata=md):
            pass

    async def apply(md: Any) -> None:
        req = pb.ApplyRequest()
        req.changes.add(expect_mod_revision=-1).upsert.CopyFrom(
            testing.journal_spec("auth/applied", stores=[store])
        )
        resp = await stub.Apply(req, metadata=md)
        assert resp.status == pb.OK

    async def read(md: Any) -> None:
        _, meta = await testing.read(stub, journal, 0, metadata=md)
        assert meta[0].status in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE)

    async def append(md: Any) -> None:
        resp = await testing.append(stub, journal, [b"x"], metadata=md)
        assert resp.status == pb.OK

    async def replicate(md: Any) -> None:
        # A request iterator, not call.write: a server that refuses the stream ends it
        # while a write may be under way, and grpc-python then loses its status
        # (INTERNAL "Internal error from Core", grpc/grpc#36066); gRPC's own writer
        # drops the write instead, and the status comes through.
        async def requests() -> AsyncIterator[pb.ReplicateRequest]:
            yield pb.ReplicateRequest(
                proposal=pb.Fragment(journal=journal, compression_codec=pb.NONE)
            )

        async for _ in stub.Replicate(requests(), metadata=md):
            pass

    async def list_fragments(md: Any) -> None:
        resp = await stub.ListFragments(pb.FragmentsRequest(journal=journal), metadata=md)
        assert resp.status == pb.OK

    async def store_health(md: Any) -> None:
        resp = await stub.FragmentStoreHealth(
            pb.FragmentStoreHealthRequest(fragment_store=store), metadata=md
        )
        assert resp.status == pb.OK

    return {
        "List": list_,
        "Apply": apply,
        "Read": read,
        "Append": append,
        "Replicate": replicate,
        "ListFragments": list_fragments,
        "FragmentStoreHealth": store_health,
    }


NEEDS = {
    "List": "LIST",
    "Apply": "APPLY",
    "Read": "READ",
    "Append": "APPEND",
    "Replicate": "REPLICATE",
    "ListFragments": "READ",
    "FragmentStoreHealth": "READ",
}


async def test_a_token_per_capability_allows_exactly_its_rpcs(
    cluster: server_testing.InProcessCluster,
) -> None:
    await _setup(cluster, spec("auth/cap", "cap", cluster))
    table: dict[str, dict[str, str]] = {}
    async with cluster.channel(1) as ch:
        rpcs = _rpcs(stub_of(ch), "auth/cap", cluster.store_url)
        for name in NEEDS.values():
            md = bearer(Cap[name])
            table[name] = {rpc: await outcome(call(md)) for rpc, call in rpcs.items()}
    for name, row in table.items():
        for rpc, got in row.items():
            if NEEDS[rpc] == name:
                if rpc == "Replicate":
                    # Authorized: the broker got to read the (headerless) request.
                    assert got == "UNKNOWN: expected first ReplicateRequest to have Header", row
                else:
                    assert got == "ok", (name, rpc, got)
            else:
                want = f"UNAUTHENTICATED: authorization is missing required {NEEDS[rpc]} capability"
                assert got == want, (name, rpc, got)
    # Application bits (1 << 16 and up) grant nothing of the broker's.
    async with cluster.channel(0) as ch:
        got = await outcome(
            _rpcs(stub_of(ch), "auth/cap", cluster.store_url)["List"](bearer(1 << 16))
        )
    assert got == "UNAUTHENTICATED: authorization is missing required LIST capability"
    print(
        "\ncapability x RPC:",
        {k: sorted(r for r, v in row.items() if v != "ok") for k, row in table.items()},
    )


# -- FragmentStoreHealth: no requests where no spec points ------------------------------


async def test_store_health_of_a_store_no_spec_names_needs_an_administrator(
    cluster: server_testing.InProcessCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The brokers' own credentials, which a forged request would sign with.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "broker-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "broker-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # An S3 "endpoint" of the caller's choosing: a listener that counts connections.
    connections = 0

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    listener = await asyncio.start_server(count, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    elsewhere = f"s3://bucket/p/?endpoint=http://127.0.0.1:{port}"
    await _setup(cluster, spec("auth/store", "store", cluster))

    async def health(md: Any, store: str) -> str:
        async with cluster.channel(1) as ch:
            req = pb.FragmentStoreHealthRequest(fragment_store=store)
            try:
                resp = await stub_of(ch).FragmentStoreHealth(req, metadata=md, timeout=60)
            except grpc.aio.AioRpcError as e:
                return f"{e.code().name}: {e.details()}"
            return "ok" if resp.status == pb.OK else resp.store_health_error

    try:
        # A store a journal names: a READ token of any journal suffices (Gazette's rule).
        assert await health(bearer(Cap.READ, "name=auth/store"), cluster.store_url) == "ok"
        # Any other URL: refused before anything is sent there.
        refused = (
            f"UNAUTHENTICATED: fragment store {elsewhere} is named by no journal spec:"
            " checking it needs the APPLY capability over every journal"
        )
        assert await health(bearer(Cap.READ, "name=auth/store"), elsewhere) == refused
        assert await health(bearer(Cap.READ | Cap.APPLY, "topic=store"), elsewhere) == refused
        assert connections == 0
        # An administrator's probe is checked once, and nothing of it is kept: no
        # health loop retries it, and its metrics carry no label of its URL.
        admin = bearer(Cap.READ | Cap.APPLY)
        (cluster.file_root / "elsewhere").mkdir(parents=True)
        other = "file:///elsewhere/"
        assert await health(admin, other) == "ok"
        got = await health(admin, elsewhere)
        assert got.startswith("health check PUT failed"), got
        assert connections >= 1
        seen = connections
        await asyncio.sleep(1.5)  # A kept store's loop would have checked again twice by now.
        assert connections == seen
        labels = {
            sample.labels.get("store")
            for metric in prometheus_client.REGISTRY.collect()
            if metric.name.startswith("gazette_store_")
            for sample in metric.samples
        }
        assert elsewhere not in labels and other not in labels
    finally:
        listener.close()
        await listener.wait_closed()


# -- Selectors ---------------------------------------------------------------------------


async def _names(stub: pb2_grpc.JournalAsyncStub, md: Any, selector: str = "") -> list[str]:
    out: list[str] = []
    req = pb.ListRequest(selector=pb.parse_selector(selector))
    async for resp in stub.List(req, metadata=md):
        out += [j.spec.name for j in resp.journals]
    return sorted(out)


async def test_a_selector_limited_token_sees_only_its_journals(
    cluster: server_testing.InProcessCluster,
) -> None:
    await _setup(
        cluster,
        spec("sel/a/one", "a", cluster, replication=2),
        spec("sel/a/two", "a", cluster),
        spec("sel/b/one", "b", cluster, replication=2),
    )
    async with cluster.channel(0) as ch:
        stub = stub_of(ch)
        for j in ("sel/a/one", "sel/b/one"):
            assert (
                await testing.append(stub, j, [f"{j}\n".encode()], metadata=ALL)
            ).status == pb.OK

    topic_a = bearer(Cap.ALL, "topic=a")
    for i in range(len(cluster)):  # Every broker, member of a journal or not, proxying or not.
        async with cluster.channel(i) as ch:
            stub = stub_of(ch)
            # List: only what the claims select, whatever the request's selector.
            assert await _names(stub, topic_a) == ["sel/a/one", "sel/a/two"]
            assert await _names(stub, topic_a, "topic=b") == []
            assert await _names(stub, ALL, "name:prefix=sel/") == [
                "sel/a/one",
                "sel/a/two",
                "sel/b/one",
            ]
            # The legacy `prefix` meta-label works in claims as in requests (List only, as Go).
            assert await _names(stub, bearer(Cap.LIST, "prefix=sel/b/")) == ["sel/b/one"]

            # Read, Append, ListFragments: a journal outside the selector does not exist.
            content, meta = await testing.read(stub, "sel/b/one", metadata=topic_a)
            assert (content, meta[0].status) == (b"", pb.JOURNAL_NOT_FOUND)
            assert not meta[0].header.route.members  # Its route is hidden too.
            content, meta = await testing.read(stub, "sel/a/one", metadata=topic_a)
            assert content == b"sel/a/one\n", meta
            resp = await testing.append(stub, "sel/b/one", [b"no"], metadata=topic_a)
            assert resp.status == pb.JOURNAL_NOT_FOUND
            resp = await testing.append(stub, "sel/a/two", [b"yes\n"], metadata=topic_a)
            assert resp.status == pb.OK
            frags = await stub.ListFragments(
                pb.FragmentsRequest(journal="sel/b/one"), metadata=topic_a
            )
            assert frags.status == pb.JOURNAL_NOT_FOUND
            frags = await stub.ListFragments(
                pb.FragmentsRequest(journal="sel/a/one"), metadata=topic_a
            )
            assert frags.status == pb.OK

    # Apply: each change is checked against the claims, by the new and the current labels.
    async with cluster.channel(1) as ch:
        stub = stub_of(ch)

        async def apply(md: Any, *changes: pb.ApplyRequest.Change) -> str:
            req = pb.ApplyRequest(changes=list(changes))
            return await outcome(stub.Apply(req, metadata=md))

        def upsert(s: pb.JournalSpec) -> pb.ApplyRequest.Change:
            return pb.ApplyRequest.Change(upsert=s, expect_mod_revision=-1)

        def delete(name: str) -> pb.ApplyRequest.Change:
            return pb.ApplyRequest.Change(delete=name, expect_mod_revision=-1)

        assert await apply(topic_a, upsert(spec("sel/a/three", "a", cluster))) == "ok"
        # A new journal outside the selector; one change out of two refuses both.
        assert (
            await apply(
                topic_a,
                upsert(spec("sel/a/four", "a", cluster)),
                upsert(spec("sel/c/one", "c", cluster)),
            )
            == "UNAUTHENTICATED: not authorized to sel/c/one"
        )
        # Relabelling out of the selector (new labels), or into it (current labels).
        assert await apply(topic_a, upsert(spec("sel/a/two", "b", cluster))) == (
            "UNAUTHENTICATED: not authorized to sel/a/two"
        )
        assert await apply(topic_a, upsert(spec("sel/b/one", "a", cluster))) == (
            "UNAUTHENTICATED: not authorized to sel/b/one"
        )
        # Deletes are judged by name, as Gazette does (a topic selector can't delete),
        # and by the journal's current labels.
        assert await apply(topic_a, delete("sel/a/three")) == (
            "UNAUTHENTICATED: not authorized to sel/a/three"
        )
        by_name = bearer(Cap.APPLY, "name:prefix=sel/a/")
        assert await apply(by_name, delete("sel/a/three")) == "ok"
        assert await apply(by_name, delete("sel/b/one")) == (
            "UNAUTHENTICATED: not authorized to sel/b/one"
        )
        mixed = bearer(Cap.APPLY, "name:prefix=sel/, topic=a")
        assert await apply(mixed, delete("sel/b/one")) == (
            "UNAUTHENTICATED: not authorized to sel/b/one"
        )
        assert await _names(stub, ALL, "name:prefix=sel/") == [
            "sel/a/one",
            "sel/a/two",
            "sel/b/one",
        ]

    # The HTTP gateway passes the caller's Authorization header on.
    http_port = cluster[2].serving.http_port  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{http_port}"
    token_a = {"Authorization": topic_a[0][1]}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/sel/a/one", headers=token_a) as resp:
            assert resp.status == 206
            assert await resp.read() == b"sel/a/one\n"
        async with http.get(f"{base}/sel/b/one", headers=token_a) as resp:
            assert resp.status == 404, await resp.text()
        async with http.put(f"{base}/sel/b/one", headers=token_a, data=b"no\n") as resp:
            assert resp.status == 500 and "JOURNAL_NOT_FOUND" in await resp.text()
        async with http.put(f"{base}/sel/a/one", headers=token_a, data=b"put\n") as resp:
            assert resp.status == 204, await resp.text()
        async with http.get(f"{base}/sel/a/one") as resp:
            assert resp.status == 401
            assert resp.headers["WWW-Authenticate"] == "Bearer"
            assert await resp.text() == "missing or empty Authorization token\n"
        async with http.put(f"{base}/sel/a/one", data=b"no\n") as resp:
            assert resp.status == 401
        read_only = {"Authorization": bearer(Cap.READ)[0][1]}
        async with http.put(f"{base}/sel/a/one", headers=read_only, data=b"no\n") as resp:
            assert resp.status == 401
            assert "missing required APPEND capability" in await resp.text()
        async with http.get(f"{base}/sel/a/one", headers=read_only) as resp:
            assert await resp.read() == b"sel/a/one\nput\n"


async def test_debug_token_required_guards_metrics_but_not_ready(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    async with server_testing.InProcessCluster(
        etcd_server.endpoint,
        work_dir=tmp_path,
        brokers=1,
        extra_args=["--broker.auth-keys", KEYS, "--broker.debug-token-required"],
    ) as cluster:
        assert cluster[0].serving is not None
        grpc_port = cluster[0].endpoint.rsplit(":", 1)[1]
        ports = {grpc_port, str(cluster[0].serving.http_port)}

        async def get(port: str, path: str, md: Any = ()) -> tuple[int, str]:
            headers = {"Authorization": md[0][1]} if md else {}
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}{path}", headers=headers) as resp,
            ):
                return resp.status, await resp.text()

        for port in ports:  # The gRPC port's gateway and the HTTP port alike.
            assert await get(port, "/debug/ready") == (200, "ready\n")
            assert await get(port, "/debug/metrics") == (
                401,
                "missing or empty Authorization token\n",
            )
            assert await get(port, "/debug/metrics", bearer(Cap.READ)) == (
                401,
                "authorization is missing required LIST capability\n",
            )
            assert await get(port, "/debug/metrics", bearer(Cap.LIST, "topic=a")) == (
                401,
                "/debug/ needs a token whose selector selects every journal\n",
            )
            status, text = await get(port, "/debug/metrics", bearer(Cap.LIST))
            assert status == 200 and "gazette_" in text


# -- Refused tokens ----------------------------------------------------------------------


def _expired() -> tuple[tuple[str, str], ...]:
    past = auth.KeyedAuth(KEYS, clock=lambda: time.time() - 3600)
    return past.authorize(auth.Claims(Cap.ALL), 60)


def _future() -> tuple[tuple[str, str], ...]:
    later = auth.KeyedAuth(KEYS, clock=lambda: time.time() + 3600)
    return later.authorize(auth.Claims(Cap.ALL), 60)


REFUSED = {
    "missing": (None, "missing or empty Authorization token"),
    "not bearer": (
        (("authorization", "Basic dXNlcjpwYXNz"),),
        "invalid or unsupported Authorization header (expected 'Bearer')",
    ),
    "expired": (_expired(), "verifying Authorization: token has invalid claims: token is expired"),
    "issued in the future": (
        _future(),
        "verifying Authorization: token has invalid claims: token used before issued",
    ),
    "wrong key": (
        bearer(Cap.ALL, signer=auth.KeyedAuth(base64.b64encode(b"another key").decode())),
        "verifying Authorization: token signature is invalid: signature is invalid",
    ),
    "malformed": (
        (("authorization", "Bearer not-a-token"),),
        "verifying Authorization: token is malformed: Not enough segments",
    ),
    "empty": ((("authorization", "Bearer "),), "verifying Authorization: token is malformed"),
    "unsigned": (
        (("authorization", "Bearer eyJhbGciOiJub25lIn0.eyJjYXAiOjIsImV4cCI6OTk5OTk5OTk5OX0."),),
        "verifying Authorization: token signature is invalid",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_refused_tokens_are_unauthenticated_with_the_reason(
    case: str, cluster: server_testing.InProcessCluster
) -> None:
    md, want = REFUSED[case]
    async with cluster.channel(0) as ch:
        for rpc, call in _rpcs(stub_of(ch), "auth/none", cluster.store_url).items():
            got = await outcome(call(md))
            assert got.startswith(f"UNAUTHENTICATED: {want}"), (rpc, got)


async def test_tokens_signed_by_any_key_verify_and_aa_lets_untokened_requests_in(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    second = auth.KeyedAuth(f"{KEY_TWO}")  # Signs with the cluster's second key.
    async with server_testing.InProcessCluster(
        etcd_server.endpoint,
        work_dir=tmp_path,
        brokers=2,
        extra_args=["--broker.auth-keys", f"{KEYS} {auth.ALLOW_MISSING_KEY}"],
    ) as cluster:
        await _setup(cluster, spec("aa/one", "aa", cluster, replication=2))
        async with cluster.channel(1) as ch:
            stub = stub_of(ch)
            assert await _names(stub, bearer(Cap.LIST, signer=second)) == ["aa/one"]
            assert await _names(stub, None) == ["aa/one"]  # No token: allowed by AA==.
            resp = await testing.append(stub, "aa/one", [b"anonymous\n"])
            assert resp.status == pb.OK
            # A token that is presented is still checked.
            got = await outcome(_names(stub, bearer(Cap.READ)))
            assert got == "UNAUTHENTICATED: authorization is missing required LIST capability"
            got = await outcome(_names(stub, _expired()))
            assert "token is expired" in got


# -- Peers: replication, proxying, forwarding ----------------------------------------


async def test_replication_proxying_and_forwarding_work_with_auth_on(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    async with server_testing.InProcessCluster(
        etcd_server.endpoint,
        work_dir=tmp_path,
        brokers=4,
        extra_args=["--broker.auth-keys", KEYS],
    ) as cluster:
        await _setup(cluster, spec("peers/j", "p", cluster, replication=2))
        # The client may touch this journal alone: every broker-to-broker call is
        # the brokers' own (narrowed) token, not the client's.
        md = bearer(Cap.APPEND | Cap.READ | Cap.LIST, "name=peers/j")
        async with cluster.channel(0) as ch:
            stub = stub_of(ch)
            listing = [r async for r in stub.List(pb.ListRequest(), metadata=md)]
            route = listing[0].journals[0].route
        members = {(m.zone, m.suffix) for m in route.members}
        primary = route.members[route.primary]
        ids = [(b.zone, b.suffix) for b in cluster.brokers]
        non_primary_member = next(
            i for i, x in enumerate(ids) if x in members and x != (primary.zone, primary.suffix)
        )
        non_members = [i for i, x in enumerate(ids) if x not in members]
        assert len(non_members) == 2

        want = b""
        for i in [non_primary_member, *non_members]:  # Appends proxied to the primary,
            async with cluster.channel(i) as ch:  # which replicates them to its peer.
                line = f"via broker {i}\n".encode()
                resp = await testing.append(stub_of(ch), "peers/j", [line], metadata=md)
                assert resp.status == pb.OK, resp
                want += line
        for i in range(len(cluster)):  # Reads forwarded to a member by the others.
            async with cluster.channel(i) as ch:
                stub = stub_of(ch)
                content, _ = await testing.read(stub, "peers/j", metadata=md)
                assert content == want, i
                frags = await stub.ListFragments(
                    pb.FragmentsRequest(journal="peers/j"), metadata=md
                )
                assert frags.status == pb.OK
                assert frags.fragments and frags.fragments[-1].spec.end == len(want)
        # The replica has every byte: read from it alone, without proxying.
        replica = next(
            i for i, x in enumerate(ids) if x in members and x != (primary.zone, primary.suffix)
        )
        async with cluster.channel(replica) as ch:
            content, meta = await testing.read(
                stub_of(ch), "peers/j", metadata=md, do_not_proxy=True
            )
            assert content == want, meta


def test_peer_tokens_are_narrowed_to_the_call() -> None:
    svc = service.Service.__new__(service.Service)
    svc.auth = auth.KeyedAuth(KEYS)
    for cap in (Cap.APPEND, Cap.READ, Cap.REPLICATE):
        ((key, value),) = svc.peer_metadata(cap, "a/journal;meta")
        assert key == "authorization"
        claims = SIGNER.parse(value.removeprefix("Bearer "))
        assert claims.capability == cap
        assert pb.format_selector(claims.selector) == "name=a/journal"
        assert claims.expires_at is not None and claims.issued_at is not None
        assert claims.expires_at - claims.issued_at == auth.LIFETIME
    svc.auth = auth.NoopAuth()
    assert svc.peer_metadata(Cap.APPEND, "a/journal") == ()


async def test_an_rpc_ends_when_its_token_expires(
    cluster: server_testing.InProcessCluster,
) -> None:
    await _setup(cluster, spec("expiry/j", "e", cluster))
    md = bearer(Cap.READ | Cap.LIST, lifetime=2)
    async with cluster.channel(0) as ch:
        stub = stub_of(ch)
        started = time.monotonic()
        got = await outcome(testing.read(stub, "expiry/j", block=True, metadata=md))
        assert got == "DEADLINE_EXCEEDED: context deadline exceeded"
        assert time.monotonic() - started < 10

        async def watch() -> None:
            async for _ in stub.List(pb.ListRequest(watch=True), metadata=md):
                pass

        got = await outcome(asyncio.wait_for(watch(), 15))
        assert got == "DEADLINE_EXCEEDED: context deadline exceeded"
