"""The operator's lag tokens: READ of one journal or shard, a minute long, from keys that rotate.

Tokens are checked the way a broker or consumer checks them (``KeyedAuth.verify`` with the
same keys, a capability, the expiry with its leeway), not by the signer's own account.
"""

from __future__ import annotations

import base64
import logging
import os
import pathlib
import time

import pytest

from gazette.broker import protocol as pb
from gazette.broker.protocol import auth
from gazette.operator import config, lag, lagauth

KEY_A = base64.b64encode(b"operator-lag-key-a").decode()
KEY_B = base64.b64encode(b"operator-lag-key-b").decode()


class Clock:
    """Starts at real time (pyjwt checks a token's first verification against the real
    clock; later ones, from KeyedAuth's cache, against this one), in whole seconds as
    tokens are; ``start`` keeps where it began."""

    def __init__(self) -> None:
        self.start = self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now


def token_of(metadata: auth.Metadata) -> str:
    ((key, value),) = metadata
    assert key == "authorization" and value.startswith("Bearer ")
    return value.removeprefix("Bearer ")


def signer(keys: str = KEY_A, clock: Clock | None = None) -> lagauth.LagAuthorizer:
    k = lagauth.Keys(keys, flag="--broker.auth-keys", clock=clock or Clock())
    k.refresh()
    return lagauth.LagAuthorizer(k)


def test_a_journal_token_grants_read_of_that_journal_for_a_minute() -> None:
    clock = Clock()
    # The journal client asks for its usual hour: the operator's tokens live a minute.
    md = signer(clock=clock).authorize(
        auth.journal_claims(auth.Capability.READ, "examples/lag/part-000"), auth.LIFETIME
    )
    broker = auth.KeyedAuth(KEY_A, clock=clock)
    claims = broker.verify(md, auth.Capability.READ)
    assert claims.capability == auth.Capability.READ
    assert pb.format_selector(claims.selector) == "name=examples/lag/part-000"
    assert (claims.issued_at, claims.expires_at) == (
        clock.start,
        clock.start + lagauth.TOKEN_LIFETIME,
    )
    # Its selector shows the broker this journal and no other.
    assert claims.allows(pb.label_set_ext(pb.JournalSpec(name="examples/lag/part-000")))
    assert not claims.allows(pb.label_set_ext(pb.JournalSpec(name="examples/lag/part-001")))
    # Nothing but READ.
    for cap in (auth.Capability.LIST, auth.Capability.APPEND, auth.Capability.APPLY,
                auth.Capability.REPLICATE):  # fmt: skip
        with pytest.raises(pb.AuthorizationError, match="missing required"):
            broker.verify(md, cap)


def test_a_shard_token_selects_the_shard_by_id() -> None:
    clock = Clock()
    md = signer(clock=clock).authorize(
        lagauth.shard_claims(auth.Capability.READ, "lag-count/part-000")
    )
    claims = auth.KeyedAuth(KEY_A, clock=clock).verify(md, auth.Capability.READ)
    assert pb.format_selector(claims.selector) == "id=lag-count/part-000"
    assert claims.expires_at == clock.start + lagauth.TOKEN_LIFETIME


def test_tokens_expire_after_their_minute() -> None:
    clock = Clock()
    md = signer(clock=clock).authorize(auth.journal_claims(auth.Capability.READ, "a/b"))
    broker = auth.KeyedAuth(KEY_A, clock=clock)
    broker.verify(md, auth.Capability.READ)
    clock.now = clock.start + lagauth.TOKEN_LIFETIME + auth.LEEWAY - 1
    broker.verify(md, auth.Capability.READ)  # Within the skew brokers tolerate.
    clock.now = clock.start + lagauth.TOKEN_LIFETIME + auth.LEEWAY + 1
    with pytest.raises(pb.AuthorizationError, match="token is expired"):
        broker.verify(md, auth.Capability.READ)
    # A shorter lifetime asked for is kept; a longer one is cut to the minute.
    clock.now = clock.start
    short = signer(clock=clock).authorize(auth.journal_claims(auth.Capability.READ, "a/b"), 10)
    assert auth.KeyedAuth(KEY_A, clock=clock).parse(token_of(short)).expires_at == clock.now + 10


def _with_exclude(journal: str, label: str) -> pb.LabelSelector:
    sel = auth.journal_claims(auth.Capability.READ, journal).selector
    sel.exclude.labels.add(name=label)
    return sel


@pytest.mark.parametrize(
    ("claims", "match"),
    [
        (auth.journal_claims(auth.Capability.READ | auth.Capability.LIST, "a/b"), "READ only"),
        (auth.journal_claims(auth.Capability.APPEND, "a/b"), "READ only"),
        (auth.journal_claims(auth.Capability.ALL, "a/b"), "READ only"),
        (auth.Claims(auth.Capability.READ), "not 'every one'"),
        (auth.Claims(auth.Capability.READ, pb.parse_selector("prefix=a/")), "one journal"),
        (auth.Claims(auth.Capability.READ, pb.parse_selector("name=a/b, name=a/c")), "one"),
        (auth.Claims(auth.Capability.READ, pb.parse_selector("topic=logs")), "one journal"),
        (auth.Claims(auth.Capability.READ, _with_exclude("a/b", "x")), "one journal"),
        (auth.Claims(auth.Capability.READ, pb.parse_selector("name in (a/b, a/c)")), "one"),
    ],
)
def test_nothing_wider_is_signed(claims: auth.Claims, match: str) -> None:
    with pytest.raises(pb.AuthorizationError, match=match):
        signer().authorize(claims)


