"""Authorization side by side with Gazette's Go broker and gazctl (v0.103), sharing auth keys.

* A token Go signs is read by ours exactly: Go's gazctl signs per-RPC tokens
  (``--broker.auth-keys``), captured here by a bare gRPC server; their claims
  JSON is byte for byte what we sign for the same claims and second.
* Go's gazctl, with Go-signed tokens, drives our brokers; with a token we
  minted, it sees only what that token selects.
* A Go broker started with the same ``--broker.auth-keys`` accepts what our
  gazctl and client sign, refuses what they must not do with Gazette's own
  words (the same as ours), and limits our selector-scoped token alike.
* A mixed cluster of Python and Go brokers with the same keys replicates and
  proxies between kinds: each verifies the tokens the other signs for its peers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from go_gazette import GoBroker, go_gazctl, our_gazctl

from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth, dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

KEYS = (
    base64.b64encode(b"interop signing key").decode()
    + ","
    + base64.b64encode(b"interop second key").decode()
)
KEYED = {"BROKER_AUTH_KEYS": KEYS}
Cap = auth.Capability

SPECS = """
name: iauth/
replication: 1
fragment:
  length: 4096
  compression_codec: NONE
  stores:
  - file:///
  refresh_interval: 1s
children:
- name: iauth/a
  labels:
  - name: topic
    value: a
- name: iauth/b
  labels:
  - name: topic
    value: b
"""


def _until(what: str, check: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting until {what}")
        time.sleep(0.2)


def _mint(capability: int, selector: str = "") -> str:
    return auth.KeyedAuth(KEYS).sign(auth.Claims(capability, pb.parse_selector(selector)), 600)


def _names(proc: Any) -> list[str]:
    return sorted(j["spec"]["name"] for j in json.loads(proc.stdout).get("journals") or [])


# -- A Go-signed token, read by ours -------------------------------------------------


class _Recorder(pb2_grpc.JournalServicer):
    """A bare Journal server noting each call's authorization, answering List and Apply."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def _note(self, method: str, context: Any) -> None:
        value = dict(context.invocation_metadata()).get("authorization", "")
        self.calls.append((method, value))

    @staticmethod
    def _header() -> pb.Header:
        hdr = pb.Header()
        hdr.process_id.zone, hdr.process_id.suffix = "zone", "recorder"
        hdr.route.primary = -1
        hdr.etcd.cluster_id, hdr.etcd.member_id, hdr.etcd.revision, hdr.etcd.raft_term = 1, 1, 1, 1
        return hdr

    async def List(self, request: pb.ListRequest, context: Any) -> AsyncIterator[pb.ListResponse]:  # type: ignore[override]
        self._note("List", context)
        yield pb.ListResponse(status=pb.OK, header=self._header())

    async def Apply(self, request: pb.ApplyRequest, context: Any) -> pb.ApplyResponse:
        self._note("Apply", context)
        return pb.ApplyResponse(status=pb.OK, header=self._header())


def _payload(token: str) -> bytes:
    body = token.split(".")[1]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))


async def test_go_signed_tokens_read_exactly_as_gazette_writes_them(go_bins: pathlib.Path) -> None:
    recorder = _Recorder()
    server = dial.server()
    pb2_grpc.add_JournalServicer_to_server(recorder, server)
    port = dial.listen(server, "127.0.0.1", 0)
    await server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        selector = "topic=a, name:prefix=iauth/, !env"

        def run() -> None:
            go_gazctl(go_bins, endpoint, "journals", "list", "-l", selector, env=KEYED)
            go_gazctl(go_bins, endpoint, "journals", "apply", input=SPECS.encode(), env=KEYED)

        await asyncio.to_thread(run)
    finally:
        await server.stop(None)

    methods = [m for m, _ in recorder.calls]
    assert methods == ["List", "Apply"], recorder.calls
    ours = auth.KeyedAuth(KEYS)
    for method, value in recorder.calls:
        assert value.startswith("Bearer "), value
        token = value.removeprefix("Bearer ")
        header = json.loads(_payload_header(token))
        assert header == {"alg": "HS256", "typ": "JWT"}
        want_cap, want_life = (Cap.LIST, 3600) if method == "List" else (Cap.APPLY, 60)
        claims = ours.verify([("authorization", value)], want_cap)
        assert claims.capability == want_cap
        assert claims.expires_at is not None and claims.issued_at is not None
        assert claims.expires_at - claims.issued_at == want_life
        if method == "List":
            # Go's claims carry the request's selector, as it parsed it.
            assert pb.format_selector(claims.selector) == pb.format_selector(
                pb.parse_selector(selector)
            )
        else:
            assert not claims.selector.include.labels and not claims.selector.exclude.labels
        # Byte for byte: our JSON of the same claims is Go's.
        assert (
            _payload(token)
            == json.dumps(auth.claims_to_json(claims), separators=(",", ":")).encode()
        ), _payload(token)
        # And ours, signed in that same second with the same key, is the very token.
        same_second = auth.KeyedAuth(KEYS, clock=lambda c=claims: c.issued_at or 0.0)
        plain = auth.Claims(claims.capability, claims.selector)
        assert same_second.sign(plain, want_life) == token
    print(f"\nGo-signed tokens verified: {methods}")


