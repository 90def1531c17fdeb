"""Flag / environment parsing of ``python -m gazette.broker``."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from gazette.broker.server import config


def test_defaults_are_gazettes() -> None:
    cfg = config.parse([], env={})
    assert cfg.broker.zone == "local"
    assert cfg.broker.limit == 1024
    assert cfg.broker.min_append_rate == 65536
    assert cfg.broker.max_replication == 9
    assert cfg.etcd.prefix == "/gazette/cluster"
    assert cfg.etcd.lease_s == 20.0
    assert cfg.broker.id  # A petname was chosen.
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.broker.zone = "x"  # type: ignore[misc]


def test_flags_win_over_env_which_wins_over_defaults() -> None:
    env = {
        "BROKER_ZONE": "from-env",
        "ETCD_LEASE_TTL": "1m30s",
        "BROKER_WATCH_DELAY": "15ms",
        "BROKER_ID": "env-id",
    }
    cfg = config.parse(["--broker.zone", "from-flag", "--debug.port", "9000"], env=env)
    assert cfg.broker.zone == "from-flag"
    assert cfg.broker.id == "env-id"
    assert cfg.etcd.lease_s == 90.0
    assert cfg.broker.watch_delay_s == pytest.approx(0.015)
    assert cfg.broker.http_port == 9000


def test_bad_values_are_rejected() -> None:
    with pytest.raises(SystemExit):
        config.parse(["--etcd.lease", "soon"], env={})
    with pytest.raises(SystemExit):
        config.parse(["--etcd.prefix", "/trailing/"], env={})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--broker.id", "b0"],
            '--broker.id "b0": ProcessSpec.Id.Suffix: invalid length (2; expected 4 <= length <= 128)',
        ),
        (
            ["--broker.id", "bad#id"],
            '--broker.id "bad#id": ProcessSpec.Id.Suffix: not a valid token (bad#id)',
        ),
        (
            ["--broker.zone", ""],
            '--broker.zone "": ProcessSpec.Id.Zone: invalid length (0; expected 1 <= length <= 32)',
        ),
        (
            ["--broker.zone", "us east"],
            '--broker.zone "us east": ProcessSpec.Id.Zone: not a valid token (us east)',
        ),
        (
            ["--broker.host", "a b"],
            '--broker.host "a b": ProcessSpec.Endpoint: '
            'parse "http://a b:0": invalid character " " in host name',
        ),
        (
            ["--broker.host", "a/b", "--broker.port", "8080"],
            '--broker.host "a/b": ProcessSpec.Endpoint: not a host name or IP address '
            '(endpoint http://a/b:8080 names host "a")',
        ),
        (
            ["--broker.host", "host:5"],
            '--broker.host "host:5": ProcessSpec.Endpoint: '
            "a host with ':' must be an IPv6 address (the port is --broker.port)",
        ),
        (["--broker.port", "-1"], "--broker.port -1: invalid port (expected 0 <= port <= 65535)"),
        (
            ["--broker.limit", "200000"],
            "--broker.limit 200000: BrokerSpec: invalid JournalLimit "
            "(200000; expected 0 <= JournalLimit <= 131072)",
        ),
    ],
)
def test_bad_broker_spec_is_one_line_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        config.parse(["--broker.host", "127.0.0.1", *argv], env={})
    assert str(exc.value) == message


def test_bad_broker_spec_from_the_environment_is_refused() -> None:
    with pytest.raises(SystemExit, match=r'^--broker\.id "b0": ProcessSpec\.Id\.Suffix: '):
        config.parse(["--broker.host", "127.0.0.1"], env={"BROKER_ID": "b0"})


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "broker-0.gazette.svc", "h_1"])
def test_good_broker_specs_parse(host: str) -> None:
    cfg = config.parse(
        ["--broker.host", host, "--broker.id", "b000", "--broker.zone", "zone-a.1"], env={}
    )
    assert cfg.broker.id == "b000"
    assert cfg.broker.endpoint.startswith("http://")


def test_broker_with_invalid_id_exits_before_connecting() -> None:
    # Before this check, such a broker started, reported ready and re-announced in a
    # loop forever, while no journal ever got a primary.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gazette.broker",
            "--broker.id",
            "b0",
            "--broker.host",
            "127.0.0.1",
            # Never dialled: the flags are refused first.
            "--etcd.address",
            "http://127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        '--broker.id "b0": ProcessSpec.Id.Suffix: invalid length (2; expected 4 <= length <= 128)'
    ]


def test_help_names_every_flag_and_variable() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gazette.broker", "--help"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    for flag in (
        "--broker.zone",
        "--broker.port",
        "--etcd.address",
        "--etcd.prefix",
        "--broker.spool-dir",
        "--broker.http-port",
        "BROKER_MIN_APPEND_RATE",
    ):
        assert flag in out


def test_help_states_each_default_once() -> None:
    parser = config.build_parser(env={})
    helps = {a.dest: a.help or "" for a in parser._actions if a.dest != "help"}
    for dest, text in helps.items():
        assert text.count("(default:") == 1, (dest, text)
    assert helps["broker.id"] == (
        "Unique suffix of this broker within its zone: 4-128 letters, digits or -_+/."
        " (default: a random petname) [$BROKER_ID]"
    )
    assert helps["broker.zone"].endswith("[$BROKER_ZONE] (default: local)")
    assert helps["broker.watch_delay_s"].endswith("(default: 30ms)")
    assert helps["etcd.lease_s"].endswith("(default: 20s)")
    assert helps["broker.auto_suspend"].endswith("(default: false)")
    # The rendered help has no trace of argparse's own default suffix either.
    out = " ".join(parser.format_help().split())
    assert "(default: )" not in out
    assert out.count("(default:") == len(helps)


def test_help_shows_a_default_set_by_the_environment() -> None:
    parser = config.build_parser(env={"BROKER_ID": "bob", "BROKER_ZONE": "local"})
    helps = {a.dest: a.help or "" for a in parser._actions}
    assert helps["broker.id"] == (
        "Unique suffix of this broker within its zone: 4-128 letters, digits or -_+/."
        " [$BROKER_ID] (default: bob, from $BROKER_ID)"
    )
    assert helps["broker.zone"].endswith("(default: local, from $BROKER_ZONE)")


def test_auth_keys_by_flag_or_variable_are_checked_and_never_shown() -> None:
    keys = "c2VjcmV0LW9uZQ==, c2VjcmV0LXR3bw== AA=="
    assert config.parse([], env={}).broker.auth_keys == ""
    assert config.parse(["--broker.auth-keys", keys], env={}).broker.auth_keys == keys
    cfg = config.parse([], env={"BROKER_AUTH_KEYS": keys})
    assert cfg.broker.auth_keys == keys
    assert "c2VjcmV0" not in repr(cfg)  # Configs are logged; keys are not.
    parser = config.build_parser(env={"BROKER_AUTH_KEYS": keys})
    help_text = " ".join(parser.format_help().split())
    assert "c2VjcmV0" not in help_text and "(set by $BROKER_AUTH_KEYS)" in help_text
    for bad, message in (
        ("AA==", "--broker.auth-keys: at least one key must be provided"),
        ("c2VjcmV0 not*base64", "--broker.auth-keys: failed to decode key at index 1: "),
    ):
        with pytest.raises(SystemExit) as e:
            config.parse(["--broker.auth-keys", bad], env={})
        assert str(e.value).startswith(message), e.value


def test_a_boolean_flag_alone_switches_it_on() -> None:
    assert config.parse(["--broker.auto-suspend"], env={}).broker.auto_suspend is True
    assert config.parse(["--broker.auto-suspend=false"], env={}).broker.auto_suspend is False
    assert config.parse(["--broker.auto-suspend", "true"], env={}).broker.auto_suspend is True


def test_debug_token_required_needs_keys() -> None:
    with pytest.raises(SystemExit) as e:
        config.parse(["--broker.debug-token-required"], env={})
    assert str(e.value) == (
        "--broker.debug-token-required needs --broker.auth-keys or --broker.auth-keys-file:"
        " without keys no token can be checked"
    )
    key = "a2V5"
    cfg = config.parse(["--broker.debug-token-required", "--broker.auth-keys", key], env={})
    assert cfg.broker.debug_token_required


def test_max_connections_is_at_least_one() -> None:
    assert config.parse([], env={}).broker.max_connections == 4096
    assert config.parse(["--broker.max-connections", "10"], env={}).broker.max_connections == 10
    with pytest.raises(SystemExit) as e:
        config.parse(["--broker.max-connections", "0"], env={})
    assert str(e.value) == "--broker.max-connections must be at least 1: 0"


def test_the_open_files_limit_is_raised_for_max_connections(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import resource

    from gazette.broker.server import process

    limits = {"now": (1024, 4096)}
    monkeypatch.setattr(resource, "getrlimit", lambda _: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", lambda _, v: limits.update(now=v))
    cfg = config.parse(["--broker.max-connections", "1000"], env={}).broker
    process.ensure_open_files(cfg.max_connections, 2)
    assert limits["now"] == (3024, 4096)  # 2 ports x 1000 + the broker's own.
    assert not caplog.records
    cfg = config.parse(["--broker.max-connections", "4096"], env={}).broker
    process.ensure_open_files(cfg.max_connections, 2)
    assert limits["now"] == (4096, 4096)
    assert "may need 9216 open files, over the limit of 4096" in caplog.text
