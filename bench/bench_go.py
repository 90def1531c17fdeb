"""Side by side with Go Gazette v0.103: our brokers and clients against Go's, in one run.

One etcd; three of our brokers (etcd prefix ``/gazette/ours``) and three Go
``gazette serve`` brokers (``/gazette/go``), each set in three zones, both
alive for the whole run and driven alternately by the same load generators:

- Go's ``gazctl`` for bulk appends (RF3 and RF1 codec NONE, RF3 GZIP; a file of
  base64 text) and for reading a whole journal back;
- our ``gazctl`` against Go's, both against our brokers (bulk append and read);
- one ``gazctl journals append`` of 1 KiB, process start included, median of
  several runs: ours on our brokers, Go's on Go's (and Go's on ours);
- sequential 1 KiB appends at RF3, each acknowledged before the next, with Go's
  client library (``gazette-loadgen seq``, built from the same scratch module as
  Go's binaries) and with ours (``python -m bench.bench_go loadgen seq``), its
  appends through the native data plane and through grpc.aio (``--grpc-aio``);
- append-ack latency p50/p99/p99.9 of 1 KiB records handed to an append
  service at fixed rates (1, 5, 20 MB/s by default), RF3, each side's generator
  on its own brokers;
- the sequential appends with Go's client on our brokers again, once as they
  are and once while a Python thread in each of them holds the GIL (see
  ``bench/gil/sitecustomize.py``): the data plane never waits for Python, so
  its latencies should not move.

Every generator is its own process, pointed at the journal's primary. Each row
prints both figures and ours/Go as a speed ratio (> 1.0 is ours ahead; for
latencies, Go's over ours). Sizes come from the environment:

- ``BENCH_GO_MIB`` (128): bytes of each bulk append, in MiB;
- ``BENCH_GO_FRAGMENT_MIB`` (64): the journals' fragment length;
- ``BENCH_GO_SEQ`` (1000): sequential appends per run;
- ``BENCH_GO_ONESHOT`` (7): one-shot gazctl runs per side;
- ``BENCH_GO_RATES`` ("1,5,20"): MB/s of the fixed-rate runs;
- ``BENCH_GO_RATE_SECONDS`` (4): measured seconds of each (after 1 s unmeasured);
- ``BENCH_GO_REPEAT`` (2): rounds of each bulk row, alternating sides (best counts);
- ``BENCH_GO_ROWS`` ("bulk,gazctl,oneshot,seq,rate,gil"): the sections to run.

Run with ``make bench-go`` (builds Go's binaries first, a few minutes once;
needs ``go`` and a C compiler) or ``python -m bench go``.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

MIB = 1 << 20
RECORD = 1024
#: The folder whose ``sitecustomize`` holds our brokers' GIL on demand (the "gil" rows).
GIL_HOLDER = pathlib.Path(__file__).resolve().parent / "gil"
#: Rounds of each bulk row (``BENCH_GO_REPEAT``); each side's best counts.
REPEAT = int(os.environ.get("BENCH_GO_REPEAT", "2"))
#: Bounds every generator process.
RUN_TIMEOUT = 300.0

JOURNALS_YAML = """\
name: bench/
replication: 3
labels:
- name: content-type
  value: application/octet-stream
fragment:
  length: {length}
  compression_codec: NONE
  stores:
  - file:///
  refresh_interval: 1m0s
children:  # In name order, as journalspace wants.
- name: bench/gazctl
- name: bench/oneshot
- name: bench/r1-none
  replication: 1
- name: bench/r3-gzip
  fragment:
    compression_codec: GZIP
