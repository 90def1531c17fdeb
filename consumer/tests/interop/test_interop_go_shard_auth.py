"""Consumer tokens between Gazette's Go code (v0.103) and ours, both ways.

Our consumer process runs with ``--consumer.auth-keys`` (its shards disabled:
nothing is consumed). Go's gazctl, as its users run it, signs a token per
request from ``CONSUMER_AUTH_KEYS`` (Go's ``mainboilerplate.AddressConfig``)
or sends ``CONSUMER_AUTH_TOKEN`` as it is. The tokens must be byte-compatible
both ways: Go's signed ones verify here, ours limit Go's requests to their
selector, and refusals reach the Go user with their reason.

The other way round, ``gazette-consumer`` (``go/consumer``: Gazette's
runconsumer, shards disabled) started with the same keys verifies what our
gazctl signs, limits a token we mint to its selector, and refuses the rest.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator

import interop_go
import pytest

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import auth
from gazette.broker.server import testing as server_testing
from gazette.consumer import testing as consumer_testing
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

KEY = base64.b64encode(b"shared by Go's gazctl and us").decode()
OTHER_KEY = base64.b64encode(b"somebody else's key").decode()
Cap = auth.Capability
SOURCE = "gosa/in"
PREFIX = "/gazette/consumers/go-shard-auth"

SHARDS_YAML = f"""\
common:
  disable: true
  max_txn_duration: 1s
  sources:
  - journal: {SOURCE}
shards:
- id: shard-000
  labels:
  - name: tier
    value: gold
- id: shard-001
  labels:
  - name: tier
    value: lead
"""


@dataclasses.dataclass(frozen=True)
class Endpoints:
    consumer: str
    broker: str


@pytest.fixture(scope="module")
def go_gazctl() -> pathlib.Path:
    if shutil.which("go") is None:
        pytest.skip("`go` is not on PATH: the Go interop tests need a Go toolchain")
    try:
        return interop_go.build_gazctl()
    except interop_go.BuildError as e:
        pytest.fail(str(e))


@pytest.fixture
async def consumer(
    etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[Endpoints]:
    """Our consumer process requiring tokens of KEY, and its broker."""
    async with server_testing.InProcessCluster(
        etcd_server.endpoint, work_dir=tmp_path, brokers=1
    ) as c:
        await c.apply(
            testing.journal_spec(
                SOURCE, labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]
            )
        )
        args = consumer_testing.argv(
            etcd=etcd_server.endpoint,
            broker=c[0].endpoint,
            prefix=PREFIX,
            extra=["--consumer.auth-keys", KEY],
        )
        try:
            async with consumer_testing.serving(args, consumer_testing.DisabledShards()) as srv:
                yield Endpoints(srv.endpoint, c[0].endpoint)
        finally:
            await asyncio.to_thread(ks_testing.wipe_prefix, etcd_server.endpoint, PREFIX + "/")


async def gazctl(
    binary: pathlib.Path, to: Endpoints, *args: str, ok: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """Go's gazctl with only the given CONSUMER_* credentials in its environment.

    (``shards apply`` also checks, through the brokers, that the source journals exist.)
    """
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONSUMER_", "BROKER_"))}
    try:
        proc = await asyncio.to_thread(
            subprocess.run,
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            env={**clean, "CONSUMER_ADDRESS": to.consumer, "BROKER_ADDRESS": to.broker, **env},
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"Go gazctl {' '.join(args)} timed out: {e.stderr!r}") from e
    if ok:
        assert proc.returncode == 0, f"Go gazctl {' '.join(args)}: {proc.stderr[-2000:]}"
    else:
        assert proc.returncode != 0, f"Go gazctl {' '.join(args)} succeeded: {proc.stdout}"
    return proc


def listed(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """Shard IDs of `gazctl shards list` (a box-drawn table: │ ID │ STATUS │)."""
    ids = []
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells and cells[0].startswith("shard-"):
            ids.append(cells[0])
    return ids


def token(capability: int, selector: str = "", key: str = KEY) -> str:
    return auth.KeyedAuth(key).sign(auth.Claims(capability, pb.parse_selector(selector)), 600)


async def test_go_gazctl_signs_tokens_our_consumer_verifies(
    go_gazctl: pathlib.Path, consumer: Endpoints, tmp_path: pathlib.Path
) -> None:
    specs = tmp_path / "shards.yaml"
    specs.write_text(SHARDS_YAML)
    await gazctl(
        go_gazctl, consumer, "shards", "apply", "--specs", str(specs), CONSUMER_AUTH_KEYS=KEY
    )
    out = await gazctl(go_gazctl, consumer, "shards", "list", CONSUMER_AUTH_KEYS=KEY)
    assert listed(out) == ["shard-000", "shard-001"], out.stdout
    # A request selector: Go signs a token for what it asks (and we filter by both).
    out = await gazctl(
        go_gazctl, consumer, "shards", "list", "-l", "tier=gold", CONSUMER_AUTH_KEYS=KEY
    )
    assert listed(out) == ["shard-000"], out.stdout


async def test_our_tokens_limit_go_gazctl_and_refusals_name_the_reason(
    go_gazctl: pathlib.Path, consumer: Endpoints, tmp_path: pathlib.Path
) -> None:
    specs = tmp_path / "shards.yaml"
    specs.write_text(SHARDS_YAML)
    await gazctl(
        go_gazctl, consumer, "shards", "apply", "--specs", str(specs), CONSUMER_AUTH_KEYS=KEY
    )

    # A token we mint, sent by Go as it is: only what its selector selects.
    gold = token(Cap.LIST, "tier=gold")
    out = await gazctl(go_gazctl, consumer, "shards", "list", CONSUMER_AUTH_TOKEN=gold)
    assert listed(out) == ["shard-000"], out.stdout

    refusals = {
        "missing or empty Authorization token": {},
        "token signature is invalid": {"CONSUMER_AUTH_KEYS": OTHER_KEY},
        "authorization is missing required LIST capability": {
            "CONSUMER_AUTH_TOKEN": token(Cap.READ)
        },
    }
    for why, env in refusals.items():
        out = await gazctl(go_gazctl, consumer, "shards", "list", ok=False, **env)
        assert "Unauthenticated" in out.stderr and why in out.stderr, (why, out.stderr[-800:])


# -- The other way round: our gazctl against Gazette's own consumer process. --------------


@pytest.fixture(scope="module")
def go_consumer_binary() -> pathlib.Path:
    if shutil.which("go") is None:
        pytest.skip("`go` is not on PATH: the Go interop tests need a Go toolchain")
    try:
        return interop_go.build("gazette-consumer")
    except interop_go.BuildError as e:
        pytest.fail(str(e))


@pytest.fixture
async def go_consumer(
    go_consumer_binary: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[Endpoints]:
    """Gazette's consumer process (v0.103) requiring tokens of KEY, and its broker."""
    async with server_testing.InProcessCluster(
        etcd_server.endpoint, work_dir=tmp_path, brokers=1
    ) as c:
        await c.apply(
            testing.journal_spec(
                SOURCE, labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]
            )
        )
        port = ks_testing.free_port()
        endpoint = f"http://127.0.0.1:{port}"
        args = [
            "--consumer.zone", "local",
            "--consumer.id", "go-consumer-0",
            "--consumer.host", "127.0.0.1",
            "--consumer.port", str(port),
            "--consumer.auth-keys", KEY,
            "--broker.address", c[0].endpoint,
            "--etcd.address", etcd_server.endpoint,
            "--etcd.prefix", PREFIX,
            "--etcd.lease", "3s",
        ]  # fmt: skip
        log_path = tmp_path / "go-consumer.log"
        proc = _start(go_consumer_binary, args, log_path)
        try:
            async with asyncio.timeout(60):
                while True:  # Until its Shard API answers a signed List.
                    assert proc.poll() is None, log_path.read_text()[-3000:]
                    got = await our_gazctl(
                        Endpoints(endpoint, c[0].endpoint),
                        "shards", "list", ok=None, CONSUMER_AUTH_KEYS=KEY,
                    )  # fmt: skip
                    if got.returncode == 0:
                        break
                    await asyncio.sleep(0.3)
            yield Endpoints(endpoint, c[0].endpoint)
        finally:
            proc.kill()
            await asyncio.to_thread(proc.wait, 30)
            await asyncio.to_thread(ks_testing.wipe_prefix, etcd_server.endpoint, PREFIX + "/")


