"""The operator reconciling 1,000 Journal objects from one ``kubectl apply``.

A real kube-apiserver (built by ``make apiserver``; built here if missing) over
its own etcd, Gazette's etcd, and ``python -m gazette.operator`` as a process.
One ``kubectl apply --server-side -f`` of 1,000 Journals; the clock runs from the start of
the apply until every object reports Ready=True and every spec is in etcd.

Figures: the apply alone (the API server taking the objects: the ceiling the
operator can't beat), objects/s until all are Ready and in etcd and its ratio
to that ceiling, and the operator's resident memory (now and peak).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

import yaml

from e2e.apiserver import kubeapi
from gazette import keyspace
from gazette.keyspace import testing as etcd_testing

N = int(os.environ.get("BENCH_OPERATOR_OBJECTS", "1000"))
NAMESPACE = "bench"
ROOT = "/bench/cluster"
LIMIT = 300.0
# `kubectl apply --server-side` takes one request per object; BENCH_OPERATOR_APPLY=client
# measures the classic client-side apply instead (a GET and a POST per object).
APPLY_FLAGS = () if os.environ.get("BENCH_OPERATOR_APPLY") == "client" else ("--server-side",)


def _manifest(n: int) -> str:
    items = [
        {
            "apiVersion": "gazette.dev/v1alpha1",
            "kind": "Journal",
            "metadata": {
                "name": f"journal-{i:05d}",
                "labels": {"gazette.dev/cluster": "bench", "topic": f"t{i % 10}"},
            },
            "spec": {
                "name": f"bench/topic-{i % 10}/part-{i:05d}",
                "replication": 3,
                "labels": [
                    {"name": "content-type", "value": "application/x-ndjson"},
                    {"name": "topic", "value": f"t{i % 10}"},
                ],
                "fragment": {
                    "length": 1 << 28,
                    "compressionCodec": "SNAPPY",
                    "stores": ["s3://bench-bucket/fragments/"],
                    "refreshInterval": "1m",
                    "retention": "720h",
                    "flushInterval": "1h",
                },
            },
        }
        for i in range(n)
    ]
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, sort_keys=False)


def _rss_kib(pid: int) -> tuple[int, int]:
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


async def _ready_count(api: kubeapi.KubeAPIServer) -> int:
    out = await api.kubectl_async(
        "get",
        "journals",
        "-n",
        NAMESPACE,
        "-o",
        'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}',
    )
    return out.stdout.split().count("True")


async def _etcd_count(client: Any) -> int:
    return len(await client.get_prefix(f"{ROOT}/items/".encode(), keys_only=True))


def _wait_live(url: str, proc: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"operator exited:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError("operator not live after 60s")


def _start_operator(
    api: kubeapi.KubeAPIServer, gazette_etcd: str, work: pathlib.Path
) -> subprocess.Popen[bytes]:
    port = etcd_testing.free_port()
    log = work / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gazette.operator",
                f"--etcd.address={gazette_etcd}",
                f"--etcd.prefix={ROOT}",
                "--cluster=bench",
                f"--namespace={NAMESPACE}",
                f"--liveness=http://127.0.0.1:{port}/healthz",
                "--log.level=WARNING",
            ],
            env=api.env(),
            stdout=out,
            stderr=out,
        )
    try:
        _wait_live(f"http://127.0.0.1:{port}/healthz", proc, log)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


async def _run(
    api: kubeapi.KubeAPIServer, gazette_etcd: str, manifest: pathlib.Path, pid: int
) -> dict[str, float]:
    client = await keyspace.connect(gazette_etcd)
    try:
        idle_rss, _ = _rss_kib(pid)
        start = time.perf_counter()
        await api.kubectl_async(
            "apply", *APPLY_FLAGS, "-n", NAMESPACE, "-f", str(manifest), limit=LIMIT
        )
        applied = time.perf_counter() - start
        ready = in_etcd = 0
        while time.perf_counter() - start < LIMIT:
            in_etcd = await _etcd_count(client)
            if in_etcd == N:
                ready = await _ready_count(api)
                if ready == N:
                    break
            await asyncio.sleep(0.25)
        elapsed = time.perf_counter() - start
        rss, peak = _rss_kib(pid)
        if ready != N or in_etcd != N:
            raise RuntimeError(f"after {elapsed:.0f}s: {ready} Ready, {in_etcd} in etcd of {N}")
        return {
            "apply_s": applied,
            "elapsed_s": elapsed,
            "idle_rss_mib": idle_rss / 1024,
            "rss_mib": rss / 1024,
            "peak_rss_mib": peak / 1024,
        }
    finally:
        await client.close()


def main() -> None:
    bins = kubeapi.binaries(build=True)
    with tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp:
        work = pathlib.Path(tmp)
        with (
            kubeapi.kube_etcd(work / "kube-etcd") as kube_etcd,
            etcd_testing.EtcdServer(work_dir=work / "gazette-etcd") as gazette_etcd,
            kubeapi.KubeAPIServer(bins, kube_etcd.endpoint, work / "api") as api,
        ):
            api.kubectl("apply", "--server-side", "-f", str(kubeapi.REPO / "crds"))
            api.kubectl(
                "wait",
                "--for=condition=established",
                "crd/journals.gazette.dev",
                "crd/shards.gazette.dev",
            )
            api.kubectl("create", "namespace", NAMESPACE)
            manifest = work / "journals.yaml"
            manifest.write_text(_manifest(N))
            proc = _start_operator(api, gazette_etcd.endpoint, work)
            try:
                r = asyncio.run(_run(api, gazette_etcd.endpoint, manifest, proc.pid))
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    ceiling = N / r["apply_s"]
    rate = N / r["elapsed_s"]
    print(
        json.dumps(
            {
                "objects": N,
                "apply": "kubectl apply " + " ".join(APPLY_FLAGS),
                "kubectl_apply_s": round(r["apply_s"], 2),
                "apply_ceiling_objects_per_s": round(ceiling, 1),
                "all_ready_and_in_etcd_s": round(r["elapsed_s"], 2),
                "objects_per_s": round(rate, 1),
                "ratio_to_apply_ceiling": round(rate / ceiling, 3),
                "operator_rss_idle_mib": round(r["idle_rss_mib"], 1),
                "operator_rss_mib": round(r["rss_mib"], 1),
                "operator_peak_rss_mib": round(r["peak_rss_mib"], 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
