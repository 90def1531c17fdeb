"""The HTTP gateway of real brokers: a Location an HTTP client can follow, and Go's headers."""

from __future__ import annotations

import pathlib
from typing import Any

import aiohttp
import pytest

from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _primary_and_other(
    cluster: testing.BrokerCluster, name: str, content: bytes = b""
) -> tuple[Any, Any]:
    """Create journal ``name`` (replication 1), append ``content``; (a broker that
    isn't its primary, its primary)."""
    async with client.JournalClient(client.ClientConfig(address=cluster[0].endpoint)) as jc:
        change = pb.ApplyRequest.Change(upsert=testing.journal_spec(name, replication=1))
        await client.apply_journals(jc, pb.ApplyRequest(changes=[change]))
        async with cluster.channel(0) as ch:
            await testing.wait_writable(pb2_grpc.JournalStub(ch), name)
        if content:
            await client.append(jc, name, content)
        listing = await client.list_journals(jc, pb.parse_selector(f"name={name}"))
    route = listing.journals[0].route
    primary = route.members[route.primary].suffix
    other = next(b for b in cluster.brokers if b.suffix != primary)
    owner = next(b for b in cluster.brokers if b.suffix == primary)
    return other, owner


async def test_location_names_the_primarys_http_port_and_headers_are_gos(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    with testing.running_cluster(etcd_server.endpoint, tmp_path, brokers=2) as cluster:
        name = "http/location"
        other, owner = await _primary_and_other(cluster, name, b"hello, http\n")

        async with aiohttp.ClientSession() as http:
            # Asked at the broker that is not primary: Location is the primary's HTTP port.
            url = f"http://127.0.0.1:{other.http_port}/{name}?offset=0"
            async with http.get(url) as resp:
                assert resp.status == 206
                location = resp.headers["Location"]
                assert location == f"http://127.0.0.1:{owner.http_port}/{name}"
                assert resp.headers["Content-Type"] == "application/octet-stream"
                assert "Date" in resp.headers
                token = resp.headers["X-Route-Token"]
                assert token.startswith(f'members:<zone:"{owner.zone}" suffix:"{owner.suffix}" >')
                assert await resp.content.readexactly(12) == b"hello, http\n"
            # ...and an HTTP client can follow it.
            async with http.get(f"{location}?offset=6") as resp:
                assert resp.status == 206
                assert await resp.content.readexactly(6) == b" http\n"
            # Errors are text, with Go's nosniff.
            async with http.get(f"http://127.0.0.1:{other.http_port}/no/such/journal") as resp:
                assert resp.status == 404
                assert resp.headers["X-Content-Type-Options"] == "nosniff"
                assert resp.headers["Content-Type"].startswith("text/plain")
                assert await resp.text() == "JOURNAL_NOT_FOUND\n"


async def test_the_grpc_port_serves_the_gateway_too(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    """As Gazette's broker: HTTP requests on the gRPC port reach the gateway, and its
    Location names the primary's gRPC port (the port it was asked on)."""
    with testing.running_cluster(etcd_server.endpoint, tmp_path, brokers=2) as cluster:
        name = "http/one-port"
        other, owner = await _primary_and_other(cluster, name)
        other_port = int(other.endpoint.rsplit(":", 1)[1])
        owner_port = int(owner.endpoint.rsplit(":", 1)[1])

        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{other_port}/debug/ready") as resp:
                assert resp.status == 200
            # A PUT through the broker that isn't primary appends (proxied over gRPC).
            url = f"http://127.0.0.1:{other_port}/{name}"
            async with http.put(url, data=b"one port\n") as resp:
                assert resp.status == 204, await resp.text()
                assert resp.headers["X-Commit-End"] == "9"
            async with http.get(f"{url}?offset=0") as resp:
                assert resp.status == 206
                assert resp.headers["Location"] == f"http://127.0.0.1:{owner_port}/{name}"
                assert await resp.content.readexactly(9) == b"one port\n"
            async with http.get(f"http://127.0.0.1:{other_port}/no/such/journal") as resp:
                assert resp.status == 404
                assert await resp.text() == "JOURNAL_NOT_FOUND\n"


async def test_the_ports_connections_are_counted_in_metrics(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    """The front door's connection counters reach /debug/metrics."""
    with testing.running_cluster(etcd_server.endpoint, tmp_path, brokers=1) as cluster:
        b = cluster.brokers[0]
        port = int(b.endpoint.rsplit(":", 1)[1])
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/debug/metrics") as resp,
        ):
            assert resp.status == 200
            text = await resp.text()
        samples = dict(
            line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("gazette_broker_")
        )
        # At least this connection is open; nothing was refused or silent.
        assert float(samples["gazette_broker_connections_open"]) >= 1
        assert float(samples["gazette_broker_connections_refused_total"]) == 0
        assert float(samples["gazette_broker_connections_silent_total"]) == 0
        assert float(samples["gazette_broker_accept_errors_total"]) == 0
