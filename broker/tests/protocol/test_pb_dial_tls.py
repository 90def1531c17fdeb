"""TLS through the dial seam: ``dial.TLS`` files, TLS ports, and channels chosen by scheme."""

from __future__ import annotations

import pathlib
import ssl

import grpc
import pytest

from gazette.broker import protocol as pb
from gazette.broker.protocol import dial, tlstesting
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tlstesting.Certs:
    return tlstesting.make_certs(tmp_path_factory.mktemp("tls"))


class _Servicer(pb2_grpc.JournalServicer):
    async def List(self, request, context):  # type: ignore[no-untyped-def]
        await context.write(pb.ListResponse(status=pb.OK))


async def _list(endpoint: str, tls: dial.TLS) -> str:
    async with dial.channel(endpoint, dial.DialConfig(tls=tls)) as ch:
        try:
            got = [r async for r in pb2_grpc.JournalStub(ch).List(pb.ListRequest(), timeout=5)]
        except grpc.aio.AioRpcError as e:
            return e.code().name
    return pb.Status.Name(got[0].status)


async def _serving(config: dial.ListenConfig) -> tuple[grpc.aio.Server, int]:
    server = dial.server(config)
    pb2_grpc.add_JournalServicer_to_server(_Servicer(), server)
    port = dial.listen(server, "127.0.0.1", 0, config)
    assert port > 0
    await server.start()
    return server, port


async def test_a_tls_port_with_a_ca_requires_a_client_certificate_of_it(
    certs: tlstesting.Certs, tmp_path: pathlib.Path
) -> None:
    server, port = await _serving(dial.ListenConfig(tls=certs.server_tls()))
    try:
        # By IP address and by name: the certificate names both.
        assert await _list(f"https://127.0.0.1:{port}", certs.client_tls()) == "OK"
        assert await _list(f"https://localhost:{port}", certs.client_tls()) == "OK"
        no_cert = dial.TLS(ca_file=str(certs.ca_file))
        assert await _list(f"https://127.0.0.1:{port}", no_cert) == "UNAVAILABLE"
        foreign = tlstesting.make_certs(tmp_path / "foreign", name="foreign-ca")
        assert await _list(f"https://127.0.0.1:{port}", foreign.client_tls()) == "UNAVAILABLE"
        # http:// dials plaintext, whatever the TLS settings: refused by a TLS port.
        assert await _list(f"http://127.0.0.1:{port}", certs.client_tls()) == "UNAVAILABLE"
    finally:
        await server.stop(None)


async def test_without_a_ca_a_tls_port_takes_clients_without_certificates(
    certs: tlstesting.Certs,
) -> None:
    server, port = await _serving(
        dial.ListenConfig(tls=certs.server_tls(require_client_certs=False))
    )
    try:
        assert (
            await _list(f"https://127.0.0.1:{port}", dial.TLS(ca_file=str(certs.ca_file))) == "OK"
        )
        # Without our CA the client can't verify the server (the default root pool).
        assert await _list(f"https://127.0.0.1:{port}", dial.TLS()) == "UNAVAILABLE"
    finally:
        await server.stop(None)


def test_tls_files_that_do_not_load_are_named(
    certs: tlstesting.Certs, tmp_path: pathlib.Path
) -> None:
    with pytest.raises(pb.TLSConfigError, match="go together"):
        dial.TLS(cert_file=str(certs.node_cert_file))
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(pb.TLSConfigError, match=r"missing\.pem") as e:
        dial.TLS(ca_file=missing).pem()
    assert e.value.path == missing
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not PEM\n")
    with pytest.raises(pb.TLSConfigError, match="holds no usable certificate"):
        dial.TLS(ca_file=str(garbage)).pem()
    # A key that isn't its certificate's.
    with pytest.raises(pb.TLSConfigError, match="don't load as a pair"):
        dial.TLS(str(certs.node_cert_file), str(certs.client_key_file)).pem()
    with pytest.raises(pb.TLSConfigError, match="needs a certificate"):
        dial.ListenConfig(tls=dial.TLS(ca_file=str(certs.ca_file)))
    # A channel to an https:// endpoint loads its files when it is made.
    with pytest.raises(pb.TLSConfigError):
        dial.channel("https://127.0.0.1:1", dial.DialConfig(tls=dial.TLS(ca_file=missing)))
    cert, key, ca = certs.client_tls().pem()
    assert cert and cert.startswith(b"-----BEGIN CERTIFICATE")
    assert key and b"PRIVATE KEY" in key
    assert ca == certs.ca_file.read_bytes()


def test_ssl_contexts_of_http_ports(certs: tlstesting.Certs) -> None:
    assert dial.server_ssl_context(dial.ListenConfig()) is None
    ctx = dial.server_ssl_context(dial.ListenConfig(tls=certs.server_tls()))
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED
    ctx = dial.server_ssl_context(
        dial.ListenConfig(tls=certs.server_tls(require_client_certs=False))
    )
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE
    assert dial.client_ssl_context(certs.client_tls()).verify_mode == ssl.CERT_REQUIRED


def test_endpoints_use_tls_by_scheme() -> None:
    assert pb.endpoint_uses_tls("https://broker:8080")
    assert not pb.endpoint_uses_tls("http://broker:8080")
    assert not pb.endpoint_uses_tls("unix:///tmp/broker.sock")
    assert pb.endpoint_grpc_addr("https://broker") == "broker:443"