def test_without_keys_calls_carry_no_token() -> None:
    keys = lagauth.Keys(flag="--consumer.auth-keys")
    keys.refresh()
    assert not keys.configured and keys.current is None
    out = lagauth.LagAuthorizer(keys).authorize(lagauth.shard_claims(auth.Capability.READ, "s"))
    assert out == ()
    # Still narrow: a wide claim is a bug whether or not a token would be sent.
    with pytest.raises(pb.AuthorizationError):
        lagauth.LagAuthorizer(keys).authorize(auth.Claims(auth.Capability.LIST))


def test_the_first_key_signs_and_a_rotated_file_is_signed_with_next(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    path = tmp_path / "auth-keys"
    path.write_text(f"{KEY_A}\n")
    keys = lagauth.Keys(keys_file=str(path), flag="--broker.auth-keys", clock=clock)
    keys.refresh()
    s = lagauth.LagAuthorizer(keys)
    claims = auth.journal_claims(auth.Capability.READ, "a/b")
    first = s.authorize(claims)
    auth.KeyedAuth(KEY_A, clock=clock).verify(first, auth.Capability.READ)

    # Rotation's second write (new key first): from the next refresh on, B signs.
    path.write_text(f"{KEY_B}, {KEY_A}\n")
    os.utime(path, ns=(1, 1))  # A new mtime even on a coarse-grained filesystem.
    keys.refresh()
    clock.now += 1
    second = s.authorize(claims)
    auth.KeyedAuth(KEY_B, clock=clock).verify(second, auth.Capability.READ)
    with pytest.raises(pb.AuthorizationError, match="signature is invalid"):
        auth.KeyedAuth(KEY_A, clock=clock).verify(second, auth.Capability.READ)

    # A file gone bad mid-rotation: the keys read before stay, with one warning naming it.
    path.write_text("not base64!\n")
    with caplog.at_level(logging.WARNING, logger=lagauth.__name__):
        keys.refresh()
        keys.refresh()
    (record,) = caplog.records  # Once, not once a round.
    text = record.getMessage()
    assert text.startswith(f"--broker.auth-keys-file: {path}: failed to decode key at index 0")
    assert text.endswith("signing with the keys read before")
    auth.KeyedAuth(KEY_B, clock=clock).verify(s.authorize(claims), auth.Capability.READ)


def test_key_errors_name_the_flag(tmp_path: pathlib.Path) -> None:
    with pytest.raises(pb.AuthorizationError, match=r"^--consumer\.auth-keys-file: .*missing"):
        lagauth.Keys(keys_file=str(tmp_path / "missing"), flag="--consumer.auth-keys").refresh()
    with pytest.raises(pb.AuthorizationError, match=r"^--broker\.auth-keys: failed to decode"):
        lagauth.Keys("%%%", flag="--broker.auth-keys").refresh()
    with pytest.raises(pb.AuthorizationError, match="mutually exclusive"):
        lagauth.Keys(KEY_A, str(tmp_path / "k"), flag="--broker.auth-keys")


def test_operator_flags_and_environment(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "auth-keys"
    path.write_text(KEY_A)
    cfg = config.parse_args(
        ["--namespace=a", f"--consumer.auth-keys={KEY_B}"],
        environ={"BROKER_AUTH_KEYS_FILE": str(path)},
    )
    got = cfg.handlers.lag
    assert (got.broker_auth_keys_file, got.consumer_auth_keys) == (str(path), KEY_B)
    assert KEY_B not in repr(got)  # Keys never reach a log line through the config.
    assert lag.LagConfig().broker_keys().configured is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--broker.auth-keys=%%%"], "--broker.auth-keys: failed to decode key at index 0"),
        (["--consumer.auth-keys-file=/nonexistent/k"], "--consumer.auth-keys-file: /nonexistent/k"),
        ([f"--broker.auth-keys={KEY_A}", "--broker.auth-keys-file=/k"], "mutually exclusive"),
    ],
)
def test_bad_keys_stop_the_start_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        config.parse_args(["--namespace=a", *argv], environ={})
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


async def test_a_round_without_readable_keys_says_why_for_every_shard(
    tmp_path: pathlib.Path,
) -> None:
    import aetcd

    from gazette.operator import mirrors

    path = tmp_path / "auth-keys"
    checker = lag.LagChecker(
        lag.LagConfig(broker_address="http://127.0.0.1:1", broker_auth_keys_file=str(path)),
        mirrors.Mirrors(aetcd.Client(host="127.0.0.1", port=1)),
        broker_root="/gazette/cluster",
    )
    targets = [lag.Target(f"uid-{i}", "/apps/a", f"shard-{i}", ["a/b"], None) for i in range(2)]
    # The Secret not mounted yet (or gone): no call is made, and each Shard says why.
    found = await checker.check(targets)
    assert {uid: f.error for uid, f in found.items()} == {
        f"uid-{i}": f"--broker.auth-keys-file: {path}: No such file or directory" for i in range(2)
    }
    # Once it is there, the next round goes on to ask (here: no primary to ask).
    path.write_text(KEY_A)
    found = await checker.check(targets)
    assert {f.error for f in found.values()} == {"NO_SHARD_PRIMARY"}
