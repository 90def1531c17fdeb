"""What mutual TLS with authorization costs: append throughput vs plaintext, same run.

Three clusters of three real broker processes over one real etcd on loopback,
measured in turn, row by row (A, B, T, T, B, A; the best of two each), as
``bench_auth`` measures them: A and B plaintext without keys (B is a control:
how far two measurements of the same thing differ on this host), T serving
mutual TLS (client certificates required, peers dialed with theirs: every
Replicate stream and proxied append is encrypted twice over loopback) and
``--broker.auth-keys`` (a token per RPC, verified by every broker). The
client dials T with its certificate through the dial seam, as
``JournalClient`` does. Rows as ``bench_auth``'s: bulk appends at
replication 1 and 3 (MB/s), small appends at replication 3 and proxied
through a peer (appends/s). Each row prints B/A and T/A (aim: T/A >= 0.8).
"""

from __future__ import annotations

import asyncio
import pathlib
import tempfile

from bench import bench_auth
from gazette.broker.protocol import auth, tlstesting


def main() -> None:
    from gazette.broker import testing
    from gazette.keyspace import testing as ks_testing

    keys = bench_auth.KEYS
    cache = pathlib.Path(".cache")
    with tempfile.TemporaryDirectory(
        prefix="bench-tls-", dir=cache if cache.is_dir() else None
    ) as tmp:
        work = pathlib.Path(tmp)
        certs = tlstesting.make_certs(work / "tls")
        with ks_testing.EtcdServer(work_dir=work / "etcd") as etcd:

            def cluster(kind: str, secure: bool) -> testing.BrokerCluster:
                return testing.BrokerCluster(
                    etcd.endpoint,
                    work_dir=work / kind,
                    etcd_prefix=f"/gazette/bench-{kind}",
                    brokers=3,
                    lease="10s",
                    log_level="warn",
                    # A loaded host can starve a client stream below Gazette's 64 KiB/s
                    # floor and abort the run: keep the floor, lower, on every cluster alike.
                    extra_args=(
                        "--broker.min-append-rate",
                        "4096",
                        *(("--broker.auth-keys", keys) if secure else ()),
                    ),
                    tls=certs if secure else None,
                )

            with (
                cluster("plain", False) as plain,
                cluster("control", False) as control,
                cluster("mtls", True) as secure,
            ):
                rows = asyncio.run(
                    bench_auth._measure(
                        bench_auth._Side(plain, None),
                        bench_auth._Side(control, None),
                        bench_auth._Side(secure, auth.KeyedAuth(keys)),
                    )
                )
    print(
        "append throughput, three clusters of 3 brokers measured in turn (A, B, T, T, B, A),"
        f" best of 2 x {bench_auth.SECONDS:.0f}s per row after {bench_auth.WARMUP:.0f}s of warm-up"
    )
    print(f"  {'':<26} {'A: plaintext':>18} {'B: plaintext (control)':>28} {'T: mTLS + auth':>28}")
    for label, unit, (a, b, t), _ in rows:
        print(
            f"  {label:<26} {a:8.1f} {unit:<9} {b:10.1f} {unit:<9} ({b / a:4.2f}x)"
            f" {t:10.1f} {unit:<9} ({t / a:4.2f}x)"
        )
    print("  CPU of the client and the brokers per append (less sensitive to the host's load):")
    for label, _, _, (a, b, t) in rows:
        print(
            f"  {label:<26} {a:8.2f} ms {b:18.2f} ms ({b / a:4.2f}x) {t:18.2f} ms ({t / a:4.2f}x)"
        )
    worst = min(t / a for _, _, (a, _, t), _ in rows)
    print(f"  B/A is the host's noise. Lowest T/A: {worst:.2f}x (aim >= 0.8x)")


if __name__ == "__main__":
    main()
