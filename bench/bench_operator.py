"""The operator reconciling 1,000 and 10,000 Journal objects from one ``kubectl apply``.

A real kube-apiserver (built by ``make apiserver``; built here if missing) over
its own etcd, Gazette's etcd, and ``python -m gazette.operator`` as a process.
For each size, in a namespace of its own with a fresh operator and etcd prefix:
one ``kubectl apply --server-side -f`` of N Journals. Clocks run from the start of
the apply, and the benchmark watches both ends: the Journals in the API server
(a watch, so the moment each one turns Ready=True is seen without listing 10,000
objects again and again) and the specs in etcd.

Figures, per size: the apply alone (the API server taking the objects: the ceiling
the operator can't beat, as a rate), the time until every spec is in etcd and until
every object is Ready, each as a ratio of its rate to the apply's (1.0: the operator
finished with the apply), how long after the apply the last object turned Ready, and
the operator's resident memory (idle, at the end, peak).

``BENCH_OPERATOR_OBJECTS`` picks the sizes (comma-separated; default ``1000,10000``);
``BENCH_OPERATOR_APPLY=client`` measures the classic client-side apply instead (a GET
and a POST per object). ``BENCH_OPERATOR_PROFILE=DIR`` has the operator write a cProfile
of its whole run to ``DIR/operator-bench-<N>.prof``, and keeps its log there.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import yaml

from e2e.apiserver import kubeapi
from gazette import keyspace
from gazette.keyspace import testing as etcd_testing

SIZES = tuple(
    int(n) for n in os.environ.get("BENCH_OPERATOR_OBJECTS", "1000,10000").split(",") if n
)
READY_AIM_S = 120.0  # Issue 12's aim for 10,000 Journals: all Ready within this of the apply.
LIMIT = 420.0  # Seconds one size may take, the apply included.
# `kubectl apply --server-side` takes one request per object; BENCH_OPERATOR_APPLY=client
# measures the classic client-side apply instead (a GET and a POST per object).
APPLY_FLAGS = () if os.environ.get("BENCH_OPERATOR_APPLY") == "client" else ("--server-side",)
PROFILE_DIR = os.environ.get("BENCH_OPERATOR_PROFILE", "")
GROUP_VERSION = "gazette.dev/v1alpha1"


def _manifest(n: int) -> str:
    items = [
        {
            "apiVersion": GROUP_VERSION,
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
    if "VmRSS" not in fields:
        raise RuntimeError(f"the operator (pid {pid}) has exited")
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def _ready(obj: dict[str, Any]) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


class _Clock:
    """When all N objects were first seen Ready, and all N specs in etcd."""

    def __init__(self, n: int, start: float) -> None:
        self.n = n
        self.start = start
        self.ready: set[str] = set()
        self.all_ready: float | None = None
        self.in_etcd = 0
        self.all_in_etcd: float | None = None

    def done(self) -> bool:
        return self.all_ready is not None and self.all_in_etcd is not None


async def _watch_ready(api: kubeapi.KubeAPIServer, namespace: str, clock: _Clock) -> None:
    """Follow the namespace's Journals with one watch, noting each one's turn to Ready."""
    ctx = ssl.create_default_context(cafile=str(api.work_dir / "pki" / "ca.crt"))
    url = f"{api.url}/apis/{GROUP_VERSION}/namespaces/{namespace}/journals"
    headers = {"Authorization": f"Bearer {api.token}"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ctx), headers=headers, timeout=timeout
    ) as session:
        async with session.get(url, params={"limit": "1"}) as resp:
            resp.raise_for_status()
            version = (await resp.json())["metadata"]["resourceVersion"]
        while clock.all_ready is None:
            params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "600"}
            async with session.get(url, params=params) as resp:
                resp.raise_for_status()
                async for line in resp.content:
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"watch of journals: {obj}")
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "DELETED" and _ready(obj):
                        clock.ready.add(obj["metadata"]["name"])
                        if len(clock.ready) == clock.n:
                            clock.all_ready = time.perf_counter() - clock.start
                            return


async def _count_etcd(client: Any, root: str, clock: _Clock) -> None:
    while True:
        clock.in_etcd = len(await client.get_prefix(f"{root}/items/".encode(), keys_only=True))
        if clock.in_etcd == clock.n:
            clock.all_in_etcd = time.perf_counter() - clock.start
            return
        await asyncio.sleep(0.2)


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
    api: kubeapi.KubeAPIServer, gazette_etcd: str, root: str, namespace: str, log: pathlib.Path
) -> subprocess.Popen[bytes]:
    port = etcd_testing.free_port()
    argv = [sys.executable]
    if PROFILE_DIR:
        profile = pathlib.Path(PROFILE_DIR).resolve() / f"operator-{namespace}.prof"
        profile.parent.mkdir(parents=True, exist_ok=True)
        argv += ["-m", "cProfile", "-o", str(profile)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *argv,
                "-m",
                "gazette.operator",
                f"--etcd.address={gazette_etcd}",
                f"--etcd.prefix={root}",
                "--cluster=bench",
                f"--namespace={namespace}",
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


async def _measure(
    api: kubeapi.KubeAPIServer,
    gazette_etcd: str,
    n: int,
    namespace: str,
    root: str,
    manifest: pathlib.Path,
    pid: int,
) -> dict[str, float]:
    client = await keyspace.connect(gazette_etcd)
    try:
        idle_rss, _ = _rss_kib(pid)
        clock = _Clock(n, time.perf_counter())
        async with asyncio.TaskGroup() as tg:
            watch = tg.create_task(_watch_ready(api, namespace, clock))
            count = tg.create_task(_count_etcd(client, root, clock))
            try:
                async with asyncio.timeout(LIMIT):
                    await api.kubectl_async(
                        "apply", *APPLY_FLAGS, "-n", namespace, "-f", str(manifest), limit=LIMIT
                    )
                    applied = time.perf_counter() - clock.start
                    await asyncio.wait({watch, count})
            except TimeoutError:
                watch.cancel()
                count.cancel()
                raise RuntimeError(
                    f"{n} Journals: after {LIMIT:.0f}s, {len(clock.ready)} Ready and "
                    f"{clock.in_etcd} in etcd"
                ) from None
        rss, peak = _rss_kib(pid)
        assert clock.all_ready is not None and clock.all_in_etcd is not None
        return {
            "apply_s": applied,
            "in_etcd_s": clock.all_in_etcd,
            "ready_s": clock.all_ready,
            "idle_rss_mib": idle_rss / 1024,
            "rss_mib": rss / 1024,
            "peak_rss_mib": peak / 1024,
        }
    finally:
        await client.close()


def _run(
    api: kubeapi.KubeAPIServer, gazette_etcd: str, n: int, work: pathlib.Path
) -> dict[str, Any]:
    namespace = f"bench-{n}"
    root = f"/bench/n{n}"
    api.kubectl("create", "namespace", namespace)
    manifest = work / f"journals-{n}.yaml"
    manifest.write_text(_manifest(n))
    log = pathlib.Path(PROFILE_DIR or work).resolve() / f"operator-{n}.log"
    proc = _start_operator(api, gazette_etcd, root, namespace, log)
    try:
        r = asyncio.run(_measure(api, gazette_etcd, n, namespace, root, manifest, proc.pid))
    except BaseException:
        sys.stderr.write(f"operator log tail:\n{log.read_text(errors='replace')[-3000:]}\n")
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    ceiling = n / r["apply_s"]
    out = {
        "objects": n,
        "apply": "kubectl apply " + " ".join(APPLY_FLAGS),
        "kubectl_apply_s": round(r["apply_s"], 2),
        "apply_ceiling_objects_per_s": round(ceiling, 1),
        "all_in_etcd_s": round(r["in_etcd_s"], 2),
        "all_ready_s": round(r["ready_s"], 2),
        "ready_after_apply_s": round(r["ready_s"] - r["apply_s"], 2),
        "in_etcd_ratio_to_apply": round(r["apply_s"] / r["in_etcd_s"], 3),
        "ready_ratio_to_apply": round(r["apply_s"] / r["ready_s"], 3),
        "operator_rss_idle_mib": round(r["idle_rss_mib"], 1),
        "operator_rss_mib": round(r["rss_mib"], 1),
        "operator_peak_rss_mib": round(r["peak_rss_mib"], 1),
    }
    if n >= 10_000:
        out["ready_within_aim"] = r["ready_s"] <= READY_AIM_S
    return out


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
            for n in SIZES:
                print(json.dumps(_run(api, gazette_etcd.endpoint, n, work), indent=2), flush=True)


if __name__ == "__main__":
    main()