- name: bench/r3-none
- name: bench/rate
- name: bench/seq-go-client
- name: bench/seq-our-client
"""


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _go_gazette() -> types.ModuleType:
    """``broker/tests/interop/go_gazette.py``: the Go binaries' builder and Go broker runner."""
    path = pathlib.Path(__file__).parent.parent / "broker/tests/interop/go_gazette.py"
    spec = importlib.util.spec_from_file_location("go_gazette", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["go_gazette"] = module
    spec.loader.exec_module(module)
    return module


# --- Timing helpers ---------------------------------------------------------------


def _run(argv: Sequence[str], broker: str, *, input_path: pathlib.Path | None = None) -> float:
    """Run a generator process against ``broker``; its wall time in seconds."""
    env = {**os.environ, "BROKER_ADDRESS": broker}
    stdin = open(input_path, "rb") if input_path else subprocess.DEVNULL  # noqa: SIM115
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(
            list(argv),
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            timeout=RUN_TIMEOUT,
            check=False,
        )
        elapsed = time.perf_counter() - t0
    finally:
        if input_path:
            stdin.close()  # type: ignore[union-attr]
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {proc.stderr[-2000:]!r}")
    return elapsed


def _json_run(argv: Sequence[str]) -> dict[str, Any]:
    proc = subprocess.run(
        list(argv), capture_output=True, timeout=RUN_TIMEOUT, check=False, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _pct(values_us: Sequence[float], p: float) -> float:
    """The ``p``-th percentile of microsecond values, in milliseconds."""
    ordered = sorted(values_us)
    if not ordered:
        return 0.0
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k] / 1e3


def _ratio(ours: float, go: float) -> str:
    return f"{ours / go:5.2f}x" if go > 0 else "  n/a"


# --- The two clusters --------------------------------------------------------------


class _Side:
    """One cluster: its name, the endpoint of each broker, and the zone of each."""

    def __init__(self, name: str, endpoints: list[str]) -> None:
        self.name = name
        self.endpoints = endpoints
        self.primaries: dict[str, str] = {}

    def primary(self, journal: str) -> str:
        return self.primaries[journal]


async def _primaries(endpoint: str, journals: Sequence[str]) -> dict[str, str]:
    """Each journal's primary endpoint, once every journal has one (our client library)."""
    from gazette.broker import client

    async with client.JournalClient(client.ClientConfig(address=endpoint)) as jc:
        deadline = time.monotonic() + 60
        while True:
            resp = await client.list_journals(jc, "prefix=bench/")
            out = {}
            for j in resp.journals:
                route = j.route
                if route.primary >= 0 and len(route.endpoints) == len(route.members):
                    out[j.spec.name] = route.endpoints[route.primary]
            if all(j in out for j in journals):
                return out
            if time.monotonic() > deadline:
                raise TimeoutError(f"journals without a primary: {set(journals) - set(out)}")
            await asyncio.sleep(0.2)


# --- The rows ----------------------------------------------------------------------


def _alternate(sides: Sequence[_Side], run: Callable[[_Side], float]) -> dict[str, float]:
    """``run(side)`` for each side in turn, :data:`REPEAT` rounds; best seconds by side name.

    The best of a few alternating rounds: other work on the machine slows a
    single run of either side more than it slows a best one.
    """
    best: dict[str, float] = {}
    for _ in range(REPEAT):
        for side in sides:
            secs = run(side)
            best[side.name] = min(best.get(side.name, secs), secs)
    return best


def _bulk_rows(
    bins: pathlib.Path, sides: Sequence[_Side], data: pathlib.Path, size: int
) -> list[str]:
    gazctl = str(bins / "gazctl")
    rows = []
    for label, journal in (
        ("bulk append, RF3, codec NONE", "bench/r3-none"),
        ("bulk append, RF1, codec NONE", "bench/r1-none"),
        ("bulk append, RF3, codec GZIP", "bench/r3-gzip"),
    ):
        secs = _alternate(
            sides,
            lambda s, j=journal: _run(  # type: ignore[misc]
                [gazctl, "journals", "append", "-l", f"name={j}"],
                s.primary(j),
                input_path=data,
            ),
        )
        rows.append(_speed_row(label, size, secs))
    secs = _alternate(
        sides,
        lambda s: _run(
            [gazctl, "journals", "read", "-l", "name=bench/r3-none"], s.primary("bench/r3-none")
        ),
    )
    rows.append(_speed_row("bulk read (whole RF3 journal)", REPEAT * size, secs))
    return rows


def _speed_row(label: str, size: int, secs: dict[str, float]) -> str:
    ours, go = size / secs["ours"] / 1e6, size / secs["go"] / 1e6
    return f"  {label:<44} {ours:8.1f} MB/s vs {go:8.1f} MB/s   {_ratio(ours, go)}"


def _gazctl_rows(bins: pathlib.Path, ours: _Side, data: pathlib.Path, size: int) -> list[str]:
    """Our gazctl against Go's, both against our brokers."""
    journal = "bench/gazctl"
    broker = ours.primary(journal)
    our_gazctl = [sys.executable, "-m", "gazette.gazctl"]
    go_gazctl = [str(bins / "gazctl")]
    append = ["journals", "append", "-l", f"name={journal}"]
    read = ["journals", "read", "-l", f"name={journal}"]
    tools = {"ours": our_gazctl, "go": go_gazctl}
    clients = (_Side("ours", []), _Side("go", []))
    appends = _alternate(
        clients, lambda c: _run([*tools[c.name], *append], broker, input_path=data)
    )
    # Every round of both appended `size` bytes (after the first, warming append).
    length = 2 * REPEAT * size
    reads = _alternate(clients, lambda c: _run([*tools[c.name], *read], broker))
    return [
        _speed_row("our gazctl vs Go gazctl (our brokers): append", size, appends),
        _speed_row("our gazctl vs Go gazctl (our brokers): read", length, reads),
    ]


def _oneshot_rows(bins: pathlib.Path, sides: dict[str, _Side], runs: int) -> list[str]:
    journal = "bench/oneshot"
    one = pathlib.Path(tempfile.mkstemp(prefix="bench-go-1k-")[1])
    one.write_bytes(b"x" * (RECORD - 1) + b"\n")
    append = ["journals", "append", "-l", f"name={journal}"]
    our_gazctl = [sys.executable, "-m", "gazette.gazctl", *append]
    go_gazctl = [str(bins / "gazctl"), *append]
    times: dict[str, list[float]] = {"ours": [], "go": [], "go-on-ours": []}
    try:
        for _ in range(runs):
            times["ours"].append(_run(our_gazctl, sides["ours"].primary(journal), input_path=one))
            times["go"].append(_run(go_gazctl, sides["go"].primary(journal), input_path=one))
            times["go-on-ours"].append(
                _run(go_gazctl, sides["ours"].primary(journal), input_path=one)
            )
    finally:
        one.unlink()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return [
        f"  {'one gazctl journals append of 1 KiB':<44} {med['ours']:8.1f} ms   vs {med['go']:8.1f} ms"
        f"     {_ratio(med['go'], med['ours'])}   (Go gazctl on our brokers {med['go-on-ours']:.1f} ms;"
        f" median of {runs})"
    ]  # fmt: skip


def _seq_rows(bins: pathlib.Path, sides: dict[str, _Side], count: int) -> list[str]:
    go_gen = [str(bins / "gazette-loadgen"), "seq", "--count", str(count)]
    our_gen = [sys.executable, "-m", "bench.bench_go", "loadgen", "seq", "--count", str(count)]
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for gen_name, gen, journal in (
        ("go", go_gen, "bench/seq-go-client"),
        ("ours", our_gen, "bench/seq-our-client"),
        ("ours-grpc", [*our_gen, "--grpc-aio"], "bench/seq-our-client"),
    ):
        for side in ("ours", "go"):
            argv = [*gen, "--broker", sides[side].primary(journal), "--journal", journal]
            results[gen_name, side] = _json_run(argv)

    def rate(r: dict[str, Any]) -> float:
        return float(r["count"] / r["seconds"])

    def desc(r: dict[str, Any]) -> str:
        lat = r["latencies_us"]
        return f"{rate(r):7.0f}/s (p50 {_pct(lat, 50):5.2f} ms, p99 {_pct(lat, 99):5.2f} ms)"

    go_client_go = rate(results["go", "go"])
    floor = _raw_floor(count)
    return [
        f"  {count} sequential 1 KiB appends, RF3:",
        f"  {'  Go client library, our brokers vs Go':<44} {desc(results['go', 'ours'])} vs "
        f"{desc(results['go', 'go'])}   {_ratio(rate(results['go', 'ours']), go_client_go)}",
        f"  {'  our client library, our brokers vs Go':<44} {desc(results['ours', 'ours'])} vs "
        f"{desc(results['ours', 'go'])}   {_ratio(rate(results['ours', 'ours']), rate(results['ours', 'go']))}",
        f"  {'  the same through grpc.aio, not natively':<44} {desc(results['ours-grpc', 'ours'])} vs "
        f"{desc(results['ours-grpc', 'go'])}   {_ratio(rate(results['ours-grpc', 'ours']), rate(results['ours-grpc', 'go']))}",
        f"  {'  ours end to end vs Go end to end':<44} {rate(results['ours', 'ours']):7.0f}/s vs "
        f"{go_client_go:7.0f}/s   {_ratio(rate(results['ours', 'ours']), go_client_go)}",
        f"  {'  floor: bare grpc.aio stream, one hop':<44} {desc(floor)}   "
        f"{_ratio(rate(floor), go_client_go)}  (no broker: a server that only answers)",
    ]  # fmt: skip


def _gil_rows(bins: pathlib.Path, ours: _Side, count: int, switch: pathlib.Path) -> list[str]:
    """Go's sequential appends on our brokers, as they are and with their GIL held."""
    journal = "bench/seq-go-client"
    argv = [str(bins / "gazette-loadgen"), "seq", "--count", str(count)]
    argv += ["--broker", ours.primary(journal), "--journal", journal]
    free = _json_run(argv)
    switch.touch()
    try:
        time.sleep(0.5)  # Every holder thread polls the switch every 50 ms.
        held = _json_run(argv)
    finally:
        switch.unlink()

    def desc(r: dict[str, Any]) -> str:
        lat = r["latencies_us"]
        rate = r["count"] / r["seconds"]
        return f"{rate:7.0f}/s (p50 {_pct(lat, 50):5.2f} ms, p99 {_pct(lat, 99):5.2f} ms)"

    p99_free, p99_held = _pct(free["latencies_us"], 99), _pct(held["latencies_us"], 99)
    return [
        f"  {count} sequential 1 KiB appends, RF3, Go client library on our brokers:",
        f"  {'  GIL held by a Python thread vs not':<44} {desc(held)} vs {desc(free)}   "
        f"p99 {_ratio(p99_free, p99_held)}  (held 5 ms at a time in each broker)",
    ]


def _raw_floor(count: int) -> dict[str, Any]:
    """Python's grpc.aio alone: bare 3-message Append streams to a server that only answers.

    Client and server are processes of their own, as ours and Go's are; no
    replication, no spool. What any Python broker pays per append before doing anything.
    """
    from gazette.keyspace import testing as ks_testing

    port = ks_testing.free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_go", "rawserver", str(port)],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                return _json_run(
                    [sys.executable, "-m", "bench.bench_go", "loadgen", "raw", "--count",
                     str(count), "--broker", f"http://127.0.0.1:{port}", "--journal", "raw/x"]
                )  # fmt: skip
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # The server is still starting.
    finally:
        server.kill()
        server.wait(timeout=30)


