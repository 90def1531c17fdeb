"""The real-node tier's cluster DNS (e2e/node/dns.py) on the wire, without a node.

``make e2e-node`` needs root and changes the machine, so ``make test`` leaves it out;
this checks the DNS message handling it relies on, against canned lookups: A answers
for cluster names, NXDOMAIN for others, an empty answer for AAAA, SERVFAIL when the
API cannot be read, and a real UDP round trip on loopback.
"""

from __future__ import annotations

import socket
import struct

import pytest
from node.dns import ClusterDNS

NAMES = {
    "gazette-s3.gazette.svc.cluster.local": ["10.96.0.20"],
    "gazette-etcd-headless.gazette.svc.cluster.local": ["10.244.77.6", "10.244.77.7"],
}


class CannedDNS(ClusterDNS):
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, "https://127.0.0.1:1", "token", b"", port=port)

    def resolve(self, name: str) -> list[str] | None:
        if name == "broken.gazette.svc.cluster.local":
            raise OSError("the API did not answer")
        return NAMES.get(name.lower().rstrip("."))


@pytest.fixture(autouse=True)
def no_ca(monkeypatch: pytest.MonkeyPatch) -> None:
    # The canned server reads no API: no CA to load.
    monkeypatch.setattr("ssl.create_default_context", lambda **_: None)


def query(name: str, qtype: int = 1, ident: int = 0x1234) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return (
        struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0)
        + labels
        + b"\0"
        + struct.pack("!HH", qtype, 1)
    )


def parse(answer: bytes) -> tuple[int, int, int, list[str]]:
    ident, flags, qd, an, _ns, _ar = struct.unpack("!HHHHHH", answer[:12])
    assert qd == 1
    at = 12
    while answer[at]:
        at += 1 + answer[at]
    at += 5
    ips = []
    for _ in range(an):
        pointer, rtype, rclass, _ttl, size = struct.unpack("!HHHIH", answer[at : at + 12])
        assert (pointer, rtype, rclass, size) == (0xC00C, 1, 1, 4)
        ips.append(socket.inet_ntoa(answer[at + 12 : at + 16]))
        at += 16
    return ident, flags & 0x000F, flags, ips


def test_a_records_of_cluster_names() -> None:
    dns = CannedDNS()
    ident, rcode, flags, ips = parse(
        dns.answer(query("gazette-etcd-headless.gazette.svc.cluster.local")) or b""
    )
    assert (ident, rcode, ips) == (0x1234, 0, ["10.244.77.6", "10.244.77.7"])
    assert flags & 0x8000 and flags & 0x0100  # a response; recursion desired echoed


def test_unknown_names_are_nxdomain_and_aaaa_is_empty() -> None:
    dns = CannedDNS()
    assert parse(dns.answer(query("example.com")) or b"")[1:4:2] == (3, [])
    _, rcode, _, ips = parse(
        dns.answer(query("gazette-s3.gazette.svc.cluster.local", qtype=28)) or b""
    )
    assert (rcode, ips) == (0, [])


def test_api_failure_is_servfail_and_junk_is_ignored() -> None:
    dns = CannedDNS()
    assert parse(dns.answer(query("broken.gazette.svc.cluster.local")) or b"")[1] == 2
    assert dns.answer(b"\x00\x01") is None
    response = bytearray(query("gazette-s3.gazette.svc.cluster.local"))
    response[2] |= 0x80  # a response, not a question
    assert dns.answer(bytes(response)) is None


def test_udp_round_trip_on_loopback() -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with CannedDNS(port=port) as dns:
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.settimeout(5)
        client.sendto(query("gazette-s3.gazette.svc.cluster.local", ident=7), ("127.0.0.1", port))
        answer, _ = client.recvfrom(512)
        client.close()
    assert parse(answer)[0::3] == (7, ["10.96.0.20"])
    assert dns.queries == 1
