"""gazctl against brokers with ``--broker.auth-keys``, with Gazette's flags and variables.

``--broker.auth-keys`` / ``BROKER_AUTH_KEYS`` sign a token per request;
``--broker.auth-token`` / ``BROKER_AUTH_TOKEN`` send one; ours,
``--broker.auth-token-file`` / ``BROKER_AUTH_TOKEN_FILE``, read it from a file.
A cluster of broker processes over the real etcd, all with the same keys.
"""

from __future__ import annotations

import base64
import json
import pathlib
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner, Result

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import auth
from gazette.gazctl import cli
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.integration

KEYS = base64.b64encode(b"gazctl test key one").decode()
SPECS = """\
name: gauth/
replication: 1
fragment:
  length: 1048576
  compression_codec: NONE
  stores:
  - file:///
  refresh_interval: 1s
children:
- name: gauth/a
  labels:
  - name: topic
    value: a
- name: gauth/b
  labels:
  - name: topic
    value: b
"""

Gaz = Callable[..., Result]


def token(capability: int, selector: str = "") -> str:
    return auth.KeyedAuth(KEYS).sign(auth.Claims(capability, pb.parse_selector(selector)), 600)


@pytest.fixture(scope="module")
def cluster(
    etcd_server: ks_testing.EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[testing.BrokerCluster]:
    with testing.running_cluster(
        etcd_server.endpoint,
        tmp_path_factory.mktemp("brokers"),
        brokers=2,
        extra_args=["--broker.auth-keys", KEYS],
    ) as c:
        yield c


@pytest.fixture(scope="module")
def gaz(cluster: testing.BrokerCluster) -> Gaz:
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None, ok: bool = True, **env: str) -> Result:
        result = runner.invoke(
            cli.gazctl, list(args), input=input, env={"BROKER_ADDRESS": cluster[0].endpoint, **env}
        )
        if ok:
            assert result.exit_code == 0, f"gazctl {' '.join(args)}: {result.output}"
        return result

    keys = ("--broker.auth-keys", KEYS)
    invoke("journals", "apply", *keys, input=SPECS)
    for name in ("gauth/a", "gauth/b"):
        for _ in range(100):
            got = invoke("journals", "append", *keys, "-l", f"name={name}", input=b"", ok=False)
            if got.exit_code == 0:
                break
        invoke("journals", "append", *keys, "-l", f"name={name}", input=f"{name}\n".encode())
    return invoke


def _listed(result: Result) -> list[str]:
    return sorted(j["spec"]["name"] for j in json.loads(result.stdout).get("journals", []))


def test_without_credentials_requests_are_refused_with_the_reason(gaz: Gaz) -> None:
    got = gaz("journals", "list", ok=False)
    assert got.exit_code != 0
    assert "UNAUTHENTICATED" in got.output and "missing or empty Authorization token" in got.output
    got = gaz("journals", "list", "--broker.auth-token", token(auth.Capability.READ), ok=False)
    assert "authorization is missing required LIST capability" in got.output


def test_keys_by_flag_or_variable(gaz: Gaz) -> None:
    got = gaz("journals", "list", "-o", "json", "--broker.auth-keys", KEYS)
    assert _listed(got) == ["gauth/a", "gauth/b"]
    got = gaz("journals", "read", "-l", "name:prefix=gauth/", BROKER_AUTH_KEYS=KEYS)
    assert got.stdout_bytes == b"gauth/a\ngauth/b\n"
    got = gaz("journals", "fragments", "-l", "topic=a", "-o", "json", BROKER_AUTH_KEYS=KEYS)
    assert "gauth/a" in got.stdout and "gauth/b" not in got.stdout
    # Keys win over a token, as in Go's gazctl.
    got = gaz(
        "journals", "list", "-o", "json", "--broker.auth-token", "junk", "--broker.auth-keys", KEYS
    )
    assert _listed(got) == ["gauth/a", "gauth/b"]


def test_a_token_limits_what_gazctl_sees(gaz: Gaz) -> None:
    only_a = token(auth.Capability.ALL, "topic=a")
    got = gaz("journals", "list", "-o", "json", "--broker.auth-token", only_a)
    assert _listed(got) == ["gauth/a"]
    got = gaz("journals", "read", "-l", "name:prefix=gauth/", BROKER_AUTH_TOKEN=only_a)
    assert got.stdout_bytes == b"gauth/a\n"
    gaz("journals", "append", "-l", "name=gauth/a", BROKER_AUTH_TOKEN=only_a, input=b"more\n")
    got = gaz("journals", "read", "-l", "name=gauth/a", BROKER_AUTH_TOKEN=only_a)
    assert got.stdout_bytes == b"gauth/a\nmore\n"
    # gauth/b is not there for this token: nothing selected, nothing appended.
    got = gaz(
        "journals", "append", "-l", "name=gauth/b", BROKER_AUTH_TOKEN=only_a, input=b"x\n", ok=False
    )
    assert got.exit_code != 0
    got = gaz("journals", "read", "-l", "name=gauth/b", BROKER_AUTH_KEYS=KEYS)
    assert got.stdout_bytes == b"gauth/b\n"


def test_a_token_from_a_file(gaz: Gaz, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "token"
    path.write_text(token(auth.Capability.LIST, "topic=b") + "\n")
    got = gaz("journals", "list", "-o", "json", "--broker.auth-token-file", str(path))
    assert _listed(got) == ["gauth/b"]
    got = gaz("journals", "list", "-o", "json", BROKER_AUTH_TOKEN_FILE=str(path))
    assert _listed(got) == ["gauth/b"]
    # A token given outright wins over the file.
    got = gaz(
        "journals", "list", "-o", "json",
        "--broker.auth-token", token(auth.Capability.LIST),
        "--broker.auth-token-file", str(path),
    )  # fmt: skip
    assert _listed(got) == ["gauth/a", "gauth/b"]

    got = gaz("journals", "list", "--broker.auth-token-file", str(tmp_path / "missing"), ok=False)
    assert got.exit_code == 2
    assert "--broker.auth-token-file" in got.output and "No such file" in got.output
    path.write_text("  \n")
    got = gaz("journals", "list", "--broker.auth-token-file", str(path), ok=False)
    assert got.exit_code == 2 and "must hold one token" in got.output


def test_bad_keys_are_a_usage_error(gaz: Gaz) -> None:
    got = gaz("journals", "list", "--broker.auth-keys", "not*base64", ok=False)
    assert got.exit_code == 2
    assert "--broker.auth-keys" in got.output and "failed to decode key at index 0" in got.output


def test_help_names_gazettes_flags_and_variables(gaz: Gaz) -> None:
    got = gaz("journals", "list", "--help")
    for text in (
        "--broker.auth-keys",
        "BROKER_AUTH_KEYS",
        "--broker.auth-token",
        "BROKER_AUTH_TOKEN",
        "--broker.auth-token-file",
        "BROKER_AUTH_TOKEN_FILE",
    ):
        assert text in got.output, text
