"""The operator's client side of TLS for Shards' lag: flags, environment, errors naming them.

``--broker.cert-file`` / ``--broker.cert-key-file`` / ``--broker.trusted-ca-file`` and the
same under ``--consumer.`` (gazctl's names, and their variables) become the TLS of lag's
calls; files that don't load stop the start naming the flag, and files that go bad under
a running operator leave each Shard's lag unknown naming it, until they load again.
(Lag over mutual TLS, end to end: ``e2e/test_operator_shard_lag.py``.)
"""

from __future__ import annotations

import pathlib
import shutil

import aetcd
import pytest

from gazette.broker import protocol as pb
from gazette.broker.protocol import dial, tlstesting
from gazette.consumer import protocol as pc
from gazette.operator import config, lag, mirrors, status


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tlstesting.Certs:
    return tlstesting.make_certs(tmp_path_factory.mktemp("tls"))


def test_no_flags_no_certificate_and_the_root_pool() -> None:
    cfg = config.parse_args(["--namespace=a"], environ={})
    assert cfg.handlers.lag.broker_tls == dial.TLS()
    assert cfg.handlers.lag.consumer_tls == dial.TLS()


def test_flags_and_environment_give_each_side_its_files(
    certs: tlstesting.Certs, tmp_path: pathlib.Path
) -> None:
    ccerts = certs.client_tls()
    other = tlstesting.make_ca(tmp_path, "consumers-ca")
    cert, key = other.issue("operator", server=False)
    cfg = config.parse_args(
        [
            "--namespace=a",
            f"--consumer.cert-file={cert}",
            f"--consumer.cert-key-file={key}",
            f"--consumer.trusted-ca-file={other.cert_file}",
        ],
        # The brokers' side from the environment, as the chart gives it.
        environ=certs.client_env(),
    )
    assert cfg.handlers.lag.broker_tls == ccerts
    assert cfg.handlers.lag.consumer_tls == dial.TLS(str(cert), str(key), str(other.cert_file))
    # A flag wins over its variable.
    cfg = config.parse_args(
        ["--namespace=a", f"--broker.trusted-ca-file={other.cert_file}"],
        environ=certs.client_env(),
    )
    assert cfg.handlers.lag.broker_tls.ca_file == str(other.cert_file)
    assert cfg.handlers.lag.broker_tls.cert_file == ccerts.cert_file


def test_a_ca_alone_trusts_without_presenting(certs: tlstesting.Certs) -> None:
    cfg = config.parse_args(
        ["--namespace=a"], environ={"CONSUMER_TRUSTED_CA_FILE": str(certs.ca_file)}
    )
    assert cfg.handlers.lag.consumer_tls == dial.TLS(ca_file=str(certs.ca_file))