def _rate_rows(
    bins: pathlib.Path, sides: dict[str, _Side], rates: Sequence[float], seconds: float
) -> list[str]:
    journal = "bench/rate"
    rows = [f"  append-ack latency, 1 KiB records at a fixed rate, RF3, {seconds:.0f}s each:"]
    for mbps in rates:
        common = ["rate", "--rate", str(mbps * 1e6), "--seconds", str(seconds)]
        go = _json_run(
            [str(bins / "gazette-loadgen"), *common, "--broker", sides["go"].primary(journal),
             "--journal", journal]
        )  # fmt: skip
        ours = _json_run(
            [sys.executable, "-m", "bench.bench_go", "loadgen", *common,
             "--broker", sides["ours"].primary(journal), "--journal", journal]
        )  # fmt: skip
        cells = []
        for p in (50, 99, 99.9):
            o, g = _pct(ours["latencies_us"], p), _pct(go["latencies_us"], p)
            cells.append(f"p{p:g} {o:6.2f} vs {g:6.2f} ms {_ratio(g, o)}")
        rows.append(f"  {f'  {mbps:g} MB/s':<44} " + "   ".join(cells))
    return rows


def _bench(bins: pathlib.Path, work: pathlib.Path) -> None:
    from gazette.broker import testing
    from gazette.keyspace import testing as ks_testing

    gg = _go_gazette()
    size = _env_int("BENCH_GO_MIB", 128) * MIB
    fragment = _env_int("BENCH_GO_FRAGMENT_MIB", 64) * MIB
    seq = _env_int("BENCH_GO_SEQ", 1000)
    oneshot = _env_int("BENCH_GO_ONESHOT", 7)
    rates = [float(r) for r in os.environ.get("BENCH_GO_RATES", "1,5,20").split(",") if r]
    rate_seconds = float(os.environ.get("BENCH_GO_RATE_SECONDS", "4"))
    only = os.environ.get("BENCH_GO_ROWS", "bulk,gazctl,oneshot,seq,rate,gil").split(",")
    zones = ("zone-a", "zone-b", "zone-c")
    gil_switch = work / "hold-gil"  # While it exists, our brokers' GIL is held.

    # Base64 text: compressible as logs are, and the same file for every append.
    data = work / "data.b64"
    with open(data, "wb") as f:
        left = size
        while left > 0:
            chunk = base64.encodebytes(os.urandom(min(left, 12 * MIB) * 3 // 4))[:left]
            f.write(chunk)
            left -= len(chunk)

    with ks_testing.EtcdServer(work_dir=work / "etcd") as etcd:
        go_brokers = [
            gg.GoBroker(
                bins, etcd.endpoint, "/gazette/go", zone=zones[i], suffix=f"go-{i}",
                file_root=work / "go-fragments", log_path=work / f"go-{i}.log", lease="10s",
                extra_args=("--log.level", "warn"),
            )
            for i in range(3)
        ]  # fmt: skip
        with (
            testing.BrokerCluster(
                etcd.endpoint,
                work_dir=work / "ours",
                brokers=3,
                zones=zones,
                etcd_prefix="/gazette/ours",
                lease="10s",
                log_level="warn",
                env={
                    "PYTHONPATH": os.pathsep.join(
                        p for p in (str(GIL_HOLDER), os.environ.get("PYTHONPATH")) if p
                    ),
                    "BENCH_GIL_SWITCH": str(gil_switch),
                },
            ) as cluster,
            go_brokers[0],
            go_brokers[1],
            go_brokers[2],
        ):
            ours = _Side("ours", [b.endpoint for b in cluster.brokers])
            go = _Side("go", [b.endpoint for b in go_brokers])
            sides = {"ours": ours, "go": go}
            spec = JOURNALS_YAML.format(length=fragment).encode()
            journals = [
                line.split(": ", 1)[1]
                for line in spec.decode().splitlines()
                if line.startswith("- name: bench/")
            ]
            for side in sides.values():
                gg.go_gazctl(bins, side.endpoints[0], "journals", "apply", input=spec)
                side.primaries = asyncio.run(_primaries(side.endpoints[0], journals))
                for journal in journals:  # Warm: channels, spools, the first fragment.
                    gg.go_gazctl(
                        bins, side.primary(journal), "journals", "append", "-l",
                        f"name={journal}", input=b"warm\n",
                    )  # fmt: skip
            print(
                f"3 brokers in 3 zones each side, one etcd; bulk {size // MIB} MiB of base64 text, "
                f"fragments of {fragment // MIB} MiB; ours / Go (> 1.00x: ours ahead)",
                flush=True,
            )
            sections: dict[str, Callable[[], list[str]]] = {
                "bulk": lambda: _bulk_rows(bins, (ours, go), data, size),
                "gazctl": lambda: _gazctl_rows(bins, ours, data, size),
                "oneshot": lambda: _oneshot_rows(bins, sides, oneshot),
                "seq": lambda: _seq_rows(bins, sides, seq),
                "rate": lambda: _rate_rows(bins, sides, rates, rate_seconds),
                "gil": lambda: _gil_rows(bins, ours, seq, gil_switch),
            }
            for name, rows in sections.items():
                if name in only:
                    for row in rows():
                        print(row, flush=True)
            print(LIMITS)


LIMITS = """\
  what limits the small-record rows:
  - our brokers serve Append, Replicate and Read in the native data plane (Rust, tonic):
    the rows with Go's client library measure it, and the "gil" row checks that no
    append waits for the broker's Python.
  - our client appends through the native data plane too: one tokio task per append,
    spawned with every message at hand, and one wake-up of the event loop for its answer.
    The "through grpc.aio" row is the client without it: there every gRPC operation (a
    message written or read, a call started or half-closed, a status) completes on
    grpc's poller thread and reaches the event loop through a wake-up, a loop turn and
    tens of microseconds in grpc's Cython layer each, ~7 per RF3 append; the floor row,
    grpc.aio alone with nothing stored, is what a grpc.aio client reaches at best.
  - one-shot gazctl: Python's start (~12 ms) and imports: click, asyncio, grpc.aio,
    protobuf and the protocol stubs, the client (~100 ms on an idle machine); commands
    import only their own modules, and a one-shot process skips prometheus_client."""


def main() -> None:
    if shutil.which("go") is None:
        print("  skipped: no `go` on PATH to build Go Gazette with")
        return
    gg = _go_gazette()
    t0 = time.perf_counter()
    bins = gg.build()
    print(f"Go Gazette v0.103 binaries in {bins} ({time.perf_counter() - t0:.1f}s)", flush=True)
    cache = pathlib.Path(".cache")
    with tempfile.TemporaryDirectory(
        prefix="bench-go-", dir=cache if cache.is_dir() else None
    ) as tmp:
        _bench(bins, pathlib.Path(tmp))


# --- Our load generator (a process of its own, like Go's gazette-loadgen) -----------


async def _loadgen(argv: list[str]) -> dict[str, Any]:
    import argparse

    from gazette.broker import client

    parser = argparse.ArgumentParser(prog="python -m bench.bench_go loadgen")
    parser.add_argument("mode", choices=("seq", "rate", "raw"))
    parser.add_argument("--broker", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--size", type=int, default=RECORD)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rate", type=float, default=1e6)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup-seconds", type=float, default=1.0)
    parser.add_argument(
        "--grpc-aio", action="store_true", help="append through grpc.aio, not natively"
    )
    args = parser.parse_args(argv)
    record = bytes(ord("a") + i % 26 for i in range(args.size - 1)) + b"\n"
    if args.mode == "raw":
        return await _raw_appends(args, record)
    cfg = client.ClientConfig(address=args.broker, cache_size=64, native_appends=not args.grpc_aio)
    latencies: list[float] = []
    async with client.JournalClient(cfg) as jc:
        if args.mode == "seq":
            for _ in range(args.warmup):
                await client.append(jc, args.journal, record)
            start = time.perf_counter()
            for _ in range(args.count):
                t0 = time.perf_counter()
                await client.append(jc, args.journal, record)
                latencies.append((time.perf_counter() - t0) * 1e6)
            seconds = time.perf_counter() - start
        else:
            latencies, seconds = await _fixed_rate(jc, args, record)
    return {"count": len(latencies), "seconds": seconds, "latencies_us": latencies}


async def _raw_appends(args: Any, record: bytes) -> dict[str, Any]:
    """Sequential bare Append streams (journal, content, commit) on one grpc.aio channel."""
    import grpc

    from gazette.broker.protocol import protocol_pb2 as pb2

    latencies: list[float] = []
    async with grpc.aio.insecure_channel(args.broker.removeprefix("http://")) as channel:
        call_append = channel.stream_unary(
            "/protocol.Journal/Append",
            request_serializer=pb2.AppendRequest.SerializeToString,
            response_deserializer=pb2.AppendResponse.FromString,
        )
        for i in range(args.warmup + args.count):
            t0 = time.perf_counter()
            call = call_append()
            await call.write(pb2.AppendRequest(journal=args.journal))
            await call.write(pb2.AppendRequest(content=record))
            await call.write(pb2.AppendRequest())
            await call.done_writing()
            await call
            if i == args.warmup:
                start = t0
            if i >= args.warmup:
                latencies.append((time.perf_counter() - t0) * 1e6)
        seconds = time.perf_counter() - start
    return {"count": len(latencies), "seconds": seconds, "latencies_us": latencies}


async def _raw_server(port: int) -> None:
    """A grpc.aio server of ``protocol.Journal/Append`` that only counts and answers."""
    import grpc

    from gazette.broker.protocol import protocol_pb2 as pb2

    async def append(requests: Any, context: Any) -> Any:
        n = 0
        async for req in requests:
            n += len(req.content)
        return pb2.AppendResponse(status=pb2.Status.OK, commit=pb2.Fragment(end=n))

    handler = grpc.method_handlers_generic_handler(
        "protocol.Journal",
        {
            "Append": grpc.stream_unary_rpc_method_handler(
                append,
                request_deserializer=pb2.AppendRequest.FromString,
                response_serializer=pb2.AppendResponse.SerializeToString,
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def _fixed_rate(jc: Any, args: Any, record: bytes) -> tuple[list[float], float]:
    """Records at a fixed rate into an AppendService; each timed from its scheduled moment."""
    from gazette.broker import client

    per_second = args.rate / len(record)
    total = int((args.warmup_seconds + args.seconds) * per_second)
    skip = int(args.warmup_seconds * per_second)
    scheduled: list[float] = []
    batch_of: list[int] = []
    acked: dict[int, float] = {}
    batches: list[client.AsyncAppend] = []
    async with client.AppendService(jc) as svc:
        start = time.perf_counter()
        last: client.AsyncAppend | None = None
        sent = 0
        while sent < total:
            await asyncio.sleep(0.001)
            due = min(total, int((time.perf_counter() - start) * per_second))
            while sent < due:
                aa = svc.append(args.journal, record)
                if aa is not last:
                    last = aa
                    batches.append(aa)
                    n = len(batches) - 1
                    aa.add_done_callback(lambda n=n: acked.__setitem__(n, time.perf_counter()))
                scheduled.append(start + sent / per_second)
                batch_of.append(len(batches) - 1)
                sent += 1
        end = time.perf_counter()
    for aa in batches:
        if aa.error is not None:
            raise aa.error
    latencies = [(acked[batch_of[i]] - scheduled[i]) * 1e6 for i in range(skip, total)]
    return latencies, end - start - args.warmup_seconds


if __name__ == "__main__":
    if sys.argv[1:2] == ["loadgen"]:
        print(json.dumps(asyncio.run(_loadgen(sys.argv[2:]))))
    elif sys.argv[1:2] == ["rawserver"]:
        asyncio.run(_raw_server(int(sys.argv[2])))
    else:
        main()
