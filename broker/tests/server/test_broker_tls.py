"""Mutual TLS on real broker processes (Gazette ``--broker.server-cert-file`` and friends).

Three brokers in two zones serve TLS with a throwaway CA
(:mod:`gazette.broker.protocol.tlstesting`), require client certificates
(``--broker.server-ca-file``), dial each other with their peer certificate and
require bearer tokens (``--broker.auth-keys``):

- they announce ``https://`` endpoints; a journal of replication 3 replicates,
  and appends and reads sent to any broker are proxied to the right one;
- the Python client appends and reads over mTLS, through the default address
  and, with a route cache, straight to the https:// endpoints routes name;
- a client without a certificate, with one of another CA, or in plaintext is
  refused at the handshake;
- the HTTP gateway serves HTTPS with the broker's certificate and requires a
  client certificate too;
- a TLS file that doesn't load stops the broker at start with one line naming
  the flag.
"""

from __future__ import annotations

import asyncio
import base64
import pathlib
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

from gazette.broker import client, http_gateway, testing
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth, dial, tlstesting
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import config
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

KEYS = base64.b64encode(b"tls test key: signs and verifies").decode()
ALL = auth.KeyedAuth(KEYS).authorize(
    auth.Claims(auth.Capability.ALL, pb.LabelSelector()), lifetime=3600
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tlstesting.Certs:
    return tlstesting.make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> tlstesting.Certs:
    """Certificates of another CA, with the same names."""
    return tlstesting.make_certs(tmp_path_factory.mktemp("foreign-tls"), name="other-ca")


@pytest.fixture(scope="module")
def secure_cluster(
    etcd_server: ks_testing.EtcdServer,
    certs: tlstesting.Certs,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[testing.BrokerCluster]:
    with testing.running_cluster(
        etcd_server.endpoint,
        tmp_path_factory.mktemp("tls-brokers"),
        brokers=3,
        tls=certs,
        extra_args=["--broker.auth-keys", KEYS],
    ) as c:
        yield c


def stub_of(ch: grpc.aio.Channel) -> pb2_grpc.JournalAsyncStub:
    return pb2_grpc.JournalStub(ch)  # type: ignore[return-value]


async def _ready_journal(cluster: testing.BrokerCluster, name: str) -> pb.Route:
    async with cluster.channel(0) as ch:
        stub = stub_of(ch)
        spec = testing.journal_spec(name, replication=3, stores=[cluster.store_url])
        resp = await testing.apply_specs(stub, spec, metadata=ALL)
        assert resp.status == pb.OK
        await testing.wait_writable(stub, name, metadata=ALL)
        got = await testing.read(stub, name, end_offset=1, deadline=10, metadata=ALL)
        route = got[1][0].header.route
        for _ in range(100):
            if len(route.members) == 3:
                break
            await asyncio.sleep(0.2)
            got = await testing.read(stub, name, end_offset=1, deadline=10, metadata=ALL)
            route = got[1][0].header.route
        return route


async def test_brokers_announce_https_and_replicate_and_proxy_over_mtls(
    secure_cluster: testing.BrokerCluster,
) -> None:
    name = "tls/replicated"
    route = await _ready_journal(secure_cluster, name)
    assert len(route.members) == 3
    assert sorted(route.endpoints) == sorted(b.endpoint for b in secure_cluster.brokers)
    assert all(ep.startswith("https://127.0.0.1:") for ep in route.endpoints)

    primary = secure_cluster.index_of(route.members[route.primary])
    # Every broker takes an append: the non-primaries proxy it to the primary,
    # which replicates it to both peers, all over mutual TLS.
    expected = b""
    for i in range(len(secure_cluster)):
        line = f"appended through broker {i} (primary {primary})\n".encode()
        async with secure_cluster.channel(i) as ch:
            resp = await testing.append(stub_of(ch), name, [line], metadata=ALL)
        assert resp.status == pb.OK, pb.Status.Name(resp.status)
        assert len(resp.header.route.members) == 3
        expected += line
    for i in range(len(secure_cluster)):
        async with secure_cluster.channel(i) as ch:
            content, _ = await testing.read(
                stub_of(ch), name, end_offset=len(expected), metadata=ALL
            )
        assert content == expected


async def test_the_client_appends_and_reads_over_mtls_with_and_without_routes(
    secure_cluster: testing.BrokerCluster, certs: tlstesting.Certs
) -> None:
    name = "tls/client"
    await _ready_journal(secure_cluster, name)
    for cache_size in (0, 16):
        cfg = client.ClientConfig(
            address=secure_cluster[1].endpoint,
            cache_size=cache_size,
            auth_keys=KEYS,
            cert_file=str(certs.client_cert_file),
            cert_key_file=str(certs.client_key_file),
            trusted_ca_file=str(certs.ca_file),
        )
        async with client.JournalClient(cfg) as jc:
            resp = await client.append(jc, name, f"cache {cache_size}\n".encode())
            assert resp.commit.end > resp.commit.begin
            got = b""
            req = pb.ReadRequest(journal=name, end_offset=resp.commit.end)
            async with client.RetryReader(jc, req) as rr:
                async for chunk in rr:
                    got += chunk
            assert got.endswith(f"cache {cache_size}\n".encode())
            if cache_size:
                # Routes name the brokers' https:// endpoints, dialed directly (by
                # the native data plane's channels where it carries the calls).
                native = jc._native._targets if jc._native is not None else {}
                assert any(ep.startswith("https://") for ep in [*jc._channels, *native])


async def _outcome(endpoint: str, tls: dial.TLS) -> str:
    async with dial.channel(endpoint, dial.DialConfig(tls=tls)) as ch:
        try:
            await stub_of(ch).List(pb.ListRequest(), metadata=ALL, timeout=5).read()
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name}: {e.details()}"
    return "ok"


async def test_clients_without_a_certificate_of_the_ca_are_refused(
    secure_cluster: testing.BrokerCluster, certs: tlstesting.Certs, foreign: tlstesting.Certs
) -> None:
    https = secure_cluster[0].endpoint
    assert await _outcome(https, certs.client_tls()) == "ok"
    # No client certificate: the server ends the handshake.
    no_cert = await _outcome(https, dial.TLS(ca_file=str(certs.ca_file)))
    assert no_cert.startswith("UNAVAILABLE"), no_cert
    # A certificate of another CA: refused; and that CA doesn't vouch for the broker.
    other = dial.TLS(
        str(foreign.client_cert_file), str(foreign.client_key_file), str(certs.ca_file)
    )
    assert (await _outcome(https, other)).startswith("UNAVAILABLE")
    distrusting = await _outcome(https, foreign.client_tls())
    assert distrusting.startswith("UNAVAILABLE") and "handshake" in distrusting.lower()
    # Plaintext to a TLS port.
    plain = await _outcome(https.replace("https://", "http://"), dial.TLS())
    assert plain.startswith("UNAVAILABLE"), plain


def _https(
    url: str, context: ssl.SSLContext, *, data: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    method = "PUT" if data is not None else "GET"
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {dict(ALL)['authorization'].split()[1]}")
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


async def test_the_http_gateway_serves_https_and_requires_a_client_certificate(
    secure_cluster: testing.BrokerCluster, certs: tlstesting.Certs
) -> None:
    name = "tls/gateway"
    await _ready_journal(secure_cluster, name)
    b = secure_cluster[2]
    base = f"https://127.0.0.1:{b.http_port}"
    ctx = certs.client_ssl_context()
    status, headers, _ = await asyncio.to_thread(
        _https, f"{base}/{name}", ctx, data=b"through the https gateway\n"
    )
    assert status == 204, headers
    status, headers, body = await asyncio.to_thread(_https, f"{base}/{name}?offset=0", ctx)
    assert status == 206  # Gazette's gateway answers reads with a Content-Range.
    assert body == b"through the https gateway\n"
    # Location names the primary's HTTPS port.
    assert headers["Location"].startswith("https://127.0.0.1:")

    # The gRPC port serves the gateway too, with the same TLS (as Gazette's one port).
    grpc_base = b.endpoint.rstrip("/")
    assert grpc_base.startswith("https://")
    status, headers, body = await asyncio.to_thread(_https, f"{grpc_base}/{name}?offset=0", ctx)
    assert status == 206, headers
    assert body == b"through the https gateway\n"
    assert headers["Location"].startswith("https://127.0.0.1:")
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        await asyncio.to_thread(
            _https,
            f"{grpc_base}/debug/ready",
            no_cert := (ssl.create_default_context(cafile=str(certs.ca_file))),
        )

    # Server verified, but no client certificate: the handshake is refused.
    no_cert = ssl.create_default_context(cafile=str(certs.ca_file))
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        await asyncio.to_thread(_https, f"{base}/debug/ready", no_cert)
    # Plain HTTP to an HTTPS port is told so, as by Go's servers.
    for plain_port in (b.http_port, int(b.endpoint.rsplit(":", 1)[1].rstrip("/"))):
        with pytest.raises(urllib.error.HTTPError) as refused:
            await asyncio.to_thread(
                urllib.request.urlopen, f"http://127.0.0.1:{plain_port}/debug/ready", None, 5
            )
        assert refused.value.code == 400
        assert b"HTTP request to an HTTPS server" in refused.value.read()


async def test_a_gateway_of_its_own_serves_https_in_front_of_mtls_brokers(
    secure_cluster: testing.BrokerCluster, certs: tlstesting.Certs
) -> None:
    name = "tls/standalone-gateway"
    await _ready_journal(secure_cluster, name)
    config = http_gateway.ServerConfig(
        listen_config=dial.ListenConfig(tls=certs.server_tls()),
        dial_config=dial.DialConfig(tls=certs.client_tls()),
    )
    gw = http_gateway.Server(grpc_endpoint=secure_cluster[0].endpoint, config=config)
    port = await gw.start("127.0.0.1", 0)
    try:
        url = f"https://localhost:{port}/{name}"
        ctx = certs.client_ssl_context()
        status, _, _ = await asyncio.to_thread(_https, url, ctx, data=b"standalone\n")
        assert status == 204
        status, headers, body = await asyncio.to_thread(_https, f"{url}?offset=0", ctx)
        assert (status, body) == (206, b"standalone\n")
        # Location names this gateway, by the scheme it serves.
        assert headers["Location"] == url
    finally:
        await gw.close()


def test_tls_flags_that_do_not_load_stop_the_broker_with_the_flag(
    certs: tlstesting.Certs, tmp_path: pathlib.Path
) -> None:
    base = ["--broker.id", "tls-flags", "--broker.host", "127.0.0.1"]
    missing = str(tmp_path / "missing.crt")
    with pytest.raises(SystemExit, match=r"--broker.server-cert-file.*missing.crt"):
        config.parse(
            [
                *base,
                "--broker.server-cert-file",
                missing,
                "--broker.server-cert-key-file",
                str(certs.node_key_file),
            ],
            env={},
        )
    with pytest.raises(SystemExit, match=r"^--broker.server-cert-key-file: .*go together"):
        config.parse([*base, "--broker.server-cert-file", str(certs.node_cert_file)], env={})
    with pytest.raises(SystemExit, match=r"^--broker.peer-cert-file: .*go together"):
        config.parse(
            [*base, *certs.broker_args(), "--broker.peer-cert-file", ""],
            env={},
        )
    not_a_ca = tmp_path / "ca.pem"
    not_a_ca.write_text("no certificate here\n")
    with pytest.raises(SystemExit, match=r"--broker.peer-ca-file.*ca.pem"):
        config.parse(
            [
                *base,
                "--broker.server-cert-file",
                str(certs.node_cert_file),
                "--broker.server-cert-key-file",
                str(certs.node_key_file),
                "--broker.peer-ca-file",
                str(not_a_ca),
            ],
            env={},
        )
    # Without a server certificate the other TLS flags are ignored, as Gazette's.
    cfg = config.parse([*base, "--broker.peer-ca-file", missing], env={})
    assert not cfg.broker.tls and cfg.broker.endpoint.startswith("http://")
    cfg = config.parse([*base, "--broker.port", "8443", *certs.broker_args()], env={})
    assert cfg.broker.endpoint == "https://127.0.0.1:8443"

    # As a process: one line on stderr, exit status 1.
    proc = subprocess.run(
        [sys.executable, "-m", "gazette.broker", *base, "--broker.server-cert-file", missing],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert proc.stderr.startswith("--broker.server-cert-key-file: "), proc.stderr
    assert "go together" in proc.stderr and len(proc.stderr.splitlines()) == 1
