"""gazctl against brokers serving mutual TLS, with Gazette's flags and variables.

An ``https://`` ``--broker.address`` is dialed with TLS: ``--broker.cert-file``
/ ``--broker.cert-key-file`` (``BROKER_CERT_FILE`` / ``BROKER_CERT_KEY_FILE``)
is presented and ``--broker.trusted-ca-file`` (``BROKER_TRUSTED_CA_FILE``)
verifies the brokers. Two broker processes require client certificates and
bearer tokens (``--broker.auth-keys``); gazctl signs its tokens with the keys.
"""

from __future__ import annotations

import base64
import json
import pathlib
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner, Result

from gazette.broker import testing
from gazette.broker.protocol import tlstesting
from gazette.gazctl import cli
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

KEYS = base64.b64encode(b"gazctl tls test key").decode()
SPECS = """\
name: gtls/
replication: 2
fragment:
  length: 1048576
  compression_codec: NONE
  stores:
  - file:///
  refresh_interval: 1s
children:
- name: gtls/a
"""

Gaz = Callable[..., Result]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tlstesting.Certs:
    return tlstesting.make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def cluster(
    etcd_server: ks_testing.EtcdServer,
    certs: tlstesting.Certs,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[testing.BrokerCluster]:
    with testing.running_cluster(
        etcd_server.endpoint,
        tmp_path_factory.mktemp("brokers"),
        brokers=2,
        tls=certs,
        extra_args=["--broker.auth-keys", KEYS],
    ) as c:
        yield c


@pytest.fixture(scope="module")
def gaz(cluster: testing.BrokerCluster, certs: tlstesting.Certs) -> Gaz:
    runner = CliRunner()
    base_env = {"BROKER_ADDRESS": cluster[1].endpoint, "BROKER_AUTH_KEYS": KEYS}

    def invoke(*args: str, input: str | bytes | None = None, ok: bool = True, **env: str) -> Result:
        result = runner.invoke(cli.gazctl, list(args), input=input, env={**base_env, **env})
        if ok:
            assert result.exit_code == 0, f"gazctl {' '.join(args)}: {result.output}"
        return result

    tls = certs.client_env()
    invoke("journals", "apply", input=SPECS, **tls)
    for _ in range(100):
        if invoke("journals", "append", "-l", "name=gtls/a", input=b"", ok=False, **tls).exit_code:
            continue
        break
    return invoke


def test_append_and_read_over_mtls_by_variables_and_flags(
    gaz: Gaz, certs: tlstesting.Certs
) -> None:
    gaz("journals", "append", "-l", "name=gtls/a", input=b"by variables\n", **certs.client_env())
    gaz("journals", "append", "-l", "name=gtls/a", *certs.client_args(), input=b"by flags\n")
    got = gaz("journals", "read", "-l", "name=gtls/a", **certs.client_env())
    assert got.stdout_bytes == b"by variables\nby flags\n"
    # With a route cache, gazctl dials the brokers' announced https:// endpoints itself.
    got = gaz("journals", "list", "-o", "json", "--broker.cache.size", "8", *certs.client_args())
    routes = json.loads(got.stdout)["journals"][0]["route"]
    assert all(ep.startswith("https://127.0.0.1:") for ep in routes["endpoints"])


def test_without_a_client_certificate_gazctl_fails_saying_so(
    gaz: Gaz, certs: tlstesting.Certs
) -> None:
    got = gaz("journals", "list", BROKER_TRUSTED_CA_FILE=str(certs.ca_file), ok=False)
    assert got.exit_code != 0
    assert "UNAVAILABLE" in got.output and "TLS" in got.output, got.output


def test_with_a_certificate_of_another_ca_gazctl_fails(
    gaz: Gaz, tmp_path: pathlib.Path, certs: tlstesting.Certs
) -> None:
    other = tlstesting.make_certs(tmp_path, name="other-ca")
    got = gaz("journals", "list", *other.client_args(), ok=False)
    assert got.exit_code != 0 and "UNAVAILABLE" in got.output, got.output
    # Trusting the right CA isn't enough with a foreign certificate.
    got = gaz(
        "journals", "list",
        "--broker.cert-file", str(other.client_cert_file),
        "--broker.cert-key-file", str(other.client_key_file),
        "--broker.trusted-ca-file", str(certs.ca_file),
        ok=False,
    )  # fmt: skip
    assert got.exit_code != 0 and "UNAVAILABLE" in got.output, got.output


def test_tls_files_that_do_not_load_are_usage_errors(
    gaz: Gaz, tmp_path: pathlib.Path, certs: tlstesting.Certs
) -> None:
    got = gaz(
        "journals", "list", "--broker.trusted-ca-file", str(tmp_path / "missing.pem"), ok=False
    )
    assert got.exit_code == 2
    assert "--broker.trusted-ca-file" in got.output and "missing.pem" in got.output
    got = gaz("journals", "list", "--broker.cert-file", str(certs.client_cert_file), ok=False)
    assert got.exit_code == 2 and "go together" in got.output


def test_help_names_gazettes_tls_flags_and_variables(gaz: Gaz) -> None:
    got = gaz("journals", "list", "--help")
    for text in (
        "--broker.cert-file",
        "BROKER_CERT_FILE",
        "--broker.cert-key-file",
        "BROKER_CERT_KEY_FILE",
        "--broker.trusted-ca-file",
        "BROKER_TRUSTED_CA_FILE",
    ):
        assert text in got.output, text
