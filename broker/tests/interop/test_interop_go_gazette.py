"""Side by side with Gazette's own Go broker and gazctl (v0.103), on one etcd and one store.

* Go's gazctl drives our brokers: apply, list, append, read, fragments, suspend, reset-head.
* Our gazctl drives a Go broker: the same, and store-health with a delete probe, which a
  Go v0.103 broker does not run (it must be reported, not taken as healthy).
* A mixed cluster (Go and Python brokers under one etcd root): journals replicated
  over both kinds take appends through either and read back the same bytes from
  either, with fragments persisted to the shared ``file://`` store by both.
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from go_gazette import GoBroker, go_gazctl

from gazette.broker import client, testing
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SPECS = """
name: side/
replication: 1
labels:
- name: topic
  value: side
fragment:
  length: 4096
  compression_codec: GZIP
  stores:
  - file:///
  refresh_interval: 1s
  flush_interval: 1h0m0s
children:
- name: side/a
- name: side/b
"""


def ours(broker: str, *args: str, input: bytes | None = None, ok: bool = True) -> Any:
    """Our gazctl, as a process (as a user runs it)."""
    proc = subprocess.run(
        [sys.executable, "-m", "gazette.gazctl", *args],
        input=input,
        capture_output=True,
        timeout=60,
        env={"BROKER_ADDRESS": broker, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    if ok:
        assert proc.returncode == 0, f"gazctl {' '.join(args)}: {proc.stderr.decode()}"
    return proc


@pytest.fixture
def go_broker(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> Iterator[GoBroker]:
    prefix = f"/gazette/go-{tmp_path.name[-12:]}"
    b = GoBroker(
        go_bins,
        etcd_server.endpoint,
        prefix,
        "zone-go",
        "go-broker-0",
        testing.free_port(),
        tmp_path / "fragments",
        tmp_path / "go-broker.log",
    )
    b.file_root.mkdir()
    b.start()
    try:
        yield b
    finally:
        b.kill()
        ks_testing.wipe_prefix(etcd_server.endpoint, prefix + "/")


def _append_until_assigned(append: Any) -> None:
    for _ in range(200):
        if append().returncode == 0:
            return
    raise AssertionError("journal never took an append")


def test_go_gazctl_drives_our_brokers(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    with testing.running_cluster(etcd_server.endpoint, tmp_path, brokers=2) as cluster:
        broker = cluster[0].endpoint
        go_gazctl(go_bins, broker, "journals", "apply", input=SPECS.encode())
        listed = go_gazctl(go_bins, broker, "journals", "list", "-o", "yaml").stdout.decode()
        names = sorted(
            n for n in (line.split("name:", 1)[1].strip() for line in listed.splitlines()
                        if "name:" in line and "value" not in line) if n.startswith("side/")
        )  # fmt: skip
        assert {"side/a", "side/b"} <= set(names), listed
        _append_until_assigned(
            lambda: go_gazctl(
                go_bins, broker, "journals", "append", "-l", "name=side/a", input=b"", ok=False
            )
        )
        go_gazctl(go_bins, broker, "journals", "append", "-l", "name=side/a", input=b"one\ntwo\n")
        ours(broker, "journals", "append", "-l", "name=side/a", input=b"three\n")
        read = go_gazctl(go_bins, broker, "journals", "read", "-l", "name=side/a")
        assert read.stdout == b"one\ntwo\nthree\n"
        frags = go_gazctl(
            go_bins, broker, "journals", "fragments", "-l", "name=side/a", "-o", "json"
        )
        assert b"side/a" in frags.stdout, frags.stdout
        go_gazctl(go_bins, broker, "journals", "reset-head", "-l", "name=side/a")
        go_gazctl(go_bins, broker, "journals", "suspend", "-l", "name=side/b", "--force")
        ours(broker, "journals", "append", "-l", "name=side/a", input=b"four\n")
        assert ours(broker, "journals", "read", "-l", "name=side/a").stdout == (
            b"one\ntwo\nthree\nfour\n"
        )


def test_our_gazctl_drives_a_go_broker(go_broker: GoBroker) -> None:
    broker = go_broker.endpoint
    ours(broker, "journals", "apply", input=SPECS.encode())
    out = ours(broker, "journals", "list", "-l", "topic=side").stdout.decode()
    assert "side/a" in out and "side/b" in out
    _append_until_assigned(
        lambda: ours(broker, "journals", "append", "-l", "name=side/b", input=b"", ok=False)
    )
    ours(broker, "journals", "append", "-l", "name=side/b", input=b"hello, go\n")
    assert ours(broker, "journals", "read", "-l", "name=side/b").stdout == b"hello, go\n"
    assert b"side/b" in ours(broker, "journals", "fragments", "-l", "name=side/b").stdout
    # reset-head: a v0.103 broker refuses SUSPEND_KEEP; gazctl falls back to what Go's sends.
    ours(broker, "journals", "reset-head", "-l", "name=side/b")
    ours(broker, "journals", "append", "-l", "name=side/b", input=b"again\n")
    assert ours(broker, "journals", "read", "-l", "name=side/b").stdout == b"hello, go\nagain\n"
    ours(broker, "journals", "suspend", "-l", "name=side/a", "--force")
    # store-health: healthy, but the delete probe is ignored by v0.103: said so, not hidden.
    assert b"is healthy" in ours(broker, "journals", "store-health", "file:///").stdout
    probe = ours(
        broker,
        "journals",
        "store-health",
        "file:///",
        "--check-delete-prefix",
        "probe/",
        ok=False,
    )
    assert probe.returncode != 0
    assert b"delete permission is untested" in probe.stderr + probe.stdout


async def _wait_writable(jc: client.JournalClient, names: tuple[str, ...]) -> None:
    for name in names:
        for _ in range(300):
            try:
                await client.append(jc, name, b"")
                break
            except client.errors.ClientError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{name} never took an append")


async def test_a_mixed_cluster_replicates_and_survives_either_kind_of_primary(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    """3 Python and 2 Go brokers, journals RF 3: appends through either kind, then the
    primaries of one journal of each kind SIGKILLed, and nothing acknowledged is lost."""
    with testing.running_cluster(etcd_server.endpoint, tmp_path / "py", brokers=3) as cluster:
        gos = [
            GoBroker(
                go_bins,
                etcd_server.endpoint,
                cluster.etcd_prefix,
                zone,
                f"go-broker-{i}",
                testing.free_port(),
                cluster.file_root,
                tmp_path / f"go-{i}.log",
            )
            for i, zone in enumerate(("zone-a", "zone-b"))
        ]
        by_suffix: dict[str, Any] = {b.suffix: b for b in cluster.brokers}
        by_suffix.update({g.suffix: g for g in gos})
        try:
            for g in gos:
                g.start()
            spec = SPECS.replace("replication: 1", "replication: 3")
            ours(cluster[0].endpoint, "journals", "apply", input=spec.encode())
            want = {"side/a": b"", "side/b": b""}
            async with client.JournalClient(client.ClientConfig(address=cluster[0].endpoint)) as jc:
                await _wait_writable(jc, ("side/a", "side/b"))
                listing = await client.list_journals(jc)
                kinds = {m.suffix.split("-")[0] for j in listing.journals for m in j.route.members}
                assert kinds == {"broker", "go"}, listing
                for i in range(20):
                    name = ("side/a", "side/b")[i % 2]
                    line = f"{name} line {i}\n".encode()
                    # Alternately through our client and Go's gazctl (at either Go broker).
                    if (i // 2) % 2:
                        await client.append(jc, name, line)
                    else:
                        go_gazctl(
                            go_bins, gos[(i // 4) % 2].endpoint, "journals", "append", "-l",
                            f"name={name}", input=line,
                        )  # fmt: skip
                    want[name] += line
                # SIGKILL a primary, then (once routes moved) a primary of the other kind.
                killed: list[str] = []
                for _ in range(2):
                    listing = await client.list_journals(jc)
                    for j in listing.journals:
                        primary = j.route.members[j.route.primary].suffix
                        if primary == "broker-00" or primary.split("-")[0] in {
                            k.split("-")[0] for k in killed
                        }:
                            continue  # broker-00 is this client's address.
                        by_suffix[primary].kill()
                        killed.append(primary)
                        break
                    await asyncio.sleep(4)  # The lease (3 s) lapses; the allocator moves routes.
                    await _wait_writable(jc, ("side/a", "side/b"))
                assert killed, "no primary could be killed"
            survivor = next(
                b.endpoint
                for b in (*cluster.brokers, *gos)
                if b.suffix not in killed and b.suffix != "broker-00"
            )
            async with client.JournalClient(client.ClientConfig(address=survivor)) as jc:
                await _wait_writable(jc, ("side/a", "side/b"))
                for i in range(10):
                    for name in want:
                        line = f"{name} after {i}\n".encode()
                        await client.append(jc, name, line)
                        want[name] += line
            alive = [b.endpoint for b in (*cluster.brokers, *gos) if b.suffix not in killed]
            for endpoint in alive:
                for name, data in want.items():
                    got = go_gazctl(go_bins, endpoint, "journals", "read", "-l", f"name={name}")
                    assert got.stdout == data, (endpoint, name, killed)
                    assert ours(endpoint, "journals", "read", "-l", f"name={name}").stdout == data
            print(f"\nmixed cluster: SIGKILLed primaries {killed}; {len(alive)} brokers read back")
        finally:
            for g in gos:
                g.kill()
