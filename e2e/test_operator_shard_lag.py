"""A Shard's lag in its status and in ``kubectl get shards``, against a real kube-apiserver.

Real parts: a kube-apiserver with the CRDs, the operator (``python -m gazette.operator``,
checking lag every second), etcd, a broker process, and a consumer process (in this
test's process) whose one shard counts JSON messages but holds each at a gate. The
operator finds the shard's primary and the broker from etcd, asks the primary's Stat
how far it has read, reads the source's write head, and writes ``status.lag``:

1. no consumer yet: no number, ``lagUnknown`` NO_SHARD_PRIMARY;
2. the consumer holds the messages at its gate: the lag is the whole journal, and
   ``kubectl get shards`` prints it in its LAG column;
3. the gate opens, the shard catches up: the lag falls to 0;
4. the consumer stops: the 0 goes (no stale number), ``lagUnknown`` says why.

Then the same with authorization on, as the chart installs it by default: the brokers
verify tokens with a keys file, the consumer verifies its Shard API with keys of its own,
and the operator, given both (``--broker.auth-keys-file``, ``--consumer.auth-keys-file``),
signs a token of READ of one journal or one shard for each call: the lag is known and
falls to 0, and after the brokers' keys are rotated (the new key first, then the old one
dropped) under the running operator, it still reads write heads.

And with TLS on, as ``values-secure.yaml`` installs it: the broker and the consumer serve
``https://`` and require client certificates, each of its own CA; the operator, given its
client side of both (``--broker.cert-file`` and friends by environment, as the chart
gives them, ``--consumer.*`` by flag), reads the lag and sees it fall to 0, where a
client without a certificate is refused.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import pathlib
import secrets
from collections.abc import Callable
from typing import Any

import grpc
import pytest
import yaml
from apiserver import kubeapi

from gazette import message
from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth, dial, tlstesting
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.consumer import protocol as pc
from gazette.consumer import testing as consumer_testing
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CLUSTER = {"gazette.dev/cluster": "e2e"}
SOURCE = "examples/lag/part-000"
APP = "lag-count"
SHARD_ID = "lag-count/part-000"
MESSAGES = 50


class Num(message.JSONMessage):
    pass


class GatedCount:
    """Counts messages, each only once ``gate`` is open (so the shard stays behind)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.seen = 0

    async def new_store(self, shard: Any) -> Any:
        return consumer_testing.MemoryStore()

    def new_message(self, spec: pb.JournalSpec) -> message.Message:
        return Num()

    async def consume_message(self, shard: Any, store: Any, env: Any, pub: Any) -> None:
        await self.gate.wait()
        self.seen += 1

    async def finalize_txn(self, shard: Any, store: Any, pub: Any) -> None:
        pass


def manifests() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "gazette.dev/v1alpha1",
            "kind": "Journal",
            "metadata": {"name": "lag-part-000", "labels": CLUSTER},
            "spec": {
                "name": SOURCE,
                "replication": 1,
                "labels": [{"name": "content-type", "value": "application/x-ndjson"}],
                "fragment": {
                    "length": 1 << 20,
                    "compressionCodec": "NONE",
                    "stores": ["file:///"],
                    "refreshInterval": "10s",
                },
            },
        },
        {
            "apiVersion": "gazette.dev/v1alpha1",
            "kind": "Shard",
            "metadata": {
                "name": "lag-0",
                "labels": {**CLUSTER, "gazette.dev/consumer": APP, "app": APP},
            },
            "spec": {
                "name": SHARD_ID,
                "sources": [{"journal": SOURCE}],
                "maxTxnDuration": "100ms",
            },
        },
    ]


async def shard_status(kube: kubeapi.KubeAPIServer, ns: str) -> dict[str, Any]:
    out = await kube.kubectl_async("get", "shard", "lag-0", "-n", ns, "-o", "json")
    return dict(json.loads(out.stdout).get("status") or {})


async def wait_status(
    kube: kubeapi.KubeAPIServer,
    ns: str,
    ok: Callable[[dict[str, Any]], bool],
    what: str,
    within: float = 45,
) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def check() -> bool:
        seen.clear()
        seen.update(await shard_status(kube, ns))
        return ok(seen)

    try:
        await kubeapi.eventually(check, within=within, what=what)
    except AssertionError as e:
        lag = {k: v for k, v in seen.items() if k.startswith("lag") or k == "primary"}
        raise AssertionError(f"{e}: {json.dumps(lag)}") from None
    return seen


