"""What authorization costs: append throughput with ``--broker.auth-keys`` vs without, same run.

Three clusters of three real broker processes over one real etcd on loopback,
measured in turn, row by row (A, B, K, K, B, A; the best of two each), so that
load from elsewhere on the host falls on all alike: A and B without keys (B is
a control: how far two measurements of the same thing differ here), K with
``--broker.auth-keys``, where the client signs a token per
append RPC (scoped to APPEND on the journal, as Gazette's clients and ours
do) and every broker verifies it, and the primary signs its own for the
Replicate streams to its peers. Rows:

- bulk: 1 MiB appends of 128 KiB chunks, one at a time, at replication 1 and 3
  (MB/s; token costs are per RPC, so these should hardly move);
- small: 1 KiB appends one at a time at replication 3 (appends/s, where the
  per-RPC cost of a token shows most);
- proxied: small appends sent to a broker that is not the primary (it verifies
  the client's token, then signs its own for the primary).

Each row prints B/A and K/A.
"""

from __future__ import annotations

import asyncio
import base64
import os
import pathlib
import tempfile
import time
from collections.abc import Sequence

import grpc

from bench import _cluster
from gazette.broker import protocol as pb
from gazette.broker.protocol import auth
from gazette.broker.protocol import protocol_pb2 as pb2
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc

KEYS = base64.b64encode(os.urandom(32)).decode()
SECONDS = 3.0
WARMUP = 1.0
BULK_CHUNK = 128 * 1024
BULK_APPEND = 1 << 20
SMALL_APPEND = 1024


async def _append_for(
    channel: grpc.aio.Channel,
    journal: str,
    chunk: int,
    per_append: int,
    seconds: float,
    signer: auth.KeyedAuth | None,
) -> tuple[float, int]:
    """Append ``per_append`` chunks of ``chunk`` bytes per RPC for ``seconds``: (bytes, RPCs)."""
    call_append = channel.stream_unary(
        "/protocol.Journal/Append",
        request_serializer=pb2.AppendRequest.SerializeToString,
        response_deserializer=pb2.AppendResponse.FromString,
    )
    payload = b"x" * chunk
    claims = auth.journal_claims(auth.Capability.APPEND, journal)
    total = rpcs = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:

        async def requests():  # type: ignore[no-untyped-def]
            yield pb2.AppendRequest(journal=journal)
            for _ in range(per_append):
                yield pb2.AppendRequest(content=payload)
            yield pb2.AppendRequest()

        # As our JournalClient does: a token per RPC (re-used within its second).
        metadata = signer.authorize(claims) if signer is not None else None
        resp = await call_append(requests(), metadata=metadata)
        if resp.status != pb2.Status.OK:
            raise RuntimeError(f"append failed: {pb2.Status.Name(resp.status)}")
        total += per_append * chunk
        rpcs += 1
    return total / (time.perf_counter() - start), rpcs


async def _journal(
    cluster: object, name: str, replication: int, signer: auth.KeyedAuth | None
) -> tuple[int, int]:
    """Create a journal; (index of its primary, index of a broker that is not its primary)."""
    from gazette.broker import testing

    assert isinstance(cluster, testing.BrokerCluster)
    md = signer.authorize(auth.Claims(auth.Capability.ALL)) if signer is not None else None
    spec = testing.journal_spec(
        name, replication=replication, stores=[cluster.store_url], length=64 << 20
    )
    async with cluster.channel(0) as ch:
        stub = pb2_grpc.JournalStub(ch)
        resp = await testing.apply_specs(stub, spec, metadata=md)  # type: ignore[arg-type]
        if resp.status != pb.OK:
            raise RuntimeError(f"apply failed: {resp}")
        await testing.wait_writable(stub, name, metadata=md)  # type: ignore[arg-type]
        _, meta = await testing.read(stub, name, -1, metadata=md)  # type: ignore[arg-type]
    route = meta[0].header.route
    primary = next(i for i, b in enumerate(cluster.brokers) if b.id == route.members[route.primary])
    return primary, (primary + 1) % len(cluster.brokers)


class _Side:
    """One cluster (with or without keys) and its journals."""

    def __init__(self, cluster: object, signer: auth.KeyedAuth | None) -> None:
        self.cluster = cluster
        self.signer = signer
        self.brokers: dict[str, tuple[int, int]] = {}

    async def setup(self) -> None:
        for name, replication in (
            ("bench/auth-bulk-r1", 1),
            ("bench/auth-bulk-r3", 3),
            ("bench/auth-small-r3", 3),
        ):
            self.brokers[name] = await _journal(self.cluster, name, replication, self.signer)

    async def row(
        self, name: str, proxied: bool, chunk: int, per_append: int
    ) -> tuple[float, float, float]:
        """(bytes/s, appends/s, CPU seconds per append) appending to ``name`` for SECONDS."""
        primary, other = self.brokers[name]
        async with self.cluster.channel(other if proxied else primary) as ch:  # type: ignore[attr-defined]
            await _append_for(ch, name, chunk, per_append, WARMUP, self.signer)
            cpu = self._cpu()
            start = time.perf_counter()
            rate, rpcs = await _append_for(ch, name, chunk, per_append, SECONDS, self.signer)
            elapsed = time.perf_counter() - start
            return rate, rpcs / elapsed, (self._cpu() - cpu) / max(1, rpcs)

    def _cpu(self) -> float:
        return _cluster.cpu_seconds(self.cluster)


