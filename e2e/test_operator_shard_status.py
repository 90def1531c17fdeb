"""A Shard's status from its replicas in etcd, against a real kube-apiserver and etcd.

The operator (``python -m gazette.operator``) follows each consumer application's
assignments with one etcd watch (no per-object timer) and writes each Shard object's ``status``: primary,
standbys, route, replicas and the Ready condition. Assignments are written here as
the consumer runtime writes them (keys of :func:`gazette.allocator.assignment_key`,
serialized ``ReplicaStatus`` values, checked with the runtime's own decoder), and
the result is read back with ``kubectl`` as a user would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from apiserver import kubeapi

from gazette import allocator
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import shards as runtime_shards
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CLUSTER = {"gazette.dev/cluster": "e2e"}
Code = pc.ReplicaStatus.Code


def journal(obj: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "gazette.dev/v1alpha1",
        "kind": "Journal",
        "metadata": {"name": obj, "labels": CLUSTER},
        "spec": {
            "name": name,
            "replication": 1,
            "labels": [{"name": "content-type", "value": "application/x-ndjson"}],
            "fragment": {
                "length": 1 << 20,
                "compressionCodec": "GZIP",
                "stores": ["file:///var/fragments/"],
                "refreshInterval": "1m",
            },
        },
    }


def shard(obj: str, shard_id: str, app: str, source: str) -> dict[str, Any]:
    return {
        "apiVersion": "gazette.dev/v1alpha1",
        "kind": "Shard",
        "metadata": {
            "name": obj,
            "labels": {**CLUSTER, "gazette.dev/consumer": app, "app": app},
        },
        "spec": {
            "name": shard_id,
            "sources": [{"journal": source}],
            "maxTxnDuration": "1s",
            "hotStandbys": 1,
        },
    }


def assignment(prefix: str, shard_id: str, zone: str, suffix: str, slot: int, code: int) -> bytes:
    """The key of an assignment, after checking its value decodes as the runtime decodes it."""
    key = allocator.assignment_key(prefix, allocator.Assignment(shard_id, zone, suffix, slot))
    decode = allocator.key_value_decoder(prefix, runtime_shards.ShardDecoder())
    decoded = decode(key, replica(code))
    assert isinstance(decoded, allocator.Assignment) and decoded.value.code == code
    return key.encode()


def replica(code: int) -> bytes:
    # The allocator creates an assignment empty (IDLE); the replica then writes its status.
    return pc.ReplicaStatus(code=code).SerializeToString()  # type: ignore[arg-type]


async def get_shards(kube: kubeapi.KubeAPIServer, ns: str) -> dict[str, dict[str, Any]]:
    out = await kube.kubectl_async("get", "shards", "-n", ns, "-o", "json")
    return {o["metadata"]["name"]: o for o in json.loads(out.stdout)["items"]}


def condition(obj: dict[str, Any], kind: str) -> tuple[str, str]:
    for cond in (obj.get("status") or {}).get("conditions", ()):
        if cond["type"] == kind:
            return cond["status"], cond["reason"]
    return "", ""


def served(obj: dict[str, Any]) -> tuple[str, list[str], list[str], tuple[str, str]]:
    st = obj.get("status") or {}
    return st.get("primary"), st.get("standbys"), st.get("route"), condition(obj, "Ready")


async def wait_for(
    kube: kubeapi.KubeAPIServer,
    ns: str,
    want: dict[str, Callable[[dict[str, Any]], bool]],
    what: str,
    within: float = 45,
) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = {}

    async def check() -> bool:
        got.clear()
        got.update(await get_shards(kube, ns))
        return all(name in got and ok(got[name]) for name, ok in want.items())

    try:
        await kubeapi.eventually(check, within=within, what=what)
    except AssertionError as e:
        raise AssertionError(
            f"{e}: {json.dumps({n: o.get('status') for n, o in got.items()})}"
        ) from None
    return got


async def test_shard_status_shows_primary_standbys_and_ready_from_etcd(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    gazette_etcd: ks_testing.EtcdServer,
    etcd_client: Any,
    etcd_roots: tuple[str, str],
) -> None:
    broker_root, consumers_root = etcd_roots
    prefix = f"{consumers_root}/word-count"
    # Lag checks off: their writes (e2e/test_operator_shard_lag.py) would land in the
    # "settled" window below; this test is about the replicas' fields.
    op = start_operator(namespace, args=("--shard-lag-interval=0",))
    docs = [
        journal("words", "examples/words/part-000"),
        shard("wc-0", "word-count/part-000", "word-count", "examples/words/part-000"),
        shard("wc-1", "word-count/part-001", "word-count", "examples/words/part-000"),
        shard("other-0", "other/part-000", "other", "examples/words/part-000"),
    ]
    try:
        await kube.kubectl_async(
            "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs)
        )
        # Applied (the spec is in etcd), but no consumer serves the shards: not Ready.
        await wait_for(
            kube,
            namespace,
            {
                name: lambda o: (
                    condition(o, "Applied") == ("True", "Applied")
                    and served(o) == ("", [], [], ("False", "NoPrimary"))
                )
                for name in ("wc-0", "wc-1", "other-0")
            },
            "shards Applied, without a primary",
        )

        # Consumers take the shards: wc-0 is primary in zone a with a standby in zone b;
        # wc-1's slot-0 replica still recovers (BACKFILL).
        p0 = assignment(prefix, "word-count/part-000", "zone-a", "consumer-1", 0, Code.PRIMARY)
        s0 = assignment(prefix, "word-count/part-000", "zone-b", "consumer-2", 1, Code.STANDBY)
        p1 = assignment(prefix, "word-count/part-001", "zone-b", "consumer-2", 0, Code.BACKFILL)
        s1 = assignment(prefix, "word-count/part-001", "zone-a", "consumer-1", 1, Code.STANDBY)
        await etcd_client.put(p0, replica(Code.PRIMARY))
        await etcd_client.put(s0, replica(Code.STANDBY))
        await etcd_client.put(p1, replica(Code.BACKFILL))
        await etcd_client.put(s1, replica(Code.STANDBY))
        got = await wait_for(
            kube,
            namespace,
            {
                "wc-0": lambda o: (
                    served(o)
                    == (
                        "zone-a/consumer-1",
                        ["zone-b/consumer-2"],
                        ["zone-a/consumer-1", "zone-b/consumer-2"],
                        ("True", "Primary"),
                    )
                ),
                "wc-1": lambda o: (
                    served(o)
                    == (
                        "",
                        ["zone-a/consumer-1"],
                        ["zone-b/consumer-2", "zone-a/consumer-1"],
                        ("False", "NoPrimary"),
                    )
                ),
            },
            "primaries and standbys from etcd",
        )
        assert got["wc-0"]["status"]["replicas"] == [
            {
                "member": "zone-a/consumer-1",
                "zone": "zone-a",
                "suffix": "consumer-1",
                "slot": 0,
                "status": "PRIMARY",
            },
            {
                "member": "zone-b/consumer-2",
                "zone": "zone-b",
                "suffix": "consumer-2",
                "slot": 1,
                "status": "STANDBY",
            },
        ]
        assert got["wc-0"]["status"]["observedGeneration"] == 1
        assert served(got["other-0"])[3] == ("False", "NoPrimary")

        # As a user sees it.
        table = await kube.kubectl_async("get", "shards", "-n", namespace, "-l", "app=word-count")
        lines = table.stdout.strip().splitlines()
        assert lines[0].split() == [
            "NAME", "SHARD", "CLUSTER", "CONSUMER", "PRIMARY", "STATUS", "STANDBYS", "READY",
            "LAG", "AGE",
        ]  # fmt: skip
        rows = {line.split()[0]: line.split() for line in lines[1:]}
        assert sorted(rows) == ["wc-0", "wc-1"], table.stdout
        assert rows["wc-0"][:8] == [
            "wc-0", "word-count/part-000", "e2e", "word-count", "zone-a/consumer-1", "PRIMARY",
            "1", "True",
        ], table.stdout  # fmt: skip
        # No primary: an empty cell.
        assert rows["wc-1"][:7] == [
            "wc-1", "word-count/part-001", "e2e", "word-count", "STANDBY", "1", "False",
        ], table.stdout  # fmt: skip

        # Settled: no more writes (status patches are not made when unchanged, and they
        # trigger no reconcile: the spec's revision and generation stay).
        version = got["wc-0"]["metadata"]["resourceVersion"]
        revision = got["wc-0"]["status"]["modRevision"]
        await asyncio.sleep(5)  # > 2 status intervals
        again = await get_shards(kube, namespace)
        assert again["wc-0"]["metadata"]["resourceVersion"] == version
        assert again["wc-0"]["status"]["modRevision"] == revision
        assert again["wc-0"]["metadata"]["generation"] == 1

        # The primary's assignment goes: Ready flips, the standby stays a standby.
        await etcd_client.delete(p0)
        got = await wait_for(
            kube,
            namespace,
            {
                "wc-0": lambda o: (
                    served(o)
                    == ("", ["zone-b/consumer-2"], ["zone-b/consumer-2"], ("False", "NoPrimary"))
                )
            },
            "Ready False once the primary is gone",
        )
        ready = next(c for c in got["wc-0"]["status"]["conditions"] if c["type"] == "Ready")
        assert "no replica is in slot 0" in ready["message"]

        # The allocator promotes the standby, which becomes primary: Ready again.
        await etcd_client.delete(s0)
        p0b = assignment(prefix, "word-count/part-000", "zone-b", "consumer-2", 0, Code.PRIMARY)
        await etcd_client.put(p0b, replica(Code.PRIMARY))
        await wait_for(
            kube,
            namespace,
            {
                "wc-0": lambda o: (
                    served(o)
                    == ("zone-b/consumer-2", [], ["zone-b/consumer-2"], ("True", "Primary"))
                )
            },
            "Ready again with the promoted primary",
        )

        # A failed primary says why.
        failed = pc.ReplicaStatus(code=Code.FAILED, errors=["store: disk full"])
        await etcd_client.put(p0b, failed.SerializeToString())
        got = await wait_for(
            kube,
            namespace,
            {"wc-0": lambda o: served(o)[3] == ("False", "Failed")},
            "Ready False, Failed",
        )
        assert got["wc-0"]["status"]["replicaStatus"] == "FAILED"
        assert got["wc-0"]["status"]["replicas"][0]["errors"] == ["store: disk full"]

        # Every status write went to the status subresource and none caused a reconcile:
        # kopf ran the create/resume handler once per object, never an update.
        log = op.log_text()
        assert log.count("Handler 'apply_shard' succeeded.") == 3, log[-4000:]
        assert "Timer 'status_shard' succeeded." not in log
    finally:
        await kube.kubectl_async(
            "delete", "shards,journals", "--all", "-n", namespace, "--wait=true", check=False
        )
        ks_testing.wipe_prefix(gazette_etcd.endpoint, broker_root + "/")
        ks_testing.wipe_prefix(gazette_etcd.endpoint, consumers_root + "/")
