"""The operator against a real kube-apiserver, driven with kubectl as a user would.

Each test has its own namespace(s), etcd prefixes and operator process
(``python -m gazette.operator``). Specs in etcd are compared byte for byte with
what ``pb`` / ``pc`` encode for the JournalSpec / ShardSpec built here by hand.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from apiserver import kubeapi
from google.protobuf import duration_pb2

from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc

# Bounded (about 20 s with the API server's start) and on loopback only, so marked
# `integration`, which CI runs (`-m "not e2e"` would leave an `e2e` test out).
pytestmark = [pytest.mark.integration]

CLUSTER = {"gazette.dev/cluster": "e2e"}


def journal(
    obj: str,
    name: str,
    *,
    topic: str,
    replication: int = 2,
    policy: str = "Retain",
    labels: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "gazette.dev/v1alpha1",
        "kind": "Journal",
        "metadata": {"name": obj, "labels": {**CLUSTER, "topic": topic}},
        "spec": {
            "name": name,
            "replication": replication,
            "labels": labels
            if labels is not None
            else [
                {"name": "topic", "value": topic},
                {"name": "content-type", "value": "application/x-ndjson"},
            ],
            "fragment": {
                "length": 1 << 20,
                "compressionCodec": "GZIP",
                "stores": ["file:///var/fragments/"],
                "refreshInterval": "1m",
                "flushInterval": "1h",
            },
            "deletionPolicy": policy,
        },
    }


def journal_pb(name: str, *, topic: str, replication: int = 2) -> pb.JournalSpec:
    return pb.JournalSpec(
        name=name,
        replication=replication,
        labels=pb.LabelSet(
            labels=[
                pb.Label(name="content-type", value="application/x-ndjson"),
                pb.Label(name="topic", value=topic),
            ]
        ),
        fragment=pb.JournalSpec.Fragment(
            length=1 << 20,
            compression_codec=pb.GZIP,
            stores=["file:///var/fragments/"],
            refresh_interval=duration_pb2.Duration(seconds=60),
            # Go always encodes its non-nullable sub-messages, empty or not (gogoproto
            # nullable=false); so does the operator, so that etcd holds the bytes gazctl would write.
            retention=duration_pb2.Duration(),
            flush_interval=duration_pb2.Duration(seconds=3600),
        ),
    )


def shard(obj: str, shard_id: str, source: str) -> dict[str, Any]:
    return {
        "apiVersion": "gazette.dev/v1alpha1",
        "kind": "Shard",
        "metadata": {"name": obj, "labels": {**CLUSTER, "gazette.dev/consumer": "counter"}},
        "spec": {
            "name": shard_id,
            "sources": [{"journal": source}],
            "recoveryLogPrefix": "recovery/counter",
            "hintPrefix": "/gazette/hints/counter",
            "maxTxnDuration": "1s",
            "hotStandbys": 1,
        },
    }


def shard_pb(shard_id: str, source: str) -> pc.ShardSpec:
    return pc.ShardSpec(
        id=shard_id,
        sources=[pc.ShardSpec.Source(journal=source)],
        recovery_log_prefix="recovery/counter",
        hint_prefix="/gazette/hints/counter",
        max_txn_duration=duration_pb2.Duration(seconds=1),
        min_txn_duration=duration_pb2.Duration(),
        hot_standbys=1,
        labels=pb.LabelSet(),
    )


def manifest(*objects: dict[str, Any]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


async def etcd_value(client: Any, key: str) -> bytes | None:
    kv = await client.get(key.encode())
    return None if kv is None else bytes(kv.value)


async def objects(kube: kubeapi.KubeAPIServer, ns: str, plural: str) -> list[dict[str, Any]]:
    out = await kube.kubectl_async("get", plural, "-n", ns, "-o", "json")
    return list(json.loads(out.stdout)["items"])


def ready_of(obj: dict[str, Any], kind: str = "Ready") -> tuple[str, str]:
    return kubeapi.condition(obj, kind)[:2]


wait_ready = kubeapi.wait_conditions


async def test_apply_get_edit_delete_as_a_user_would(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    etcd_client: Any,
    etcd_roots: tuple[str, str],
) -> None:
    broker_root, consumers_root = etcd_roots
    start_operator(namespace)
    docs = [
        journal("logs-a", "logs/app/a", topic="logs"),
        journal("logs-b", "logs/app/b", topic="logs", policy="Delete"),
        journal("metrics-a", "metrics/app/a", topic="metrics"),
        shard("counter-0", "counter/shard-000", "logs/app/a"),
        shard("counter-1", "counter/shard-001", "logs/app/b"),
    ]
    out = await kube.kubectl_async("apply", "-n", namespace, "-f", "-", input=manifest(*docs))
    assert out.stdout.count("created") == 5, out.stdout

    applied = ("True", "Applied")
    await wait_ready(
        kube, namespace, "journals", {"logs-a": applied, "logs-b": applied, "metrics-a": applied}
    )
    # A Shard's Ready says a primary serves it (no consumer runs here); Applied, that
    # its spec is in etcd.
    shards = await wait_ready(
        kube, namespace, "shards", {"counter-0": applied, "counter-1": applied}, kind="Applied"
    )
    unserved = ("False", "NoPrimary")
    await wait_ready(kube, namespace, "shards", {"counter-0": unserved, "counter-1": unserved})

    # `kubectl get journals -l topic=logs` lists exactly those, Ready.
    table = await kube.kubectl_async("get", "journals", "-n", namespace, "-l", "topic=logs")
    lines = table.stdout.strip().splitlines()
    assert lines[0].split() == [
        "NAME", "JOURNAL", "CLUSTER", "REPLICATION", "CODEC", "READY", "AGE"
    ]  # fmt: skip
    rows = sorted(line.split()[:6] for line in lines[1:])
    assert rows == [
        ["logs-a", "logs/app/a", "e2e", "2", "GZIP", "True"],
        ["logs-b", "logs/app/b", "e2e", "2", "GZIP", "True"],
    ]
    # Short name, category, wide columns.
    wide = await kube.kubectl_async("get", "gj", "-n", namespace, "-o", "wide")
    assert "file:///var/fragments/" in wide.stdout
    assert "Applied" in wide.stdout
    shard_table = await kube.kubectl_async("get", "gs", "-n", namespace, "--no-headers")
    # Name, Shard, Cluster, Consumer, Primary and Status (empty: no consumer runs),
    # Standbys, Ready.
    assert sorted(line.split()[:6] for line in shard_table.stdout.strip().splitlines()) == [
        ["counter-0", "counter/shard-000", "e2e", "counter", "0", "False"],
        ["counter-1", "counter/shard-001", "e2e", "counter", "0", "False"],
    ]
    everything = await kube.kubectl_async("get", "gazette", "-n", namespace, "-o", "name")
    assert len(everything.stdout.split()) == 5

    # The specs are in etcd, byte for byte what pb / pc encode.
    for name, topic in (
        ("logs/app/a", "logs"),
        ("logs/app/b", "logs"),
        ("metrics/app/a", "metrics"),
    ):
        value = await etcd_value(etcd_client, f"{broker_root}/items/{name}")
        assert value == journal_pb(name, topic=topic).SerializeToString(), name
    for sid, source in (("counter/shard-000", "logs/app/a"), ("counter/shard-001", "logs/app/b")):
        value = await etcd_value(etcd_client, f"{consumers_root}/counter/items/{sid}")
        assert value == shard_pb(sid, source).SerializeToString(), sid
    status = shards["counter-0"]["status"]
    assert status["observedGeneration"] == 1
    kv = await etcd_client.get(f"{consumers_root}/counter/items/counter/shard-000".encode())
    assert status["modRevision"] == kv.mod_revision

    # An edit reaches etcd.
    await kube.kubectl_async(
        "patch", "journal", "logs-a", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"replication": 3}}),
    )  # fmt: skip
    want = journal_pb("logs/app/a", topic="logs", replication=3).SerializeToString()

    async def edited() -> bool:
        return await etcd_value(etcd_client, f"{broker_root}/items/logs/app/a") == want

    await kubeapi.eventually(edited, within=30, what="the edit in etcd")

    async def observed() -> bool:
        got = {o["metadata"]["name"]: o for o in await objects(kube, namespace, "journals")}
        status = got["logs-a"].get("status", {})
        return status.get("observedGeneration") == 2 and ready_of(got["logs-a"]) == applied

    await kubeapi.eventually(observed, within=30, what="generation 2 observed")

    # Deletion honours the policy: Delete removes the spec (then the object), Retain keeps it.
    await kube.kubectl_async("delete", "journal", "logs-b", "logs-a", "-n", namespace)
    assert await etcd_value(etcd_client, f"{broker_root}/items/logs/app/b") is None
    assert await etcd_value(etcd_client, f"{broker_root}/items/logs/app/a") == want
    left = await kube.kubectl_async("get", "journals", "-n", namespace, "-o", "name")
    assert left.stdout.split() == ["journal.gazette.dev/metrics-a"]


async def test_invalid_objects_are_refused_or_reported_and_nothing_is_written(
    kube: kubeapi.KubeAPIServer,
    namespace: str,
    start_operator: Callable[..., Any],
    etcd_client: Any,
    etcd_roots: tuple[str, str],
) -> None:
    start_operator(namespace)
    # Refused by the schema: replication above Gazette's 5, a file store with a host,
    # an unclean name, a shard whose minimum transaction outlasts its maximum.
    bad_replication = journal("bad-replication", "bad/replication", topic="x", replication=6)
    bad_store = journal("bad-store", "bad/store", topic="x")
    bad_store["spec"]["fragment"]["stores"] = ["file://host/fragments/"]
    bad_name = journal("bad-name", "bad//name", topic="x")
    bad_shard = shard("bad-shard", "bad/shard", "bad/source")
    bad_shard["spec"]["minTxnDuration"] = "2s"
    for doc, needle in (
        (bad_replication, "spec.replication"),
        (bad_store, "file scheme cannot have host"),
        (bad_name, "must be a clean path"),
        (bad_shard, "minTxnDuration must not exceed maxTxnDuration"),
    ):
        out = await kube.kubectl_async(
            "apply", "-n", namespace, "-f", "-", input=manifest(doc), check=False
        )
        assert out.returncode != 0, doc["metadata"]["name"]
        assert needle in out.stderr, out.stderr

    # Accepted by the schema, refused by Gazette's validation: two content types.
    two_types = journal(
        "two-types",
        "bad/two-types",
        topic="x",
        labels=[
            {"name": "content-type", "value": "application/x-ndjson"},
            {"name": "content-type", "value": "text/csv"},
        ],
    )
    await kube.kubectl_async("apply", "-n", namespace, "-f", "-", input=manifest(two_types))
    got = await wait_ready(kube, namespace, "journals", {"two-types": ("False", "InvalidSpec")})
    cond = got["two-types"]["status"]["conditions"][0]
    assert "content-type" in cond["message"]

    # The name is immutable.
    out = await kube.kubectl_async(
        "patch", "journal", "two-types", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"name": "other/name"}}), check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "name is immutable" in out.stderr

    # Nothing was written anywhere under the test's prefixes.
    for root in etcd_roots:
        assert len(await etcd_client.get_prefix(root.encode())) == 0


async def test_conflicts_pause_unmanage_and_out_of_band_edits(
    kube: kubeapi.KubeAPIServer,
    start_operator: Callable[..., Any],
    etcd_client: Any,
    etcd_roots: tuple[str, str],
) -> None:
    # Creation times have one-second precision: ties go to the namespace first in order,
    # so the owner's namespace sorts first whatever the timing.
    run = secrets.token_hex(4)
    first_ns, second_ns = f"e2e-{run}-a", f"e2e-{run}-b"
    for ns in (first_ns, second_ns):
        await kube.kubectl_async("create", "namespace", ns)
    start_operator(first_ns, second_ns)
    key = f"{etcd_roots[0]}/items/shared/journal"
    owner = journal("owner", "shared/journal", topic="t")
    await kube.kubectl_async("apply", "-n", first_ns, "-f", "-", input=manifest(owner))
    await wait_ready(kube, first_ns, "journals", {"owner": ("True", "Applied")})

    # A younger object naming the same journal, in another namespace, loses.
    rival = journal("rival", "shared/journal", topic="t", replication=1)
    await kube.kubectl_async("apply", "-n", second_ns, "-f", "-", input=manifest(rival))
    got = await wait_ready(kube, second_ns, "journals", {"rival": ("False", "ResourceConflict")})
    assert f"{first_ns}/owner" in got["rival"]["status"]["conditions"][0]["message"]
    owned = journal_pb("shared/journal", topic="t").SerializeToString()
    assert await etcd_value(etcd_client, key) == owned

    # An edit made in etcd behind the operator's back is undone: the operator watches the
    # prefix (one watch, no per-object timer).
    await etcd_client.put(
        key.encode(), journal_pb("shared/journal", topic="t", replication=5).SerializeToString()
    )

    async def restored() -> bool:
        return await etcd_value(etcd_client, key) == owned

    await kubeapi.eventually(restored, within=30, what="the out-of-band edit undone")

    async def told() -> bool:
        out = await kube.kubectl_async("get", "events", "-n", first_ns, "-o", "json")
        return any(
            (e["involvedObject"]["name"], e["type"], e["reason"]) == ("owner", "Normal", "Restored")
            for e in json.loads(out.stdout)["items"]
        )

    await kubeapi.eventually(told, within=30, what="a Restored event on the owner")

    # Paused: edits stay out of etcd, and the status says so.
    await kube.kubectl_async(
        "annotate", "journal", "owner", "-n", first_ns, "gazette.dev/paused=true"
    )
    await kube.kubectl_async(
        "patch", "journal", "owner", "-n", first_ns, "--type=merge",
        "-p", json.dumps({"spec": {"replication": 4}}),
    )  # fmt: skip
    await wait_ready(kube, first_ns, "journals", {"owner": ("False", "Paused")})
    assert await etcd_value(etcd_client, key) == owned
    await kube.kubectl_async("annotate", "journal", "owner", "-n", first_ns, "gazette.dev/paused-")
    await wait_ready(kube, first_ns, "journals", {"owner": ("True", "Applied")})
    four = journal_pb("shared/journal", topic="t", replication=4).SerializeToString()
    assert await etcd_value(etcd_client, key) == four

    # The owner goes (Retain): the rival takes the name over.
    await kube.kubectl_async("delete", "journal", "owner", "-n", first_ns)
    await wait_ready(kube, second_ns, "journals", {"rival": ("True", "Applied")})
    one = journal_pb("shared/journal", topic="t", replication=1).SerializeToString()
    assert await etcd_value(etcd_client, key) == one

    # Unmanaged: the operator lets go, even of a Delete policy.
    await kube.kubectl_async(
        "patch", "journal", "rival", "-n", second_ns, "--type=merge",
        "-p", json.dumps({"spec": {"deletionPolicy": "Delete"}}),
    )  # fmt: skip

    async def has_finalizer() -> bool:
        (obj,) = await objects(kube, second_ns, "journals")
        return "gazette.dev/delete-spec" in obj["metadata"].get("finalizers", ())

    await kubeapi.eventually(has_finalizer, within=30, what="the Delete policy's finalizer")
    await kube.kubectl_async(
        "annotate", "journal", "rival", "-n", second_ns, "gazette.dev/unmanaged=true"
    )

    async def released() -> bool:
        return not await has_finalizer()

    await kubeapi.eventually(released, within=30, what="the finalizer dropped")
    await kube.kubectl_async("delete", "journal", "rival", "-n", second_ns)
    assert await etcd_value(etcd_client, key) == one