_PER_BULK = BULK_APPEND // BULK_CHUNK
ROWS = (
    # label, journal, proxied, chunk, chunks per append, unit
    ("bulk 128 KiB chunks, r1", "bench/auth-bulk-r1", False, BULK_CHUNK, _PER_BULK, "MB/s"),
    ("bulk 128 KiB chunks, r3", "bench/auth-bulk-r3", False, BULK_CHUNK, _PER_BULK, "MB/s"),
    ("small 1 KiB appends, r3", "bench/auth-small-r3", False, SMALL_APPEND, 1, "appends/s"),
    ("  ... proxied via a peer", "bench/auth-small-r3", True, SMALL_APPEND, 1, "appends/s"),
)


async def _measure(
    plain: _Side, control: _Side, keyed: _Side
) -> list[tuple[str, str, list[float], list[float]]]:
    """Each row on every side in turn (A, B, K, K, B, A): (label, unit, best figures, CPU ms)."""
    for side in (plain, control, keyed):
        await side.setup()
    out = []
    for label, name, proxied, chunk, per, unit in ROWS:
        best = [0.0, 0.0, 0.0]
        cpu = [0.0, 0.0, 0.0]
        for i, side in enumerate((plain, control, keyed, keyed, control, plain)):
            j = min(i, 5 - i)
            rate, appends, cpu_per_append = await side.row(name, proxied, chunk, per)
            best[j] = max(best[j], rate / 1e6 if unit == "MB/s" else appends)
            cpu[j] += cpu_per_append / 2 * 1e3
        out.append((label, unit, best, cpu))
    return out


def _verify_cost() -> tuple[float, float, float]:
    """Microseconds to sign a token, verify a new one, and verify one seen before."""
    signer = auth.KeyedAuth(KEYS)
    n = 2000
    start = time.perf_counter()
    tokens = [signer.sign(auth.Claims(auth.Capability.APPEND), 60 + i) for i in range(n)]
    sign_us = (time.perf_counter() - start) / n * 1e6
    verifier = auth.KeyedAuth(KEYS)
    start = time.perf_counter()
    for t in tokens:
        verifier.verify([("authorization", "Bearer " + t)], auth.Capability.APPEND)
    fresh_us = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for t in tokens:
        verifier.verify([("authorization", "Bearer " + t)], auth.Capability.APPEND)
    seen_us = (time.perf_counter() - start) / n * 1e6
    return sign_us, fresh_us, seen_us


def main() -> None:
    from gazette.broker import testing
    from gazette.keyspace import testing as ks_testing

    cache = pathlib.Path(".cache")
    with tempfile.TemporaryDirectory(
        prefix="bench-auth-", dir=cache if cache.is_dir() else None
    ) as tmp:
        work = pathlib.Path(tmp)
        with ks_testing.EtcdServer(work_dir=work / "etcd") as etcd:

            def cluster(kind: str, extra_args: Sequence[str]) -> testing.BrokerCluster:
                return testing.BrokerCluster(
                    etcd.endpoint,
                    work_dir=work / kind,
                    etcd_prefix=f"/gazette/bench-{kind}",
                    brokers=3,
                    lease="10s",
                    log_level="warn",
                    extra_args=extra_args,
                )

            with (
                cluster("plain", ()) as plain,
                cluster("control", ()) as control,
                cluster("auth", ("--broker.auth-keys", KEYS)) as keyed,
            ):
                rows = asyncio.run(
                    _measure(
                        _Side(plain, None),
                        _Side(control, None),
                        _Side(keyed, auth.KeyedAuth(KEYS)),
                    )
                )
    print(
        "append throughput, three clusters of 3 brokers measured in turn (A, B, K, K, B, A),"
        f" best of 2 x {SECONDS:.0f}s per row after {WARMUP:.0f}s of warm-up"
    )
    print(f"  {'':<26} {'A: no auth':>18} {'B: no auth (control)':>28} {'K: auth keys':>28}")
    for label, unit, (a, b, k), _ in rows:
        print(
            f"  {label:<26} {a:8.1f} {unit:<9} {b:10.1f} {unit:<9} ({b / a:4.2f}x)"
            f" {k:10.1f} {unit:<9} ({k / a:4.2f}x)"
        )
    print("  CPU of the client and the brokers per append (less sensitive to the host's load):")
    for label, _, _, (a, b, k) in rows:
        print(
            f"  {label:<26} {a:8.2f} ms {b:18.2f} ms ({b / a:4.2f}x) {k:18.2f} ms ({k / a:4.2f}x)"
        )
    print("  B/A is the host's noise (the same thing measured twice): K/A within it is free.")
    sign_us, fresh_us, seen_us = _verify_cost()
    print(
        f"  tokens (pyjwt, HS256): sign {sign_us:.0f} us, verify {fresh_us:.0f} us"
        f" (a token seen before: {seen_us:.1f} us)"
    )


if __name__ == "__main__":
    main()