def _start(
    binary: pathlib.Path, args: list[str], log_path: pathlib.Path
) -> subprocess.Popen[bytes]:
    """``binary serve args`` with its output in ``log_path`` and no CONSUMER_/ETCD_ variables."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [*ks_testing.die_with_parent_argv("KILL"), str(binary), "serve", *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith(("CONSUMER_", "ETCD_"))},
        )


async def our_gazctl(
    to: Endpoints, *args: str, ok: bool | None = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """Our gazctl (``python -m gazette.gazctl``); ``ok=None`` accepts any exit."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONSUMER_", "BROKER_"))}
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "gazette.gazctl", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "CONSUMER_ADDRESS": to.consumer, "BROKER_ADDRESS": to.broker, **env},
        check=False,
    )
    if ok is True:
        assert proc.returncode == 0, f"our gazctl {' '.join(args)}: {proc.stderr[-2000:]}"
    elif ok is False:
        assert proc.returncode != 0, f"our gazctl {' '.join(args)} succeeded: {proc.stdout}"
    return proc


def our_listed(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """Shard IDs of our `gazctl shards list` (columns split by spaces)."""
    return [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("shard-")]


async def test_go_consumer_verifies_the_tokens_our_gazctl_signs(
    go_consumer: Endpoints, tmp_path: pathlib.Path
) -> None:
    specs = tmp_path / "shards.yaml"
    specs.write_text(SHARDS_YAML)
    await our_gazctl(go_consumer, "shards", "apply", "--specs", str(specs), CONSUMER_AUTH_KEYS=KEY)
    out = await our_gazctl(go_consumer, "shards", "list", CONSUMER_AUTH_KEYS=KEY)
    assert our_listed(out) == ["shard-000", "shard-001"], out.stdout
    out = await our_gazctl(go_consumer, "shards", "list", "-l", "tier=gold", CONSUMER_AUTH_KEYS=KEY)
    assert our_listed(out) == ["shard-000"], out.stdout

    # A token we mint limits Go's consumer to its selector.
    out = await our_gazctl(
        go_consumer, "shards", "list", CONSUMER_AUTH_TOKEN=token(Cap.LIST, "tier=gold")
    )
    assert our_listed(out) == ["shard-000"], out.stdout

    for env in ({"CONSUMER_AUTH_KEYS": OTHER_KEY}, {"CONSUMER_AUTH_TOKEN": token(Cap.READ)}):
        out = await our_gazctl(go_consumer, "shards", "list", ok=False, **env)
        assert "UNAUTHENTICATED" in out.stderr + out.stdout, (env, out.stderr[-800:])
