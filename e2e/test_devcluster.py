"""`make up` / `make down`: detached etcd and brokers (each serving the HTTP gateway) that `down`
stops, and only them."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest

import devcluster

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[1]


def run(*args: str, cwd: pathlib.Path | None = None) -> str:
    if args[0] == "up":  # Never the developer's own ports.
        args = (*args, "--broker-port", "0", "--no-journals")
    out = subprocess.run(
        [sys.executable, "-m", "devcluster", *args],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
        cwd=cwd,
    )
    return out.stdout


@pytest.fixture
def data(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A data dir; whatever `up` recorded there is killed at the end, whatever the outcome."""
    yield tmp_path
    for where in (tmp_path, tmp_path / "rel"):
        for process in devcluster.read_state(where):
            if devcluster.is_running(process):
                os.kill(process.pid, signal.SIGKILL)


def healthy(endpoint: str) -> bool:
    with urllib.request.urlopen(f"{endpoint}/health", timeout=5) as resp:
        return b'"health":"true"' in resp.read()


def test_up_then_down_leaves_nothing_behind(data: pathlib.Path) -> None:
    out = run("up", "--data", str(data), "--etcd-port", "0")
    processes = devcluster.read_state(data)
    assert [p.name for p in processes] == ["etcd", "broker-0", "broker-1", "broker-2"]
    etcd = processes[0]
    assert f"pid {etcd.pid}" in out and etcd.endpoint in out and "make down" in out
    assert devcluster.is_running(etcd)
    assert healthy(etcd.endpoint)
    assert (data / "etcd" / "data").is_dir()
    # Each broker made its own spool directory, and serves the gateway on its HTTP port;
    # GATEWAY points at the first broker's.
    for broker in processes[1:]:
        assert (data / "brokers" / broker.name / "spool").is_dir()
        with urllib.request.urlopen(f"{broker.http}/debug/ready", timeout=5) as resp:
            assert resp.read() == b"ready\n"
    assert f"export GATEWAY={processes[1].http}\n" in (data / "env").read_text()

    # Up again: idempotent, the same process.
    again = run("up", "--data", str(data), "--etcd-port", "0")
    assert "already up" in again
    assert devcluster.read_state(data) == processes
    assert f"etcd  pid {etcd.pid}" in run("status", "--data", str(data))

    out = run("down", "--data", str(data))
    for p in processes:
        assert f"stopped {p.name} (pid {p.pid})" in out
        assert not devcluster.is_running(p)
    assert devcluster.read_state(data) == []
    assert "nothing to stop" in run("down", "--data", str(data))
    assert "nothing running" in run("status", "--data", str(data))


def test_up_says_when_the_port_is_taken(data: pathlib.Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # A relative data directory (as `make up`'s default .local) works the same.
        out = run("up", "--data", "rel", "--etcd-port", str(port), cwd=data)
    assert f"port {port} is already in use" in out
    processes = devcluster.read_state(data / "rel")
    etcd = processes[0]
    assert not etcd.endpoint.endswith(f":{port}")
    assert healthy(etcd.endpoint)
    assert (data / "rel" / "etcd" / "data").is_dir()
    run("down", "--data", "rel", cwd=data)
    assert not any(devcluster.is_running(p) for p in processes)


def test_down_leaves_other_processes_alone(data: pathlib.Path) -> None:
    # A recorded pid that now runs something else (pid reuse) must survive `down`.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = {
            "processes": [
                {
                    "name": "etcd",
                    "pid": other.pid,
                    "argv": ["/some/etcd", "--data-dir", str(data)],
                    "endpoint": "http://127.0.0.1:1",
                    "log": "",
                }
            ]
        }
        (data / devcluster.STATE_FILE).write_text(json.dumps(state))
        out = run("down", "--data", str(data))
        assert "is not running" in out
        assert other.poll() is None
        assert not (data / devcluster.STATE_FILE).exists()
    finally:
        other.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            other.wait(10)


def _free_run(length: int) -> int:
    """A port P with P..P+length-1 all free (as a server with SO_REUSEADDR sees them)."""
    from gazette.keyspace import testing

    for _ in range(200):
        base = testing.free_port_pairs(1)[0]
        if base + length < 65536 and all(
            testing.port_is_free(p) for p in range(base, base + length)
        ):
            return base
    raise OSError(f"no run of {length} free ports")


def test_port_base_derives_every_port_and_a_quick_second_up_keeps_them(
    data: pathlib.Path,
) -> None:
    base = _free_run(8)
    args = ("--data", str(data), "--port-base", str(base), "--no-journals")

    def up() -> str:
        return subprocess.run(
            [sys.executable, "-m", "devcluster", "up", *args],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=180,
            check=True,
        ).stdout

    out = up()
    processes = {p.name: p for p in devcluster.read_state(data)}
    assert processes["etcd"].endpoint.endswith(f":{base}"), out
    for i in range(3):
        b = processes[f"broker-{i}"]
        assert b.endpoint == f"http://127.0.0.1:{base + 2 + 2 * i}"
        assert b.http == f"http://127.0.0.1:{base + 3 + 2 * i}"
    assert "already in use" not in out
    run("down", "--data", str(data))
    # Straight up again: sockets of the last run linger in TIME-WAIT, yet the ports stay.
    out = up()
    assert "already in use" not in out, out
    assert devcluster.read_state(data)[1].endpoint == f"http://127.0.0.1:{base + 2}"
    run("down", "--data", str(data))
