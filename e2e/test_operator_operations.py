"""Running the operator as an SRE would, on a real kube-apiserver and real etcds.

* Relabelling a Shard to another consumer moves its spec: one key remains.
* Replicas elect one leader with a Lease: only it writes (every etcd revision under
  the prefix is one that the leader logged writing, and no write of one replica falls
  between two of another's), and when it stops (gracefully, or killed) a standby
  takes over.
* ``/readyz`` fails while Gazette's etcd is down and passes again once it is back;
  ``/healthz`` stays up meanwhile (restarting would not help); ``/metrics`` says so.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from apiserver import kubeapi

from gazette.keyspace import testing as etcd_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CLUSTER = "e2e"
# Short Lease timings, so a killed leader is replaced within seconds.
FAST_LEASE = (
    "--leader-elect-lease-duration=4",
    "--leader-elect-renew-deadline=3",
    "--leader-elect-retry-period=0.5",
)
WROTE = re.compile(r"(?:wrote|deleted) (\S+) at revision (\d+)")


def journal(obj: str, name: str, cluster: str = CLUSTER) -> dict[str, Any]:
    return {
        "apiVersion": "gazette.dev/v1alpha1",
        "kind": "Journal",
        "metadata": {"name": obj, "labels": {"gazette.dev/cluster": cluster}},
        "spec": {
            "name": name,
            "replication": 1,
            "labels": [{"name": "content-type", "value": "application/x-ndjson"}],
            "fragment": {
                "length": 1 << 20,
                "compressionCodec": "GZIP",
                "stores": ["file:///"],
                "refreshInterval": "1m",
            },
        },
    }


def shard(obj: str, name: str, consumer: str, source: str) -> dict[str, Any]:
    return {
        "apiVersion": "gazette.dev/v1alpha1",
        "kind": "Shard",
        "metadata": {
            "name": obj,
            "labels": {"gazette.dev/cluster": CLUSTER, "gazette.dev/consumer": consumer},
        },
        "spec": {"name": name, "sources": [{"journal": source}], "maxTxnDuration": "1s"},
    }


async def apply(kube: kubeapi.KubeAPIServer, ns: str, *objects: dict[str, Any]) -> None:
    await kube.kubectl_async(
        "apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objects, sort_keys=False)
    )


get = kubeapi.get_json


def condition(obj: dict[str, Any], kind: str) -> tuple[str, str]:
    return kubeapi.condition(obj, kind)[:2]


wait_for = kubeapi.wait_conditions


async def keys(client: Any, prefix: str) -> list[str]:
    return sorted(bytes(kv.key).decode() for kv in await client.get_prefix(prefix.encode()))


async def test_relabelling_a_shard_leaves_one_key(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    etcd_client: Any,
    etcd_roots: tuple[str, str],
) -> None:
    start_operator(namespace)
    await apply(
        kube,
        namespace,
        journal("words", "moves/words"),
        shard("count", "count/part-000", "counter", "moves/words"),
    )
    await wait_for(kube, namespace, "shards", {"count": ("True", "Applied")}, "Applied")
    consumers = etcd_roots[1]
    old = f"{consumers}/counter/items/count/part-000"
    assert await keys(etcd_client, consumers + "/") == [old]

    await kube.kubectl_async(
        "label", "shard", "count", "-n", namespace, "gazette.dev/consumer=totals", "--overwrite"
    )
    new = f"{consumers}/totals/items/count/part-000"
    moved: dict[str, Any] = {}

    async def one_key() -> bool:
        moved.update(await get(kube, "shard", "count", "-n", namespace))
        return (
            await keys(etcd_client, consumers + "/") == [new]
            and moved.get("status", {}).get("etcdKey") == new
        )

    await kubeapi.eventually(one_key, within=30, what=f"only {new} in etcd")
    kv = await etcd_client.get(new.encode())
    assert moved["status"]["modRevision"] == kv.mod_revision
    assert moved["status"]["cluster"] == CLUSTER

    async def told() -> bool:
        items = (await get(kube, "events", "-n", namespace))["items"]
        return any(e["reason"] == "Moved" and e["involvedObject"]["name"] == "count" for e in items)

    await kubeapi.eventually(told, within=30, what="a Moved event")


async def lease_holder(kube: kubeapi.KubeAPIServer, ns: str, cluster: str = CLUSTER) -> str:
    out = await kube.kubectl_async(
        "get", "lease", f"gazette-operator-{cluster}", "-n", ns, "-o", "json", check=False
    )
    if out.returncode != 0:
        return ""
    return str(json.loads(out.stdout)["spec"].get("holderIdentity") or "")


def identity_of(op: Any) -> str:
    found = re.search(r"leader: (\S+) holds Lease", op.log_text())
    return found.group(1) if found else ""


def writes_of(op: Any) -> dict[int, str]:
    """The etcd writes the operator logged: revision -> key."""
    return {int(m.group(2)): m.group(1) for m in WROTE.finditer(op.log_text())}


async def etcd_history(client: Any, prefix: str, start: int) -> list[tuple[int, str]]:
    """(revision, key) of every put and delete under ``prefix`` since revision ``start``.

    Ends at a marker written now under the prefix, so the replay is complete."""
    marker = prefix + "~end"
    await client.put(marker.encode(), b"")
    out: list[tuple[int, str]] = []
    watch = await client.watch_prefix(prefix.encode(), start_revision=start)
    try:
        async with asyncio.timeout(30):
            async for event in watch:
                key = bytes(event.kv.key).decode()
                if key == marker:
                    break
                out.append((int(event.kv.mod_revision), key))
    finally:
        await watch.cancel()
    return out


async def test_replicas_elect_one_writer_and_fail_over(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    etcd_client: Any,
    etcd_roots: tuple[str, str],
) -> None:
    items = f"{etcd_roots[0]}/items"
    start = int((await etcd_client.put(f"{items}~start".encode(), b"")).header.revision) + 1
    first = start_operator(namespace, args=FAST_LEASE)
    second = start_operator(namespace, args=FAST_LEASE)

    async def elected() -> bool:
        holder = await lease_holder(kube, namespace)
        return bool(holder) and holder in (identity_of(first), identity_of(second))

    await kubeapi.eventually(elected, within=30, what="a leader")
    holder = await lease_holder(kube, namespace)
    leader, standby = (first, second) if identity_of(first) == holder else (second, first)
    assert identity_of(standby) == ""
    assert "standby: Lease" in standby.log_text()
    # Both are ready (a standby can take over); only the leader says it leads.
    for op, leads in ((leader, True), (standby, False)):
        code, body = op.get("/readyz")
        assert (code, json.loads(body)["leader"]) == (200, leads), body
        assert f"gazette_operator_leader {1.0 if leads else 0.0}" in op.get("/metrics")[1]

    await apply(kube, namespace, *(journal(f"j{i}", f"replicas/j{i}") for i in range(4)))
    await wait_for(
        kube, namespace, "journals", {f"j{i}": ("True", "Applied") for i in range(4)}, "Ready"
    )
    assert len(writes_of(leader)) == 4 and writes_of(standby) == {}

    # The leader stops (a rollout): it releases the Lease, the standby takes over at once.
    stopped = time.monotonic()
    leader.stop()
    await kubeapi.eventually(
        lambda: _holds(kube, namespace, standby), within=20, what="the standby leading"
    )
    took_over = time.monotonic() - stopped
    assert took_over < 4 + 3, f"took {took_over:.1f}s: the Lease was not released"
    await apply(kube, namespace, *(journal(f"k{i}", f"replicas/k{i}") for i in range(3)))
    await wait_for(
        kube, namespace, "journals", {f"k{i}": ("True", "Applied") for i in range(3)}, "Ready"
    )
    assert len(writes_of(standby)) == 3

    # A third replica stands by; the leader is killed: it takes over once the Lease expires.
    third = start_operator(namespace, args=FAST_LEASE)
    await kubeapi.eventually(
        lambda: _logged(third, "standby: Lease"), within=20, what="a third replica standing by"
    )
    standby.kill()
    await kubeapi.eventually(
        lambda: _holds(kube, namespace, third), within=30, what="the third replica leading"
    )
    await apply(kube, namespace, journal("l0", "replicas/l0"))
    await wait_for(kube, namespace, "journals", {"l0": ("True", "Applied")}, "Ready")

    # etcd's own history: every write under the prefix is one a leader logged, and the
    # replicas' writes do not interleave: each wrote only while it led.
    history = await etcd_history(etcd_client, items, start)
    logged = [writes_of(op) for op in (leader, standby, third)]
    assert len(history) == 8, history
    writers = []
    for revision, key in history:
        by = [i for i, w in enumerate(logged) if w.get(revision) == key]
        assert len(by) == 1, (revision, key, logged)
        writers.append(by[0])
    assert writers == sorted(writers) == [0] * 4 + [1] * 3 + [2]
    # And every object's status names the revision etcd holds.
    for obj in (await get(kube, "journals", "-n", namespace))["items"]:
        kv = await etcd_client.get(obj["status"]["etcdKey"].encode())
        assert obj["status"]["modRevision"] == kv.mod_revision


async def _holds(kube: kubeapi.KubeAPIServer, ns: str, op: Any) -> bool:
    return bool(identity_of(op)) and await lease_holder(kube, ns) == identity_of(op)


async def _logged(op: Any, text: str) -> bool:
    return text in op.log_text()


async def test_readiness_follows_etcd_through_an_outage(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    tmp_path: pathlib.Path,
) -> None:
    ports = (etcd_testing.free_port(), etcd_testing.free_port())
    etcd = etcd_testing.EtcdServer(
        work_dir=tmp_path / "etcd", client_port=ports[0], peer_port=ports[1]
    )
    etcd.start()
    try:
        op = start_operator(namespace, etcd_address=etcd.endpoint)

        async def readiness(code: int) -> bool:
            return op.get("/readyz")[0] == code

        await kubeapi.eventually(lambda: readiness(200), within=30, what="ready")
        await apply(kube, namespace, journal("before", "outage/before"))
        await wait_for(kube, namespace, "journals", {"before": ("True", "Applied")}, "Ready")

        etcd.stop()
        await kubeapi.eventually(lambda: readiness(503), within=30, what="unready")
        body = json.loads(op.get("/readyz")[1])
        assert not body["checks"]["etcd"]["ok"] and body["checks"]["kube"]["ok"], body
        assert op.get("/healthz")[0] == 200  # Not wedged: restarting would not help.
        assert 'gazette_operator_check_ok{check="etcd"} 0.0' in op.get("/metrics")[1]
        await apply(kube, namespace, journal("during", "outage/during"))
        await wait_for(kube, namespace, "journals", {"during": ("False", "EtcdError")}, "Ready")

        etcd = etcd_testing.EtcdServer(
            work_dir=tmp_path / "etcd", client_port=ports[0], peer_port=ports[1]
        )
        etcd.start()
        await kubeapi.eventually(lambda: readiness(200), within=30, what="ready again")
        await wait_for(kube, namespace, "journals", {"during": ("True", "Applied")}, "Ready")
        metrics = op.get("/metrics")[1]
        assert 'gazette_operator_check_ok{check="etcd"} 1.0' in metrics
        assert 'gazette_operator_reconciles_total{kind="Journal",reason="EtcdError"}' in metrics
        assert re.search(
            r'gazette_operator_objects\{condition="Ready",kind="Journal",'
            r'reason="Applied",status="True"\} 2\.0',
            metrics,
        ), metrics
        assert "gazette_operator_reconcile_lag_seconds_count" in metrics
    finally:
        etcd.stop()


async def test_the_example_deployments_rbac_is_enough_to_serve_and_lead(
    kube: kubeapi.KubeAPIServer,
    start_operator: Callable[..., Any],
    etcd_client: Any,
    etcd_roots: tuple[str, str],
    tmp_path: pathlib.Path,
) -> None:
    """``examples/k8s/operator/``: the API server takes it, and an operator holding only
    its service account's token serves, posts Events and holds the Lease."""
    manifest = kubeapi.REPO / "examples" / "k8s" / "operator" / "operator.yaml"
    await kube.kubectl_async("create", "namespace", "gazette", check=False)
    await kube.kubectl_async("apply", "--dry-run=server", "-f", str(manifest))
    docs = [d for d in yaml.safe_load_all(manifest.read_text(encoding="utf-8")) if d]
    rbac = [d for d in docs if d["kind"] != "Deployment"]
    await kube.kubectl_async("apply", "-f", "-", input=yaml.safe_dump_all(rbac, sort_keys=False))
    token = await kube.kubectl_async("create", "token", "gazette-operator", "-n", "gazette")
    config = yaml.safe_load(kube.kubeconfig.read_text(encoding="utf-8"))
    config["users"] = [{"name": "admin", "user": {"token": token.stdout.strip()}}]
    kubeconfig = tmp_path / "operator-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config), encoding="utf-8")

    op = start_operator(
        "gazette",
        cluster="default",  # The Lease its Role names: gazette-operator-default.
        env={"KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": "gazette"},
    )
    await apply(kube, "gazette", journal("rbac", "rbac/journal", "default"))
    await wait_for(kube, "gazette", "journals", {"rbac": ("True", "Applied")}, "Ready")
    assert await etcd_client.get(f"{etcd_roots[0]}/items/rbac/journal".encode()) is not None
    assert await lease_holder(kube, "gazette", "default") == identity_of(op)
    code, body = op.get("/readyz")
    assert code == 200, body
    # An API refusal (not a timestamp's milliseconds, such as ",403").
    assert not re.search(r"Forbidden|(?<![,.:\d])403(?!\d)", op.log_text())

    async def told() -> bool:
        items = (await get(kube, "events", "-n", "gazette"))["items"]
        return any(
            e["reason"] == "Applied" and e["involvedObject"]["name"] == "rbac" for e in items
        )

    await kubeapi.eventually(told, within=30, what="an Applied event")