def _payload_header(token: str) -> bytes:
    head = token.split(".")[0]
    return base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))


# -- Go's gazctl against our brokers ------------------------------------------------


def test_go_gazctl_with_keys_or_our_token_drives_our_brokers(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    with testing.running_cluster(
        etcd_server.endpoint, tmp_path, brokers=2, extra_args=["--broker.auth-keys", KEYS]
    ) as cluster:
        broker = cluster[1].endpoint

        def go(*args: str, **kw: Any) -> Any:
            return go_gazctl(go_bins, broker, *args, **kw)

        refused = go("journals", "list", ok=False)
        assert refused.returncode != 0
        assert b"missing or empty Authorization token" in refused.stderr, refused.stderr
        go("journals", "apply", input=SPECS.encode(), env=KEYED)
        for name in ("iauth/a", "iauth/b"):
            _until(
                f"{name} is writable",
                lambda name=name: (
                    go(
                        "journals", "append", "-l", f"name={name}", input=b"", env=KEYED, ok=False
                    ).returncode
                    == 0
                ),
            )
            go(
                "journals",
                "append",
                "-l",
                f"name={name}",
                input=f"{name} by go\n".encode(),
                env=KEYED,
            )
        assert _names(go("journals", "list", "-o", "json", env=KEYED)) == ["iauth/a", "iauth/b"]
        got = go("journals", "read", "-l", "name:prefix=iauth/", env=KEYED).stdout
        assert sorted(got.splitlines()) == [b"iauth/a by go", b"iauth/b by go"]

        # A token of ours, for topic=a alone, held by Go's gazctl.
        only_a = {"BROKER_AUTH_TOKEN": _mint(Cap.ALL, "topic=a")}
        assert _names(go("journals", "list", "-o", "json", env=only_a)) == ["iauth/a"]
        assert go("journals", "read", "-l", "name:prefix=iauth/", env=only_a).stdout == (
            b"iauth/a by go\n"
        )
        go("journals", "append", "-l", "name=iauth/a", input=b"token\n", env=only_a)
        read_only = {"BROKER_AUTH_TOKEN": _mint(Cap.READ | Cap.LIST)}
        denied = go(
            "journals", "append", "-l", "name=iauth/a", input=b"x\n", env=read_only, ok=False
        )
        assert denied.returncode != 0
        assert b"authorization is missing required APPEND capability" in denied.stderr, denied
        assert our_gazctl(broker, "journals", "read", "-l", "name=iauth/a", env=KEYED).stdout == (
            b"iauth/a by go\ntoken\n"
        )


# -- Our gazctl and client against a Go broker --------------------------------------


async def _rpc_outcome(broker: str, metadata: Any, call: str) -> str:
    async with dial.channel(broker) as ch:
        stub = pb2_grpc.JournalStub(ch)
        try:
            if call == "List":
                async for _ in stub.List(pb.ListRequest(), metadata=metadata):
                    pass
            else:
                await stub.FragmentStoreHealth(
                    pb.FragmentStoreHealthRequest(fragment_store="file:///"), metadata=metadata
                )
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name}: {e.details()}"
    return "ok"


