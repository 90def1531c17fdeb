"""The newcomer's first five minutes, automated: `make up`, gazctl, curl, `make down`, again.

Runs the Makefile as a user would, with a temporary data directory and free
ports, so it never collides with a developer's own `make up` cluster.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest

import devcluster

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[1]
GAZCTL = REPO / ".venv" / "bin" / "gazctl"
LOGS = ["examples/logs/api", "examples/logs/web", "examples/logs/worker"]
#: What the README's "Try it" appends (JSON lines, as the journals' content-type says).
HELLO = b'{"level":"info","msg":"hello"}\n'
OVER_HTTP = b'{"level":"warn","msg":"over http"}\n'
AFTER = b'{"level":"info","msg":"after restart"}\n'


def make(target: str, data: pathlib.Path) -> str:
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            target,
            f"DATA={data}",
            "UP_ARGS=--etcd-port 0 --broker-port 0",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"make {target} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def env_of(data: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    for line in (data / "env").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    return env


def gazctl(env: dict[str, str], *args: str, stdin: str = "") -> str:
    out = subprocess.run(
        [str(GAZCTL), *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, f"gazctl {' '.join(args)} failed: {out.stderr}"
    return out.stdout


def curl(*args: str) -> bytes:
    if shutil.which("curl"):
        return subprocess.run(
            ["curl", "-sS", "--fail", "--max-time", "20", *args],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    # No curl on this machine: the same requests through urllib.
    url = args[-1]
    if "-X" in args:
        body = args[args.index("--data-binary") + 1].encode()
        req = urllib.request.Request(url, data=body, method="PUT")
    else:
        req = urllib.request.Request(url)
    with urllib.request.urlopen(req, timeout=20) as resp:
        return bytes(resp.read())


@pytest.fixture
def data(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    yield tmp_path / "data"
    # Whatever the outcome, leave nothing running.
    subprocess.run(
        ["make", "--no-print-directory", "down", f"DATA={tmp_path / 'data'}"],
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )


def test_newcomer_sequence(data: pathlib.Path) -> None:
    out = make("up", data)
    assert "gazctl journals list -l topic=logs" in out
    processes = devcluster.read_state(data)
    assert [p.name for p in processes] == ["etcd", "broker-0", "broker-1", "broker-2"]
    assert all(devcluster.is_running(p) for p in processes)
    env = env_of(data)

    # Exactly the journals labelled topic=logs.
    listing = gazctl(env, "journals", "list", "-l", "topic=logs")
    names = [line.split()[0] for line in listing.splitlines()[1:]]
    assert names == LOGS

    # The README's "Try it", JSON lines as the journals' content-type says.
    journal = LOGS[0]
    gazctl(env, "journals", "append", "-l", f"name={journal}", stdin=HELLO.decode())
    assert gazctl(env, "journals", "read", "-l", f"name={journal}") == HELLO.decode()

    # The HTTP gateway, on broker-0's HTTP port: PUT appends atomically, GET reads it all back.
    gateway = env["GATEWAY"]
    assert gateway == processes[1].http
    assert f"curl -X PUT --data-binary @- {gateway}/" in out
    curl("-X", "PUT", "--data-binary", OVER_HTTP.decode(), f"{gateway}/{journal}")
    assert curl(f"{gateway}/{journal}?offset=0") == HELLO + OVER_HTTP
    assert gazctl(
        env, "journals", "read", "-l", f"name={journal}", "--offset", str(len(HELLO))
    ) == (OVER_HTTP.decode())

    # `make up` again is harmless; `make down` stops every process it started.
    assert "already up" in make("up", data)
    out = make("down", data)
    assert "SIGKILL" not in out, out  # Every process exited of its own accord.
    for p in processes:
        assert f"stopped {p.name} (pid {p.pid}) after " in out
        assert not devcluster.is_running(p)
    assert devcluster.read_state(data) == []

    # `make up` over the same data again: the journals, and their persisted
    # content, are still there, and take appends where they ended: `down` stopped
    # the brokers gracefully, and each primary recorded its journal's head.
    out = make("up", data)
    assert "outlived the last `down`" not in out  # No write head needed resetting.
    gateway = env_of(data)["GATEWAY"]
    assert curl(f"{gateway}/{journal}?offset=0") == HELLO + OVER_HTTP
    curl("-X", "PUT", "--data-binary", AFTER.decode(), f"{gateway}/{journal}")
    assert curl(f"{gateway}/{journal}?offset=0") == HELLO + OVER_HTTP + AFTER
    processes = devcluster.read_state(data)
    make("down", data)
    assert not any(devcluster.is_running(p) for p in processes)
