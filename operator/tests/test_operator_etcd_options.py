"""The operator's ``--etcd.*`` options: the brokers' flags, and a TLS + auth etcd in use."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
from collections.abc import Iterator

import pytest
from operator_objects import journal

from gazette import keyspace
from gazette.broker import protocol as pb
from gazette.keyspace import testing as etcd_testing
from gazette.operator import config, reconcile, store

USER, PASSWORD, ROOT = "operator", "op-secret", "/gazette/cluster"
TOKEN_TTL = 2


def test_every_etcd_flag_and_variable(tmp_path: pathlib.Path) -> None:
    files = {n: tmp_path / n for n in ("c.crt", "c.key", "ca.crt", "pw")}
    for f in files.values():
        f.write_text("x\n")
    cfg = config.parse_args(
        [
            "--all-namespaces",
            "--etcd.address=https://etcd-0:2379,https://etcd-1:2379",
            f"--etcd.cert-file={files['c.crt']}",
            f"--etcd.cert-key-file={files['c.key']}",
            f"--etcd.trusted-ca-file={files['ca.crt']}",
            "--etcd.username=op",
        ],
        environ={"ETCD_PASSWORD_FILE": str(files["pw"])},
    )
    assert cfg.etcd == keyspace.EtcdConfig(
        address="https://etcd-0:2379,https://etcd-1:2379",
        cert_file=str(files["c.crt"]),
        cert_key_file=str(files["c.key"]),
        trusted_ca_file=str(files["ca.crt"]),
        username="op",
        password_file=str(files["pw"]),
    )
    assert cfg.etcd_address == cfg.etcd.address
    assert [e.target for e in cfg.etcd.endpoints] == ["etcd-0:2379", "etcd-1:2379"]
    env = {
        "ETCD_ADDRESS": "http://etcd:2379",
        "ETCD_USERNAME": "u",
        "ETCD_PASSWORD": "from-env",
    }
    cfg = config.parse_args(["--all-namespaces"], environ=env)
    assert (cfg.etcd.address, cfg.etcd.username, cfg.etcd.password) == (
        "http://etcd:2379",
        "u",
        "from-env",
    )
    assert "from-env" not in repr(cfg)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--etcd.cert-file=/x.crt"], "--etcd.cert-file: needs --etcd.cert-key-file too"),
        (
            ["--etcd.address=https://e:1", "--etcd.trusted-ca-file=/nowhere/ca.crt"],
            "--etcd.trusted-ca-file: no such file: /nowhere/ca.crt",
        ),
        (["--etcd.address=https://a:1,http://b:2"], "--etcd.address: mixes https://"),
        (["--etcd.password=p"], "--etcd.password: needs --etcd.username"),
    ],
)
def test_bad_etcd_options_exit_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        config.parse_args(["--all-namespaces", *argv], environ={})
    assert info.value.code == 2
    assert f"error: {message}" in capsys.readouterr().err


def test_help_never_shows_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config.parse_args(["--help"], environ={"ETCD_PASSWORD": "hidden-value"})
    out = capsys.readouterr().out
    assert "--etcd.password-file" in out and "ETCD_TRUSTED_CA_FILE" in out
    assert "hidden-value" not in out


@pytest.fixture(scope="module")
def secured_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[etcd_testing.EtcdServer]:
    tls = etcd_testing.make_tls(tmp_path_factory.mktemp("pki"))
    server = etcd_testing.EtcdServer(
        work_dir=tmp_path_factory.mktemp("etcd"), tls=tls, auth_token_ttl=TOKEN_TTL
    )
    with server:
        server.enable_auth({USER: (PASSWORD, "/gazette/")})
        yield server


@pytest.mark.integration
async def test_the_operator_reconciles_into_a_tls_and_auth_etcd(
    secured_etcd: etcd_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    """Flags as a Deployment gives them (the password from a mounted Secret's file), the
    connection the runner makes, its readiness check and reconciles, before and after
    etcd forgot the operator's token."""
    secret = tmp_path / "etcd-password"
    secret.write_text(PASSWORD + "\n")
    want = secured_etcd.config(USER, PASSWORD)
    cfg = config.parse_args(
        [
            "--all-namespaces",
            f"--etcd.address={want.address}",
            f"--etcd.cert-file={want.cert_file}",
            f"--etcd.cert-key-file={want.cert_key_file}",
            f"--etcd.trusted-ca-file={want.trusted_ca_file}",
            f"--etcd.prefix={ROOT}",
        ],
        environ={"ETCD_USERNAME": USER, "ETCD_PASSWORD_FILE": str(secret)},
    )
    assert cfg.etcd == dataclasses.replace(want, password="", password_file=str(secret))
    client = await keyspace.connect(cfg.etcd)  # As runner.run connects.
    try:
        specs = store.EtcdSpecStore(client)
        await specs.check(ROOT)  # The /readyz probe of etcd.
        rcfg = cfg.handlers.reconcile
        outcome = await reconcile.reconcile(journal(), reconcile.JOURNALS, rcfg, specs)
        assert outcome.reason is reconcile.Reason.APPLIED, outcome.message
        assert outcome.wrote

        await asyncio.sleep(2 * TOKEN_TTL + 1)  # etcd forgets the idle token.
        changed = journal(generation=2)
        changed["spec"]["replication"] = 2
        outcome = await reconcile.reconcile(changed, reconcile.JOURNALS, rcfg, specs)
        assert outcome.reason is reconcile.Reason.APPLIED, outcome.message
        stored = await specs.get(ROOT, "examples/logs/one")
        assert stored is not None
        assert pb.JournalSpec.FromString(stored.value).replication == 2
        await specs.check(ROOT)
    finally:
        await client.delete_prefix(f"{ROOT}/".encode())
        await client.close()

    # A wrong password is refused where the runner connects, naming the flags.
    wrong = dataclasses.replace(cfg.etcd, password="nope", password_file="")
    with pytest.raises(keyspace.errors.EtcdAuthError, match=r"--etcd\.username"):
        await keyspace.connect(wrong)


@pytest.mark.integration
def test_a_wrong_etcd_password_exits_with_one_line(
    secured_etcd: etcd_testing.EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    from gazette.operator import __main__ as operator_main

    want = secured_etcd.config(USER, "not-the-password")
    argv = [
        "--all-namespaces",
        f"--etcd.address={want.address}",
        f"--etcd.cert-file={want.cert_file}",
        f"--etcd.cert-key-file={want.cert_key_file}",
        f"--etcd.trusted-ca-file={want.trusted_ca_file}",
        f"--etcd.username={USER}",
        "--etcd.password=not-the-password",
    ]
    with caplog.at_level("ERROR", logger="gazette.operator"):
        assert operator_main.main(argv) == 1
    refusals = [r for r in caplog.records if r.name == "gazette.operator"]
    assert len(refusals) == 1 and "--etcd.username" in refusals[0].getMessage()
    assert refusals[0].exc_info is None
