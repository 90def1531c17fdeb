"""Gazette's own ``gazctl`` (Go, v0.103) against our consumer's token checks.

Our consumer process runs with ``--consumer.auth-keys`` (its shards disabled:
nothing is consumed). Go's gazctl, as its users run it, signs a token per
request from ``CONSUMER_AUTH_KEYS`` (Go's ``mainboilerplate.AddressConfig``)
or sends ``CONSUMER_AUTH_TOKEN`` as it is. The tokens must be byte-compatible
both ways: Go's signed ones verify here, ours limit Go's requests to their
selector, and refusals reach the Go user with their reason.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import pathlib
import shutil
import subprocess
from collections.abc import AsyncIterator

import interop_go
import pytest

from gazette.broker import client, testing
from gazette.broker import protocol as pb
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
) -> AsyncIterator[str]:
    """Our consumer process requiring tokens of KEY; yields its endpoint."""
    async with (
        server_testing.InProcessCluster(etcd_server.endpoint, work_dir=tmp_path, brokers=1) as c,
        client.JournalClient(client.ClientConfig(address=c[0].endpoint)) as jc,
    ):
        spec = testing.journal_spec(
            SOURCE, labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_JSON_LINES)]
        )
        await client.apply_journals(
            jc, pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec)])
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