async def lag_cell(kube: kubeapi.KubeAPIServer, ns: str) -> str:
    """The LAG cell of the Shard's row in ``kubectl get shards``, after checking the header."""
    table = await kube.kubectl_async("get", "shards", "-n", ns, "-l", f"app={APP}")
    header, row = table.stdout.strip().splitlines()
    names = header.split()
    assert names == [
        "NAME", "SHARD", "CLUSTER", "CONSUMER", "PRIMARY", "STATUS", "STANDBYS", "READY",
        "LAG", "AGE",
    ], table.stdout  # fmt: skip
    # Cells are aligned under their header: the LAG cell starts where its header does.
    start = header.index("LAG")
    return row[start : header.index("AGE")].strip()


def unknown(st: dict[str, Any]) -> bool:
    return "lag" not in st and bool(st.get("lagUnknown")) and bool(st.get("lagCheckedAt"))


async def test_shard_lag_shows_unread_bytes_then_zero_once_caught_up(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    gazette_etcd: ks_testing.EtcdServer,
    etcd_roots: tuple[str, str],
    tmp_path: pathlib.Path,
) -> None:
    broker_root, consumers_root = etcd_roots
    brokers = testing.BrokerCluster(
        gazette_etcd.endpoint,
        work_dir=tmp_path / "brokers",
        brokers=1,
        etcd_prefix=broker_root,
        lease="3s",
    )
    with brokers:
        # The broker is found in etcd (no --broker.address).
        start_operator(namespace, args=("--shard-lag-interval=1",))
        try:
            await kube.kubectl_async(
                "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(manifests())
            )
            async with brokers.channel(0) as ch:
                await testing.wait_writable(pb2_grpc.JournalStub(ch), SOURCE)

            # 1. No consumer runs: nothing to ask, and no number.
            st = await wait_status(
                kube,
                namespace,
                lambda s: unknown(s) and s["lagUnknown"] == "NO_SHARD_PRIMARY",
                "lag unknown: NO_SHARD_PRIMARY",
            )
            assert "lagSources" not in st
            assert await lag_cell(kube, namespace) == ""

            async with client.JournalClient(client.ClientConfig(address=brokers[0].endpoint)) as jc:
                body = b"".join(
                    b'{"UUID":"00000000-0000-0000-0000-000000000000","n":%d}\n' % i
                    for i in range(MESSAGES)
                )
                head = (await client.append(jc, SOURCE, body)).commit.end
            assert head > 0

            app = GatedCount()
            args = consumer_testing.argv(
                etcd=gazette_etcd.endpoint,
                broker=brokers[0].endpoint,
                prefix=f"{consumers_root}/{APP}",
                id="consumer-0",
                zone="zone-a",
            )
            async with consumer_testing.serving(args, app):
                # 2. Held at the gate: nothing is read through, the whole journal is lag.
                # (Both: the replicas' fields and the lag are written by two writers, the
                # lag's round may come before the replicas' debounced write.)
                st = await wait_status(
                    kube,
                    namespace,
                    lambda s: s.get("lag") == head and s.get("primary") == "zone-a/consumer-0",
                    f"lag {head} while the consumer is held, and its primary",
                )
                assert "lagUnknown" not in st
                assert st["lagSources"] == [
                    {"journal": SOURCE, "readThrough": 0, "writeHead": head, "lag": head}
                ]
                assert await lag_cell(kube, namespace) == str(head)

                # 3. The gate opens: the shard reads everything, the lag falls to 0.
                app.gate.set()
                st = await wait_status(
                    kube, namespace, lambda s: s.get("lag") == 0, "lag 0 once caught up"
                )
                assert st["lagSources"] == [
                    {"journal": SOURCE, "readThrough": head, "writeHead": head, "lag": 0}
                ]
                assert app.seen == MESSAGES
                assert await lag_cell(kube, namespace) == "0"

            # 4. Stopped: its 0 is not shown as if it were current.
            st = await wait_status(
                kube, namespace, unknown, "lag unknown once the consumer stopped"
            )
            assert st["lagUnknown"] in ("NO_SHARD_PRIMARY", "UNAVAILABLE"), st
            assert await lag_cell(kube, namespace) == ""
        finally:
            await kube.kubectl_async(
                "delete", "shards,journals", "--all", "-n", namespace, "--wait=true", check=False
            )
            ks_testing.wipe_prefix(gazette_etcd.endpoint, broker_root + "/")
            ks_testing.wipe_prefix(gazette_etcd.endpoint, consumers_root + "/")


