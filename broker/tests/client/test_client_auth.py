"""The client against brokers with ``--broker.auth-keys``: keys sign per-RPC tokens, a token is sent.

In-process brokers over the real etcd (``gazette.broker.server.testing``).
"""

from __future__ import annotations

import base64
import pathlib
from collections.abc import AsyncIterator

import grpc
import pytest

from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth
from gazette.broker.server import testing as server_testing
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEYS = base64.b64encode(b"client test key").decode()
Cap = auth.Capability


def token(capability: int, selector: str = "") -> str:
    return auth.KeyedAuth(KEYS).sign(auth.Claims(capability, pb.parse_selector(selector)), 600)


@pytest.fixture
async def cluster(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[server_testing.InProcessCluster]:
    async with server_testing.InProcessCluster(
        etcd_server.endpoint,
        work_dir=tmp_path,
        brokers=2,
        extra_args=["--broker.auth-keys", KEYS],
    ) as c:
        yield c


def config(cluster: server_testing.InProcessCluster, **kw: object) -> client.ClientConfig:
    return client.ClientConfig(address=cluster[0].endpoint, **kw)  # type: ignore[arg-type]


async def _specs(jc: client.JournalClient, cluster: server_testing.InProcessCluster) -> None:
    req = pb.ApplyRequest()
    for name, topic in (("cl/a/one", "a"), ("cl/b/one", "b")):
        s = testing.journal_spec(
            name, replication=2, stores=[cluster.store_url], labels=[("topic", topic)]
        )
        req.changes.add(expect_mod_revision=0).upsert.CopyFrom(s)
    await client.apply_journals(jc, req)


async def _read_all(jc: client.JournalClient, journal: str) -> bytes:
    async with client.RetryReader(jc, pb.ReadRequest(journal=journal)) as rr:
        return b"".join([chunk async for chunk in rr])


async def test_keys_sign_a_token_per_rpc(cluster: server_testing.InProcessCluster) -> None:
    for cache_size in (0, 16):  # Brokers proxy, or the client dispatches itself.
        async with client.JournalClient(
            config(cluster, auth_keys=KEYS, cache_size=cache_size)
        ) as jc:
            if cache_size == 0:
                await _specs(jc, cluster)
            listing = await client.list_journals(jc, "name:prefix=cl/")
            assert [j.spec.name for j in listing.journals] == ["cl/a/one", "cl/b/one"]
            await client.append(jc, "cl/a/one", f"hello {cache_size}\n".encode())
            async with client.AppendService(jc) as svc:
                for i in range(3):
                    svc.append("cl/b/one", f"record {i}\n".encode())
            frags = [
                f
                async for f in client.list_all_fragments(
                    jc, pb.FragmentsRequest(journal="cl/a/one")
                )
            ]
            assert frags
            await client.fragment_store_health(jc, cluster.store_url)
        assert (await _read_all(jc, "cl/b/one")).count(b"record") == 3 * (cache_size // 16 + 1)

    # A token of one's own, limited to topic=a: the rest of the cluster doesn't exist.
    async with client.JournalClient(config(cluster, auth_token=token(Cap.ALL, "topic=a"))) as jc:
        listing = await client.list_journals(jc)
        assert [j.spec.name for j in listing.journals] == ["cl/a/one"]
        assert await _read_all(jc, "cl/a/one") == b"hello 0\nhello 16\n"
        with pytest.raises(client.errors.JournalNotFound):
            await client.append(jc, "cl/b/one", b"no\n")
        with pytest.raises(client.errors.JournalNotFound):
            await _read_all(jc, "cl/b/one")


async def test_refused_credentials_surface_at_once_and_are_not_retried(
    cluster: server_testing.InProcessCluster,
) -> None:
    async with client.JournalClient(config(cluster, auth_keys=KEYS)) as jc:
        await _specs(jc, cluster)
    for cfg, want, may_list in (
        (config(cluster), "missing or empty Authorization token", False),
        (config(cluster, auth_token=token(Cap.LIST)), "missing required READ capability", True),
        (
            config(cluster, auth_keys=base64.b64encode(b"wrong").decode()),
            "signature is invalid",
            False,
        ),
    ):
        async with client.JournalClient(cfg) as jc:
            with pytest.raises(client.errors.TransportError) as e:
                await _read_all(jc, "cl/a/one")
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED and want in str(e.value)
            assert client.errors.is_refused(e.value)
            with pytest.raises(client.errors.TransportError) as e:
                await client.append(jc, "cl/a/one", b"x")
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
            if may_list:
                continue
            watched = client.WatchedList(jc, "name:prefix=cl/")
            with pytest.raises((grpc.aio.AioRpcError, client.errors.ClientError)) as w:
                async for _ in watched.updates():
                    break
            assert client.errors.is_refused(w.value)
    with pytest.raises(pb.AuthorizationError, match="failed to decode key at index 0"):
        client.JournalClient(config(cluster, auth_keys="not base64!"))


def test_client_config_keeps_secrets_out_of_its_repr() -> None:
    cfg = client.ClientConfig(auth_keys=KEYS, auth_token="sekrit")
    assert KEYS not in repr(cfg) and "sekrit" not in repr(cfg)
