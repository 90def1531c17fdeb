"""``gazctl shards`` against a consumer started with ``--consumer.auth-keys``.

Real parts: etcd, an in-process broker, an in-process consumer process whose
``consumer.Shard`` API requires tokens (its shards are disabled: nothing is
consumed). gazctl runs as a user runs it (click, in a worker thread), with
Gazette's ``--consumer.auth-keys`` / ``--consumer.auth-token`` (and our
``--consumer.auth-token-file``), by flag or environment variable.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import auth
from gazette.broker.server import testing as server_testing
from gazette.consumer import protocol as pc
from gazette.consumer import testing as consumer_testing
from gazette.gazctl import cli, shards_api
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEY = base64.b64encode(b"gazctl shards auth key").decode()
SIGNER = auth.KeyedAuth(KEY)
Cap = auth.Capability
SOURCE = "gsa/in"
CONSUMERS = "/gazette/consumers/gazctl-shards-auth"

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
"""


@dataclasses.dataclass
class Env:
    broker: str
    consumer: str

    async def gaz(self, *args: str, ok: bool = True, **env: str) -> Result:
        full = {"BROKER_ADDRESS": self.broker, "CONSUMER_ADDRESS": self.consumer, **env}
        result = await asyncio.to_thread(
            CliRunner().invoke, cli.gazctl, list(args), env=full, catch_exceptions=False
        )
        if ok:
            assert result.exit_code == 0, f"gazctl {' '.join(args)}: {result.output}"
        else:
            assert result.exit_code != 0, f"gazctl {' '.join(args)} succeeded: {result.output}"
        return result


@pytest.fixture
async def env(etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path) -> AsyncIterator[Env]:
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
            prefix=CONSUMERS,
            extra=["--consumer.auth-keys", KEY],
        )
        try:
            async with consumer_testing.serving(args, consumer_testing.DisabledShards()) as srv:
                yield Env(c[0].endpoint, srv.endpoint)
        finally:
            # Leave etcd as we found it: the shards the tests applied.
            await asyncio.to_thread(ks_testing.wipe_prefix, etcd_server.endpoint, CONSUMERS + "/")


def token(capability: int, selector: str = "") -> str:
    return SIGNER.sign(auth.Claims(capability, pb.parse_selector(selector)), 600)


async def test_without_credentials_the_consumer_refuses_with_the_reason(env: Env) -> None:
    out = await env.gaz("shards", "list", ok=False)
    assert "List" in out.output and "UNAUTHENTICATED: missing or empty Authorization token" in (
        out.output
    )
    out = await env.gaz("shards", "list", "--consumer.auth-token", token(Cap.READ), ok=False)
    assert "authorization is missing required LIST capability" in out.output


async def test_keys_sign_each_request_by_flag_or_variable(env: Env, tmp_path: pathlib.Path) -> None:
    specs = tmp_path / "shards.yaml"
    specs.write_text(SHARDS_YAML)
    await env.gaz("shards", "apply", "--specs", str(specs), "--consumer.auth-keys", KEY)
    out = await env.gaz("shards", "list", CONSUMER_AUTH_KEYS=KEY)
    assert [line.split()[0] for line in out.output.splitlines()[1:]] == ["shard-000", "shard-001"]
    out = await env.gaz(
        "shards", "unassign", "-l", "id=shard-001", "--dry-run", CONSUMER_AUTH_KEYS=KEY
    )
    assert "would unassign" in out.output
    out = await env.gaz("shards", "list", "-o", "yaml", "--consumer.auth-keys", KEY)
    assert "shard-000" in out.output


async def test_a_token_limits_what_gazctl_sees_and_may_change(
    env: Env, tmp_path: pathlib.Path
) -> None:
    specs = tmp_path / "shards.yaml"
    specs.write_text(SHARDS_YAML)
    await env.gaz("shards", "apply", "--specs", str(specs), CONSUMER_AUTH_KEYS=KEY)
    gold = token(Cap.LIST | Cap.APPLY, "tier=gold")
    out = await env.gaz("shards", "list", "--consumer.auth-token", gold)
    assert [line.split()[0] for line in out.output.splitlines()[1:]] == ["shard-000"]
    # From a file (e.g. a mounted Secret), and by variable.
    path = tmp_path / "token"
    path.write_text(gold + "\n")
    out = await env.gaz("shards", "list", "--consumer.auth-token-file", str(path))
    assert [line.split()[0] for line in out.output.splitlines()[1:]] == ["shard-000"]
    out = await env.gaz("shards", "list", CONSUMER_AUTH_TOKEN_FILE=str(path))
    assert "shard-001" not in out.output
    # Unassign is authorized by id alone: a label selector grants none.
    by_id = token(Cap.LIST | Cap.APPLY, "id=shard-000")
    out = await env.gaz(
        "shards", "unassign", "-l", "id=shard-000", "--dry-run", CONSUMER_AUTH_TOKEN=gold, ok=False
    )
    assert "UNAUTHENTICATED: not authorized to shard-000" in out.output
    out = await env.gaz(
        "shards", "unassign", "-l", "id=shard-000", "--dry-run", CONSUMER_AUTH_TOKEN=by_id
    )
    assert "would unassign" in out.output


async def test_bad_credentials_are_usage_errors_naming_the_flag(
    env: Env, tmp_path: pathlib.Path
) -> None:
    out = await env.gaz("shards", "list", "--consumer.auth-keys", "!!", ok=False)
    assert out.exit_code == 2 and "'--consumer.auth-keys'" in out.output
    assert "failed to decode key at index 0" in out.output
    empty = tmp_path / "empty"
    empty.write_text("\n")
    out = await env.gaz("shards", "list", "--consumer.auth-token-file", str(empty), ok=False)
    assert out.exit_code == 2 and "'--consumer.auth-token-file'" in out.output
    assert "must hold one token" in out.output
    out = await env.gaz("shards", "list", "--help")
    for flag in ("--consumer.auth-keys", "--consumer.auth-token", "--consumer.auth-token-file"):
        assert flag in out.output
    for var in ("CONSUMER_AUTH_KEYS", "CONSUMER_AUTH_TOKEN", "CONSUMER_AUTH_TOKEN_FILE"):
        assert var in out.output


def test_each_request_asks_for_what_gazettes_client_asks() -> None:
    sc = shards_api.ShardClient(shards_api.ConsumerAddress("http://x:1", SIGNER))
    assert sc.address == "http://x:1" and sc.credentials is SIGNER

    def claims(method: str, request: Any) -> tuple[int, str]:
        c = sc._claims(method, request)
        return int(c.capability), pb.format_selector(c.selector)

    sel = pb.parse_selector("tier=gold")
    assert claims("List", pc.ListRequest(selector=sel)) == (Cap.LIST, "tier=gold")
    assert claims("Stat", pc.StatRequest(shard="s-1")) == (Cap.READ, "id=s-1")
    assert claims("GetHints", pc.GetHintsRequest(shard="s-1")) == (Cap.READ, "id=s-1")
    assert claims("Apply", pc.ApplyRequest()) == (Cap.APPLY, "")
    assert claims("Unassign", pc.UnassignRequest(shards=["b", "a"])) == (Cap.APPLY, "id in (a,b)")
    plain = shards_api.ShardClient("http://x:1")
    assert isinstance(plain.credentials, auth.NoopAuth)