def _key() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


async def test_shard_lag_with_authorization_on(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    gazette_etcd: ks_testing.EtcdServer,
    etcd_roots: tuple[str, str],
    tmp_path: pathlib.Path,
) -> None:
    broker_root, consumers_root = etcd_roots
    old, new, consumer_key = _key(), _key(), _key()
    # One file for brokers and operator, as the chart mounts one Secret into both.
    broker_keys = tmp_path / "broker-auth-keys"
    broker_keys.write_text(old + "\n")
    consumer_keys = tmp_path / "consumer-auth-keys"
    consumer_keys.write_text(consumer_key + "\n")
    brokers = testing.BrokerCluster(
        gazette_etcd.endpoint,
        work_dir=tmp_path / "brokers",
        brokers=1,
        etcd_prefix=broker_root,
        lease="3s",
        extra_args=("--broker.auth-keys-file", str(broker_keys)),
    )
    with brokers:
        start_operator(
            namespace,
            args=(
                "--shard-lag-interval=1",
                f"--broker.auth-keys-file={broker_keys}",
                f"--consumer.auth-keys-file={consumer_keys}",
            ),
        )
        try:
            await kube.kubectl_async(
                "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(manifests())
            )
            append_token = auth.KeyedAuth(old).authorize(
                auth.journal_claims(auth.Capability.APPEND, SOURCE)
            )
            async with brokers.channel(0) as ch:
                await testing.wait_writable(pb2_grpc.JournalStub(ch), SOURCE, metadata=append_token)
            body = b"".join(
                b'{"UUID":"00000000-0000-0000-0000-000000000000","n":%d}\n' % i
                for i in range(MESSAGES)
            )
            config = client.ClientConfig(address=brokers[0].endpoint, auth_keys=old)
            async with client.JournalClient(config) as jc:
                head = (await client.append(jc, SOURCE, body)).commit.end

            app = GatedCount()
            args = consumer_testing.argv(
                etcd=gazette_etcd.endpoint,
                broker=brokers[0].endpoint,
                prefix=f"{consumers_root}/{APP}",
                id="consumer-0",
                zone="zone-a",
                extra=("--broker.auth-keys", old, "--consumer.auth-keys", consumer_key),
            )
            async with consumer_testing.serving(args, app):
                # Both calls authorized: the Stat (consumer keys) and the write head
                # (brokers' keys) give the whole journal as lag while the gate holds.
                st = await wait_status(
                    kube, namespace, lambda s: s.get("lag") == head, f"lag {head} with auth on"
                )
                assert "lagUnknown" not in st
                assert st["lagSources"] == [
                    {"journal": SOURCE, "readThrough": 0, "writeHead": head, "lag": head}
                ]

                app.gate.set()
                st = await wait_status(
                    kube, namespace, lambda s: s.get("lag") == 0, "lag 0 once caught up"
                )
                assert st["lagSources"] == [
                    {"journal": SOURCE, "readThrough": head, "writeHead": head, "lag": 0}
                ]

                # Rotation, in the file both read: the new key first (brokers verify
                # both, everyone signs with the new one), then the old one dropped.
                app.gate.clear()
                broker_keys.write_text(f"{new}, {old}\n")
                await asyncio.sleep(4)  # Brokers check their file every 2 s.
                broker_keys.write_text(f"{new}\n")
                await asyncio.sleep(4)
                # Appended under the new key only: a write head the operator can read
                # only with a token of the new key (the consumer holds these at its gate).
                more = b'{"UUID":"00000000-0000-0000-0000-000000000000","n":-1}\n' * 10
                config = client.ClientConfig(address=brokers[0].endpoint, auth_keys=new)
                async with client.JournalClient(config) as jc:
                    head2 = (await client.append(jc, SOURCE, more)).commit.end
                assert head2 == head + len(more)
                st = await wait_status(
                    kube,
                    namespace,
                    lambda s: s.get("lagSources", [{}])[0].get("writeHead") == head2,
                    f"write head {head2}, read with a token of the rotated key",
                )
                assert "lagUnknown" not in st
                assert st["lag"] == head2 - st["lagSources"][0]["readThrough"]
        finally:
            await kube.kubectl_async(
                "delete", "shards,journals", "--all", "-n", namespace, "--wait=true", check=False
            )
            ks_testing.wipe_prefix(gazette_etcd.endpoint, broker_root + "/")
            ks_testing.wipe_prefix(gazette_etcd.endpoint, consumers_root + "/")