def test_help_names_the_flags_and_their_variables(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config.parse_args(["--help"], environ={})
    text = " ".join(capsys.readouterr().out.split())
    for section in ("broker", "consumer"):
        for name in lag.TLS_FLAGS:
            var = f"{section}_{name}".upper().replace("-", "_")
            assert f"--{section}.{name} {var}" in text
            assert f"(env {var};" in text


def _bad(certs: tlstesting.Certs, tmp: pathlib.Path) -> dict[str, tuple[list[str], str]]:
    garbage = tmp / "garbage.pem"
    garbage.write_text("not a certificate\n")
    other = tlstesting.make_ca(tmp, "other-ca")
    _, other_key = other.issue("other", server=False)
    c, k, ca = certs.client_cert_file, certs.client_key_file, certs.ca_file
    return {
        "missing CA": (
            ["--broker.trusted-ca-file=/nonexistent/ca.crt"],
            "--broker.trusted-ca-file: reading /nonexistent/ca.crt: No such file or directory",
        ),
        "CA not PEM": (
            [f"--consumer.trusted-ca-file={garbage}"],
            f"--consumer.trusted-ca-file: TLS CA file {garbage} holds no usable certificate",
        ),
        "certificate without key": (
            [f"--consumer.cert-file={c}"],
            "--consumer.cert-key-file: a TLS certificate and its key go together",
        ),
        "key without certificate": (
            [f"--broker.cert-key-file={k}"],
            "--broker.cert-file: a TLS certificate and its key go together",
        ),
        "missing key": (
            [f"--broker.cert-file={c}", "--broker.cert-key-file=/nonexistent/k"],
            "--broker.cert-key-file: reading /nonexistent/k",
        ),
        "key of another certificate": (
            [f"--consumer.cert-file={c}", f"--consumer.cert-key-file={other_key}"],
            f"--consumer.cert-file: TLS certificate {c} and key {other_key} don't load as a pair",
        ),
        "good broker side, bad consumer side": (
            [
                f"--broker.cert-file={c}",
                f"--broker.cert-key-file={k}",
                f"--broker.trusted-ca-file={ca}",
                "--consumer.cert-file=/nonexistent/c",
                f"--consumer.cert-key-file={k}",
            ],
            "--consumer.cert-file: reading /nonexistent/c",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing CA",
        "CA not PEM",
        "certificate without key",
        "key without certificate",
        "missing key",
        "key of another certificate",
        "good broker side, bad consumer side",
    ],
)
def test_files_that_dont_load_stop_the_start_naming_the_flag(
    case: str,
    certs: tlstesting.Certs,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, message = _bad(certs, tmp_path)[case]
    with pytest.raises(SystemExit) as exit_:
        config.parse_args(["--namespace=a", *argv], environ={})
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_variable_that_doesnt_load_is_named_by_its_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        config.parse_args(["--namespace=a"], environ={"BROKER_CERT_FILE": "/nonexistent/c"})
    assert "--broker.cert-key-file: a TLS certificate and its key go together" in (
        capsys.readouterr().err
    )


def test_client_tls_names_the_flag() -> None:
    with pytest.raises(pb.TLSConfigError, match=r"^--consumer\.trusted-ca-file: reading /x") as e:
        lag.client_tls("consumer", ca_file="/x")
    assert e.value.path == "/x"
    assert lag.client_tls("broker") == dial.TLS()


async def test_files_gone_bad_leave_each_shards_lag_unknown_naming_the_flag(
    certs: tlstesting.Certs, tmp_path: pathlib.Path
) -> None:
    # Where a mounted Secret puts them: a rotation replaces the files under the operator.
    mounted = tmp_path / "client"
    shutil.copytree(certs.ca.directory, mounted)
    tls = lag.client_tls(
        "consumer",
        str(mounted / "client.crt"),
        str(mounted / "client.key"),
        str(mounted / "ca.crt"),
    )
    checker = lag.LagChecker(
        lag.LagConfig(broker_address="http://127.0.0.1:1", consumer_tls=tls),
        mirrors.Mirrors(aetcd.Client(host="127.0.0.1", port=1)),
        broker_root="/gazette/cluster",
    )
    targets = [lag.Target(f"uid-{i}", "/apps/a", f"shard-{i}", ["a/b"], None) for i in range(2)]
    assert {f.error for f in (await checker.check(targets)).values()} == {"NO_SHARD_PRIMARY"}

    (mounted / "ca.crt").write_text("half written\n")
    found = await checker.check(targets)
    assert set(found) == {"uid-0", "uid-1"}
    for one in found.values():
        assert one.total is None
        assert one.error.startswith(
            f"--consumer.trusted-ca-file: TLS CA file {mounted / 'ca.crt'} holds no usable"
        ), one.error

    # Written whole again: the next round goes on to ask.
    shutil.copy(certs.ca_file, mounted / "ca.crt")
    assert {f.error for f in (await checker.check(targets)).values()} == {"NO_SHARD_PRIMARY"}


async def test_files_gone_bad_within_a_round_end_that_shard_not_the_round(
    certs: tlstesting.Certs, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked good at the round's start, replaced before a primary's channel is made
    (a Secret updated meanwhile): that Stat's lag is unknown, naming the flag, and the
    round (the controller's task) goes on."""
    checker = lag.LagChecker(
        lag.LagConfig(broker_address="http://127.0.0.1:1", consumer_tls=certs.client_tls()),
        mirrors.Mirrors(aetcd.Client(host="127.0.0.1", port=1)),
        broker_root="/gazette/cluster",
    )
    monkeypatch.setattr(checker, "consumer_endpoint", lambda prefix, r: "https://127.0.0.1:1")
    gone = str(certs.client_key_file)

    def channel(endpoint: str, cfg: dial.DialConfig) -> None:
        assert cfg.tls == certs.client_tls()  # The consumers' side, as configured.
        raise pb.TLSConfigError(f"reading {gone}: No such file or directory", gone)

    monkeypatch.setattr(dial, "channel", channel)
    primary = status.Replica("zone-a", "consumer-0", 0, pc.ReplicaStatus.PRIMARY)
    targets = [
        lag.Target("uid-0", "/apps/a", "shard-0", ["a/b"], primary),
        lag.Target("uid-1", "/apps/a", "shard-1", ["a/b"], None),
    ]
    found = await checker.check(targets)
    assert found["uid-0"].error == (
        f"--consumer.cert-key-file: reading {gone}: No such file or directory"
    )
    assert found["uid-1"].error == "NO_SHARD_PRIMARY"
