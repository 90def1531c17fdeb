"""`make up SECURE=1`: the local cluster with mutual TLS and bearer tokens, as a user drives it.

Runs the Makefile with a temporary data directory and free ports: the
brokers announce ``https://`` endpoints and require client certificates of
the CA under ``$(DATA)/tls`` and tokens of the key there; ``$(DATA)/env`` is
all gazctl needs (its certificate, key, CA and auth variables), and the
gateway answers HTTPS with the same certificate and the token. Without the
certificate, or without credentials, requests are refused.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

import devcluster

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[1]
GAZCTL = REPO / ".venv" / "bin" / "gazctl"
LOGS = ["examples/logs/api", "examples/logs/web", "examples/logs/worker"]


def make(target: str, data: pathlib.Path) -> str:
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            target,
            f"DATA={data}",
            "SECURE=1",
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    for line in (data / "env").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    return env


def gazctl(
    env: dict[str, str], *args: str, stdin: str = "", ok: bool = True
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [str(GAZCTL), *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
    )
    if ok:
        assert out.returncode == 0, f"gazctl {' '.join(args)} failed: {out.stderr}"
    return out


def https(env: dict[str, str], url: str, body: bytes | None = None) -> bytes:
    """What the printed curl line does (curl itself when installed)."""
    auth = f"Authorization: Bearer {env['BROKER_AUTH_TOKEN']}"
    if shutil.which("curl"):
        args = [
            "curl", "-sS", "--fail", "--max-time", "20",
            "--cacert", env["BROKER_TRUSTED_CA_FILE"],
            "--cert", env["BROKER_CERT_FILE"],
            "--key", env["BROKER_CERT_KEY_FILE"],
            "-H", auth,
        ]  # fmt: skip
        if body is not None:
            args += ["-X", "PUT", "--data-binary", "@-"]
        return subprocess.run(
            [*args, url], input=body, capture_output=True, check=True, timeout=30
        ).stdout
    ctx = ssl.create_default_context(cafile=env["BROKER_TRUSTED_CA_FILE"])
    ctx.load_cert_chain(env["BROKER_CERT_FILE"], env["BROKER_CERT_KEY_FILE"])
    req = urllib.request.Request(url, data=body, method="PUT" if body is not None else "GET")
    req.add_header("Authorization", auth.split(": ", 1)[1])
    with urllib.request.urlopen(req, timeout=20, context=ctx) as resp:
        return bytes(resp.read())


@pytest.fixture
def data(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    yield tmp_path / "data"
    subprocess.run(
        ["make", "--no-print-directory", "down", f"DATA={tmp_path / 'data'}"],
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )


def test_secure_cluster_with_gazctl_and_the_gateway(data: pathlib.Path) -> None:
    out = make("up", data)
    processes = devcluster.read_state(data)
    assert [p.name for p in processes] == ["etcd", "broker-0", "broker-1", "broker-2"]
    brokers = processes[1:]
    assert all(p.endpoint.startswith("https://127.0.0.1:") for p in brokers)
    assert all(p.http.startswith("https://127.0.0.1:") for p in brokers)
    env = env_of(data)
    # What up printed is what env holds (secrets elided on screen).
    for key in ("BROKER_ADDRESS", "BROKER_TRUSTED_CA_FILE", "BROKER_CERT_FILE"):
        assert f"export {key}={env[key]}" in out, key
    assert env["BROKER_ADDRESS"] == brokers[0].endpoint
    assert "export BROKER_AUTH_KEYS=..." in out and env["BROKER_AUTH_KEYS"] not in out
    assert (data / "tls" / "auth-keys").stat().st_mode & 0o077 == 0
    # Nothing secret on a command line (what `ps` shows any local user).
    etcd_password = (data / "tls" / "etcd-password").read_text().strip()
    for p in processes:
        assert env["BROKER_AUTH_KEYS"] not in " ".join(p.argv)
        assert etcd_password not in " ".join(p.argv)
    assert all("--broker.auth-keys-file" in p.argv for p in brokers)
    for name in ("etcd-password", "etcd-root-password"):
        assert (data / "tls" / name).stat().st_mode & 0o077 == 0
    # etcd: TLS with client certificates, and auth on: no certificate, or no user, is refused.
    etcd = processes[0].endpoint
    assert etcd.startswith("https://127.0.0.1:") and env["ETCD_ADDRESS"] == etcd
    _etcd_refuses(env, etcd, etcd_password)
    assert (data / "tls" / "node.key").stat().st_mode & 0o077 == 0

    listing = gazctl(env, "journals", "list", "-l", "topic=logs").stdout
    assert [line.split()[0] for line in listing.splitlines()[1:]] == LOGS
    journal = LOGS[0]
    gazctl(env, "journals", "append", "-l", f"name={journal}", stdin="hello over mtls\n")
    got = gazctl(env, "journals", "read", "-l", f"name={journal}").stdout
    assert got == "hello over mtls\n"

    gateway = env["GATEWAY"]
    assert "--cacert" in out and f"{gateway}/" in out
    https(env, f"{gateway}/{journal}", b"hello over https\n")
    assert https(env, f"{gateway}/{journal}?offset=0") == b"hello over mtls\nhello over https\n"

    # Refused: no client certificate (at the handshake), and no credentials (by the broker).
    no_cert = {
        k: v for k, v in env.items() if k not in ("BROKER_CERT_FILE", "BROKER_CERT_KEY_FILE")
    }
    refused = gazctl(no_cert, "journals", "list", ok=False)
    assert refused.returncode != 0 and "UNAVAILABLE" in refused.stderr, refused.stderr
    no_auth = {k: v for k, v in env.items() if k not in ("BROKER_AUTH_KEYS", "BROKER_AUTH_TOKEN")}
    refused = gazctl(no_auth, "journals", "list", ok=False)
    assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr, refused.stderr
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(
            f"{gateway}/debug/ready",
            timeout=10,
            context=ssl.create_default_context(cafile=env["BROKER_TRUSTED_CA_FILE"]),
        )

    out = make("down", data)
    assert "SIGKILL" not in out, out
    assert not any(devcluster.is_running(p) for p in processes)


def _etcd_refuses(env: dict[str, str], endpoint: str, password: str) -> None:
    """etcd answers the brokers' user with its certificate, and refuses anyone less."""
    import asyncio

    from gazette import keyspace

    tls = {
        "cert_file": env["ETCD_CERT_FILE"],
        "cert_key_file": env["ETCD_CERT_KEY_FILE"],
        "trusted_ca_file": env["ETCD_TRUSTED_CA_FILE"],
    }

    async def get(**kw: str) -> str:
        client = await keyspace.connect(keyspace.EtcdConfig(address=endpoint, **kw), call_timeout=5)
        try:
            await client.get(b"/gazette/")
            return "ok"
        except Exception as e:  # noqa: BLE001 (what kind of refusal is the finding)
            return type(e).__name__
        finally:
            await client.close()

    assert asyncio.run(get(**tls, username=env["ETCD_USERNAME"], password=password)) == "ok"
    assert asyncio.run(get(**tls)) != "ok"  # No user: auth on.
    assert asyncio.run(get(trusted_ca_file=tls["trusted_ca_file"])) != "ok"  # No certificate.