async def test_shard_lag_over_mutual_tls(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    gazette_etcd: ks_testing.EtcdServer,
    etcd_roots: tuple[str, str],
    tmp_path: pathlib.Path,
) -> None:
    broker_root, consumers_root = etcd_roots
    # Two CAs: a side given the other's files (a wrong CA, a certificate the server does
    # not trust) would fail its handshake, so lag known shows each side has its own.
    bcerts = tlstesting.make_certs(tmp_path / "broker-tls", name="broker-ca")
    ccerts = tlstesting.make_certs(tmp_path / "consumer-tls", name="consumer-ca")
    brokers = testing.BrokerCluster(
        gazette_etcd.endpoint,
        work_dir=tmp_path / "brokers",
        brokers=1,
        etcd_prefix=broker_root,
        lease="3s",
        tls=bcerts,  # Serves https://, requires a client certificate of broker-ca.
    )
    with brokers:
        assert brokers[0].endpoint.startswith("https://")
        ctls = ccerts.client_tls()
        start_operator(
            namespace,
            args=(
                "--shard-lag-interval=1",
                f"--consumer.cert-file={ctls.cert_file}",
                f"--consumer.cert-key-file={ctls.key_file}",
                f"--consumer.trusted-ca-file={ctls.ca_file}",
            ),
            env=bcerts.client_env(),  # BROKER_CERT_FILE etc., as the chart sets them.
        )
        try:
            await kube.kubectl_async(
                "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(manifests())
            )
            async with brokers.channel(0) as ch:
                await testing.wait_writable(pb2_grpc.JournalStub(ch), SOURCE)
            body = b"".join(
                b'{"UUID":"00000000-0000-0000-0000-000000000000","n":%d}\n' % i
                for i in range(MESSAGES)
            )
            btls = bcerts.client_tls()
            config = client.ClientConfig(
                address=brokers[0].endpoint,
                cert_file=btls.cert_file,
                cert_key_file=btls.key_file,
                trusted_ca_file=btls.ca_file,
            )
            async with client.JournalClient(config) as jc:
                head = (await client.append(jc, SOURCE, body)).commit.end

            app = GatedCount()
            args = consumer_testing.argv(
                etcd=gazette_etcd.endpoint,
                broker=brokers[0].endpoint,
                prefix=f"{consumers_root}/{APP}",
                id="consumer-0",
                zone="zone-a",
                # Serves https:// with consumer-ca's certificate and requires a client
                # certificate of it; reaches the broker with broker-ca's client one.
                extra=(*ccerts.broker_args("consumer"), *bcerts.client_args()),
            )
            async with consumer_testing.serving(args, app) as serving:
                assert serving.endpoint.startswith("https://127.0.0.1:")
                # What the operator's calls were before it had a certificate: refused at
                # the handshake, so the lag could only be UNAVAILABLE.
                bare = dial.channel(
                    serving.endpoint, dial.DialConfig(tls=dial.TLS(ca_file=ctls.ca_file))
                )
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await pc_grpc.ShardStub(bare).Stat(pc.StatRequest(shard=SHARD_ID), timeout=5)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
                with contextlib.suppress(grpc.RpcError):
                    await bare.close()

                st = await wait_status(
                    kube,
                    namespace,
                    lambda s: s.get("lag") == head and s.get("primary") == "zone-a/consumer-0",
                    f"lag {head} over mutual TLS while the consumer is held",
                )
                assert "lagUnknown" not in st
                assert st["lagSources"] == [
                    {"journal": SOURCE, "readThrough": 0, "writeHead": head, "lag": head}
                ]
                assert await lag_cell(kube, namespace) == str(head)

                app.gate.set()
                st = await wait_status(
                    kube, namespace, lambda s: s.get("lag") == 0, "lag 0 once caught up"
                )
                assert st["lagSources"] == [
                    {"journal": SOURCE, "readThrough": head, "writeHead": head, "lag": 0}
                ]
                assert app.seen == MESSAGES
                assert await lag_cell(kube, namespace) == "0"
        finally:
            await kube.kubectl_async(
                "delete", "shards,journals", "--all", "-n", namespace, "--wait=true", check=False
            )
            ks_testing.wipe_prefix(gazette_etcd.endpoint, broker_root + "/")
            ks_testing.wipe_prefix(gazette_etcd.endpoint, consumers_root + "/")
