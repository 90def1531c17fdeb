"""Journal and Shard object bodies, as the API server returns them, for the tests."""

from __future__ import annotations

import copy
from typing import Any

from gazette.operator import crd

JOURNAL_SPEC: dict[str, Any] = {
    "name": "examples/logs/one",
    "replication": 3,
    "labels": [
        {"name": "topic", "value": "logs"},
        {"name": "content-type", "value": "application/x-ndjson"},
    ],
    "fragment": {
        "length": 536870912,
        "compressionCodec": "SNAPPY",
        "stores": ["s3://a-bucket/prefix/", "file:///mnt/fragments/"],
        "refreshInterval": "30s",
        "retention": "720h",
        "flushInterval": "1h",
        "pathPostfixTemplate": 'date={{.Spool.FirstAppendTime.Format "2006-01-02"}}',
    },
    "flags": "O_RDWR",
    "maxAppendRate": 1048576,
    "deletionPolicy": "Retain",
}

SHARD_SPEC: dict[str, Any] = {
    "name": "word-count/part-000",
    "sources": [
        {"journal": "examples/words/part-001", "minOffset": 1024},
        {"journal": "examples/words/part-000"},
    ],
    "recoveryLogPrefix": "recovery/word-count",
    "hintPrefix": "/gazette/hints/word-count",
    "hintBackups": 2,
    "maxTxnDuration": "1s",
    "minTxnDuration": "10ms",
    "hotStandbys": 1,
    "labels": [{"name": "app", "value": "word-count"}],
    "ringBufferSize": 4096,
}


def body(
    spec: dict[str, Any],
    *,
    name: str = "obj",
    namespace: str = "ns",
    uid: str = "uid-1",
    created: str = "2030-01-01T00:00:00Z",
    generation: int = 1,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": f"{crd.GROUP}/{crd.VERSION}",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": created,
            "generation": generation,
            "labels": {crd.CLUSTER_LABEL: "default", **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": copy.deepcopy(spec),
    }
    if status is not None:
        out["status"] = status
    return out


def journal(**kwargs: Any) -> dict[str, Any]:
    return body(JOURNAL_SPEC, **kwargs)


def shard(**kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("labels", {crd.CONSUMER_LABEL: "word-count"})
    return body(SHARD_SPEC, **kwargs)