def test_a_go_broker_with_the_same_keys_takes_our_tokens(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    prefix = f"/gazette/go-auth-{time.monotonic_ns()}"
    go_broker = GoBroker(
        go_bins,
        etcd_server.endpoint,
        prefix,
        zone="zone-go",
        suffix="go-auth-broker",
        file_root=tmp_path / "fragments",
        log_path=tmp_path / "go.log",
        extra_args=("--broker.auth-keys", KEYS),
    )
    try:
        with go_broker:
            broker = go_broker.endpoint
            refused = our_gazctl(broker, "journals", "list", ok=False)
            assert b"UNAUTHENTICATED: missing or empty Authorization token" in refused.stderr
            our_gazctl(broker, "journals", "apply", input=SPECS.encode(), env=KEYED)
            for name in ("iauth/a", "iauth/b"):
                _until(
                    f"{name} is writable",
                    lambda name=name: (
                        our_gazctl(
                            broker,
                            "journals",
                            "append",
                            "-l",
                            f"name={name}",
                            input=b"",
                            env=KEYED,
                            ok=False,
                        ).returncode
                        == 0
                    ),
                )
                our_gazctl(
                    broker,
                    "journals",
                    "append",
                    "-l",
                    f"name={name}",
                    input=f"{name}\n".encode(),
                    env=KEYED,
                )
            got = our_gazctl(broker, "journals", "read", "-l", "name:prefix=iauth/", env=KEYED)
            assert sorted(got.stdout.splitlines()) == [b"iauth/a", b"iauth/b"]
            frags = our_gazctl(
                broker, "journals", "fragments", "-l", "topic=a", "-o", "json", env=KEYED
            ).stdout
            assert b"iauth/a" in frags and b"iauth/b" not in frags

            # Our minted, selector-limited token: the Go broker scopes it as ours does.
            only_b = {"BROKER_AUTH_TOKEN": _mint(Cap.ALL, "topic=b")}
            assert _names(our_gazctl(broker, "journals", "list", "-o", "json", env=only_b)) == [
                "iauth/b"
            ]
            got = our_gazctl(broker, "journals", "read", "-l", "name:prefix=iauth/", env=only_b)
            assert got.stdout == b"iauth/b\n"

            async def client_side() -> None:
                cfg = client.ClientConfig(address=broker, auth_token=_mint(Cap.ALL, "topic=b"))
                async with client.JournalClient(cfg) as jc:
                    with pytest.raises(client.errors.JournalNotFound):
                        await client.append(jc, "iauth/a", b"no\n")
                    await client.append(jc, "iauth/b", b"client\n")
                # The same refusals, in Gazette's words, as from our brokers.
                assert await _rpc_outcome(broker, None, "List") == (
                    "UNAUTHENTICATED: missing or empty Authorization token"
                )
                read_only = auth.KeyedAuth(KEYS).authorize(auth.Claims(Cap.READ))
                assert await _rpc_outcome(broker, read_only, "List") == (
                    "UNAUTHENTICATED: authorization is missing required LIST capability"
                )
                assert await _rpc_outcome(broker, read_only, "FragmentStoreHealth") == "ok"
                expired = auth.KeyedAuth(KEYS, clock=lambda: time.time() - 3600).authorize(
                    auth.Claims(Cap.ALL), 60
                )
                got = await _rpc_outcome(broker, expired, "List")
                assert got.startswith(
                    "UNAUTHENTICATED: verifying Authorization: token has invalid claims: token is expired"
                ), got

            asyncio.run(client_side())
            got = our_gazctl(broker, "journals", "read", "-l", "name=iauth/b", env=KEYED).stdout
            assert got == b"iauth/b\nclient\n"
    finally:
        ks_testing.wipe_prefix(etcd_server.endpoint, prefix + "/")


def test_a_go_broker_takes_the_operators_lag_tokens(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    """The operator reads write heads with READ of one journal, for a minute: a Go broker
    sharing the keys answers that read, and the token shows it no other journal."""
    from gazette.operator import lagauth

    prefix = f"/gazette/go-lag-{time.monotonic_ns()}"
    go_broker = GoBroker(
        go_bins,
        etcd_server.endpoint,
        prefix,
        zone="zone-go",
        suffix="go-lag-broker",
        file_root=tmp_path / "fragments",
        log_path=tmp_path / "go.log",
        extra_args=("--broker.auth-keys", KEYS),
    )
    try:
        with go_broker:
            broker = go_broker.endpoint
            our_gazctl(broker, "journals", "apply", input=SPECS.encode(), env=KEYED)
            for name in ("iauth/a", "iauth/b"):
                _until(
                    f"{name} is writable",
                    lambda name=name: (
                        our_gazctl(
                            broker, "journals", "append", "-l", f"name={name}",
                            input=b"", env=KEYED, ok=False,
                        ).returncode
                        == 0
                    ),
                )  # fmt: skip
            our_gazctl(
                broker, "journals", "append", "-l", "name=iauth/a", input=b"12345\n", env=KEYED
            )
            keys = lagauth.Keys(KEYS, flag="--broker.auth-keys")
            keys.refresh()

            async def heads() -> None:
                async with client.JournalClient(client.ClientConfig(address=broker)) as jc:
                    jc.credentials = lagauth.LagAuthorizer(keys)  # as the operator's rounds do
                    assert await client.write_head(jc, "iauth/a") == 6
                    # The token of iauth/a read for iauth/b: a Go broker hides it, as ours do.
                    signer = keys.current
                    assert signer is not None
                    narrow = signer.authorize(
                        auth.journal_claims(Cap.READ, "iauth/a"), lagauth.TOKEN_LIFETIME
                    )
                    async with dial.channel(broker) as ch:
                        stream = pb2_grpc.JournalStub(ch).Read(
                            pb.ReadRequest(journal="iauth/b", offset=-1, metadata_only=True),
                            metadata=narrow,
                        )
                        first = await stream.read()
                    assert first.status == pb.JOURNAL_NOT_FOUND

            asyncio.run(heads())
    finally:
        ks_testing.wipe_prefix(etcd_server.endpoint, prefix + "/")


# -- A mixed cluster sharing keys ---------------------------------------------------


def test_a_mixed_cluster_sharing_keys_replicates_and_proxies(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    """2 Python and 2 Go brokers with one key list; journals of RF 2 are spread over both kinds,
    so appends are proxied and replicated across kinds, each verifying the other's tokens."""
    names = [f"iauth/m{i}" for i in range(6)]
    specs = SPECS.replace("replication: 1", "replication: 2").split("children:")[0] + "children:\n"
    specs += "".join(f"- name: {n}\n" for n in names)
    with testing.running_cluster(
        etcd_server.endpoint,
        tmp_path / "py",
        brokers=2,
        zones=("zone-a", "zone-b"),
        extra_args=["--broker.auth-keys", KEYS],
    ) as cluster:
        gos = [
            GoBroker(
                go_bins,
                etcd_server.endpoint,
                cluster.etcd_prefix,
                zone=zone,
                suffix=f"go-broker-{i}",
                file_root=cluster.file_root,
                log_path=tmp_path / f"go-{i}.log",
                extra_args=("--broker.auth-keys", KEYS),
            )
            for i, zone in enumerate(("zone-a", "zone-b"))
        ]
        try:
            for g in gos:
                g.start()
            endpoints = [b.endpoint for b in cluster.brokers] + [g.endpoint for g in gos]
            our_gazctl(endpoints[0], "journals", "apply", input=specs.encode(), env=KEYED)
            for name in names:
                _until(
                    f"{name} is writable",
                    lambda name=name: (
                        our_gazctl(
                            endpoints[0],
                            "journals",
                            "append",
                            "-l",
                            f"name={name}",
                            input=b"",
                            env=KEYED,
                            ok=False,
                        ).returncode
                        == 0
                    ),
                )
            want = dict.fromkeys(names, b"")
            for i in range(24):
                name, endpoint = (
                    names[i % len(names)],
                    endpoints[(i // len(names)) % len(endpoints)],
                )
                line = f"{name} {i} via {endpoint}\n".encode()
                if i % 2:
                    go_gazctl(
                        go_bins,
                        endpoint,
                        "journals",
                        "append",
                        "-l",
                        f"name={name}",
                        input=line,
                        env=KEYED,
                    )
                else:
                    our_gazctl(
                        endpoint, "journals", "append", "-l", f"name={name}", input=line, env=KEYED
                    )
                want[name] += line
            for endpoint in endpoints:
                for name in names:
                    got = go_gazctl(
                        go_bins, endpoint, "journals", "read", "-l", f"name={name}", env=KEYED
                    )
                    assert got.stdout == want[name], (endpoint, name)
                    got = our_gazctl(endpoint, "journals", "read", "-l", f"name={name}", env=KEYED)
                    assert got.stdout == want[name], (endpoint, name)
            listing = json.loads(
                our_gazctl(endpoints[0], "journals", "list", "-o", "json", env=KEYED).stdout
            )
            kinds = {b.suffix: "py" for b in cluster.brokers} | {g.suffix: "go" for g in gos}
            mixed: set[str] = set()
            primaries: set[str] = set()
            for j in listing["journals"]:
                route = j["route"]
                members = [m["suffix"] for m in route["members"]]
                primaries = primaries | {kinds[members[route.get("primary", 0)]]}
                if {kinds[m] for m in members} == {"py", "go"}:
                    mixed = mixed | {j["spec"]["name"]}
            assert mixed, f"no journal has brokers of both kinds: {listing}"
            print(f"\nmixed-kind journals: {sorted(mixed)}; primaries of kinds {sorted(primaries)}")
        finally:
            for g in gos:
                g.kill()
