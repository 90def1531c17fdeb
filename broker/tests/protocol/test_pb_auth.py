"""Bearer tokens and their claims (gazette.broker.protocol.auth), as Gazette reads and writes them."""

from __future__ import annotations

import base64
import json
import string
import time
from typing import Any

import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gazette.broker import protocol as pb
from gazette.broker.protocol import auth

KEY = b"a secret key long enough for HS256, HS384 and HS512 alike, 64+ B"
KEYS = base64.b64encode(KEY).decode()
Cap = auth.Capability


def token_of(payload: dict[str, Any], key: bytes = KEY, alg: str = "HS256") -> str:
    # Through pyjwt's PyJWS, which (unlike jwt.encode) has no opinion on short keys.
    body = json.dumps(payload, separators=(",", ":")).encode()
    return jwt.PyJWS().encode(body, key, algorithm=alg, is_payload_detached=False)


def md(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def test_capabilities_are_gazettes() -> None:
    assert [int(c) for c in (Cap.LIST, Cap.APPLY, Cap.READ, Cap.APPEND, Cap.REPLICATE)] == [
        2,
        4,
        8,
        16,
        32,
    ]
    assert int(Cap.ALL) == 0xFFFFFFFF


def test_claims_json_is_gazettes() -> None:
    claims = auth.Claims(
        Cap.READ | Cap.LIST,
        pb.parse_selector("name:prefix=a/, topic=logs, !env"),
        issued_at=1700000000,
        expires_at=1700003600,
    )
    text = json.dumps(auth.claims_to_json(claims), separators=(",", ":"))
    # Field names and order of Go's pb.Claims (cap, sel, then RegisteredClaims' exp, iat);
    # a label omits empty name/value and false prefix; an empty set is {"labels":null}.
    assert text == (
        '{"cap":10,"sel":{"include":{"labels":[{"name":"name","value":"a/","prefix":true},'
        '{"name":"topic","value":"logs"}]},"exclude":{"labels":[{"name":"env"}]}},'
        '"exp":1700003600,"iat":1700000000}'
    )
    empty = json.dumps(auth.claims_to_json(auth.Claims(Cap.APPLY)), separators=(",", ":"))
    assert empty == '{"cap":4,"sel":{"include":{"labels":null},"exclude":{"labels":null}}}'
    assert auth.claims_from_json(json.loads(text)) == claims


@pytest.mark.parametrize(
    ("payload", "want_cap", "want_include"),
    [
        ({"cap": 8}, 8, []),
        ({"cap": None, "sel": None}, 0, []),
        ({"sel": {"include": {"labels": None}, "exclude": {"labels": None}}}, 0, []),
        ({"sel": {"include": {}, "exclude": None}}, 0, []),
        # Go's encoding/json matches field names case-insensitively and ignores others.
        (
            {"CAP": 2, "Sel": {"Include": {"Labels": [{"Name": "a", "VALUE": "b"}]}}, "x": 1},
            2,
            [("a", "b")],
        ),
        # Unsorted, duplicated labels (no Gazette signer makes them) match as if sorted.
        (
            {
                "sel": {
                    "include": {
                        "labels": [{"name": "z", "value": "1"}, {"name": "a"}, {"name": "a"}]
                    }
                }
            },
            0,
            [("a", ""), ("z", "1")],
        ),
        ({"sel": {"include": {"labels": [None]}}}, 0, [("", "")]),  # null is Go's zero Label.
    ],
)
def test_claims_are_read_as_go_reads_them(
    payload: dict[str, Any], want_cap: int, want_include: list[tuple[str, str]]
) -> None:
    claims = auth.claims_from_json(payload)
    assert claims.capability == want_cap
    assert [(x.name, x.value) for x in claims.selector.include.labels] == want_include
    assert not claims.selector.exclude.labels


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"cap": "8"}, "cap: expected an unsigned 32-bit integer"),
        ({"cap": -1}, "cap: expected an unsigned 32-bit integer"),
        ({"cap": 1 << 32}, "cap: expected an unsigned 32-bit integer"),
        ({"cap": 2.0}, "cap: expected an unsigned 32-bit integer"),
        ({"cap": True}, "cap: expected an unsigned 32-bit integer"),
        ({"sel": []}, "sel: expected an object"),
        ({"sel": {"include": 1}}, "sel.include: expected an object"),
        ({"sel": {"exclude": {"labels": {}}}}, "sel.exclude.labels: expected an array"),
        ({"sel": {"include": {"labels": [1]}}}, "sel.include.labels[0]: expected an object"),
        ({"sel": {"include": {"labels": [{"name": 1}]}}}, "sel.include.labels[0].name"),
        ({"sel": {"include": {"labels": [{"prefix": "yes"}]}}}, "prefix: expected a boolean"),
        ({"exp": "1700000000"}, "exp: expected a number of seconds"),
    ],
)
def test_claims_of_the_wrong_type_are_malformed(payload: dict[str, Any], reason: str) -> None:
    with pytest.raises(pb.AuthorizationError, match="token is malformed") as e:
        auth.claims_from_json(payload)
    assert reason in str(e.value)


def test_keys_first_signs_any_verifies_and_aa_allows_missing() -> None:
    one, two = base64.b64encode(b"one").decode(), base64.b64encode(b"two").decode()
    both = auth.KeyedAuth(f" {one},{two}\n")
    assert both.keys == (b"one", b"two") and not both.allow_missing
    # Keys as short as these are Gazette's to allow (pyjwt would warn on every token).
    by_two = auth.KeyedAuth(two).sign(auth.Claims(Cap.LIST))
    assert both.verify(md(by_two), Cap.LIST).capability == Cap.LIST
    by_both = both.sign(auth.Claims(Cap.LIST))
    assert jwt.decode(by_both, options={"verify_signature": False})["cap"] == 2
    assert auth.KeyedAuth(one).verify(md(by_both), Cap.LIST).capability == Cap.LIST  # First signs.
    with pytest.raises(pb.AuthorizationError, match="signature is invalid"):
        auth.KeyedAuth(one).verify(md(by_two), Cap.LIST)

    aa = auth.KeyedAuth(f"AA== {one}")
    assert aa.keys == (b"one",) and aa.allow_missing
    anonymous = aa.verify(None, Cap.READ)
    assert anonymous.capability == Cap.READ and not anonymous.selector.include.labels
    assert anonymous.expires_at is not None and anonymous.expires_at - time.time() > 3590
    with pytest.raises(pb.AuthorizationError, match="missing or empty Authorization token"):
        both.verify([("other", "x")], Cap.READ)


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        ("", "at least one key must be provided"),
        ("AA==", "at least one key must be provided"),
        (" , ", "at least one key must be provided"),
        ("b25l AA== not*base64", "failed to decode key at index 2: "),
        ("b25l,AB", "failed to decode key at index 1: "),
    ],
)
def test_bad_keys_are_refused(keys: str, error: str) -> None:
    with pytest.raises(pb.AuthorizationError) as e:
        auth.KeyedAuth(keys)
    assert str(e.value).startswith(error)


@pytest.mark.parametrize(
    ("have", "require", "message"),
    [
        (Cap.READ, Cap.LIST, "authorization is missing required LIST capability"),
        (Cap.LIST, Cap.APPLY, "authorization is missing required APPLY capability"),
        (0, Cap.READ | Cap.APPEND, "authorization is missing required READ capability"),
        (
            Cap.ALL & ~Cap.REPLICATE,
            Cap.REPLICATE,
            "authorization is missing required REPLICATE capability",
        ),
        (
            Cap.READ,
            1 << 16,
            "authorization is missing required capability (have 1000, but require 10000000000000000)",
        ),
    ],
)
def test_a_missing_capability_is_named(have: int, require: int, message: str) -> None:
    with pytest.raises(pb.AuthorizationError) as e:
        auth.check_capability(have, require)
    assert str(e.value) == message
    auth.check_capability(Cap.ALL, require)


def test_verify_checks_expiry_of_remembered_tokens_and_signing_reuses_a_seconds_token() -> None:
    now = [1_800_000_000.0]
    keyed = auth.KeyedAuth(KEYS, clock=lambda: now[0])
    claims = auth.journal_claims(Cap.READ, "a/journal;meta")
    assert pb.format_selector(claims.selector) == "name=a/journal"
    token = keyed.sign(claims, 10)
    assert keyed.sign(claims, 10) == token  # Same claims, same second: the same bytes.
    now[0] += 1
    assert keyed.sign(claims, 10) != token

    # pyjwt checks exp against the real clock: verify with a clock that agrees.
    real = auth.KeyedAuth(KEYS)
    fresh = real.sign(claims, 10)
    assert real.verify(md(fresh), Cap.READ).capability == Cap.READ
    later = auth.KeyedAuth(KEYS, clock=lambda: time.time() + 16)
    later._verified = real._verified  # Remembered as valid ...
    with pytest.raises(pb.AuthorizationError, match="token is expired"):
        later.verify(md(fresh), Cap.READ)  # ... yet its expiry is checked every time.


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", "token is malformed"),
        ("a.b", "token is malformed: Not enough segments"),
        ("a.b.c", "token is malformed"),
        (token_of({"cap": 2}), "token has invalid claims: token is missing required claim: exp"),
        (token_of({"cap": 2, "exp": 1}), "token has invalid claims: token is expired"),
        (
            token_of({"cap": 2, "exp": 9e9, "nbf": 9e9}),
            "token has invalid claims: token is not valid yet",
        ),
        (token_of({"cap": 2, "exp": 9e9}, alg="HS512"), "token signature is invalid"),
        (token_of({"cap": 2, "exp": 9e9}, key=KEY[::-1]), "token signature is invalid"),
        (token_of({"cap": "x", "exp": 9e9}), "token is malformed: cap"),
    ],
)
def test_bad_tokens_say_why(token: str, reason: str) -> None:
    with pytest.raises(pb.AuthorizationError) as e:
        auth.KeyedAuth(KEYS).verify(md(token), Cap.LIST)
    assert str(e.value).startswith(f"verifying Authorization: {reason}"), str(e.value)


def test_hs384_is_accepted_and_a_go_shaped_token_reads() -> None:
    payload = {
        "cap": 8,
        "sel": {
            "include": {"labels": [{"name": "name", "value": "a/j"}]},
            "exclude": {"labels": None},
        },
        "exp": int(time.time()) + 60,
        "iat": int(time.time()),
    }
    for alg in ("HS256", "HS384"):
        claims = auth.KeyedAuth(KEYS).verify(md(token_of(payload, alg=alg)), Cap.READ)
        assert pb.format_selector(claims.selector) == "name=a/j"
        assert claims.allows(pb.label_set({"name": "a/j", "topic": "x"}))
        assert not claims.allows(pb.label_set({"name": "a/k"}))


def test_clients_choose_keys_then_token_then_nothing() -> None:
    assert isinstance(auth.new_authorizer(KEYS, "tok"), auth.KeyedAuth)
    bearer = auth.new_authorizer("", "tok")
    assert bearer.authorize(auth.Claims(Cap.ALL)) == (("authorization", "Bearer tok"),)
    noop = auth.new_authorizer()
    assert noop.authorize(auth.Claims(Cap.ALL)) == ()
    assert isinstance(noop, auth.NoopAuth)
    assert noop.verify([("authorization", "Bearer junk")], Cap.READ) == auth.Claims(Cap.READ)


def test_mint_from_a_shell(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        auth.main(["--keys", KEYS, "--cap", "read, LIST,0x10000", "-l", "topic=a", "--ttl", "90s"])
        == 0
    )
    token = capsys.readouterr().out.strip()
    claims = auth.KeyedAuth(KEYS).verify(md(token), Cap.READ | Cap.LIST)
    assert claims.capability == Cap.READ | Cap.LIST | (1 << 16)
    assert pb.format_selector(claims.selector) == "topic=a"
    assert claims.expires_at is not None and claims.issued_at is not None
    assert claims.expires_at - claims.issued_at == 90
    assert auth.main(["--keys", "", "--cap", "READ"]) == 2
    assert "at least one key" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        auth.main(["--keys", KEYS, "--cap", "WRITE"])
    assert "unknown capability 'WRITE'" in capsys.readouterr().err


# -- Fuzz: every input is a clear refusal or valid claims ------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "cap",
                    "sel",
                    "include",
                    "exclude",
                    "labels",
                    "name",
                    "value",
                    "prefix",
                    "exp",
                    "iat",
                    "nbf",
                    "x",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


_segments = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "-_=.", max_size=40),
    st.builds(
        lambda h, p, s: f"{h}.{p}.{s}",
        st.one_of(st.just(_b64(b'{"alg":"HS256","typ":"JWT"}')), st.binary(max_size=20).map(_b64)),
        st.binary(max_size=60).map(_b64),
        st.binary(max_size=40).map(_b64),
    ),
    st.text(max_size=60),
)

COUNTS: dict[str, int] = {}


def _verify(value: str | None) -> None:
    keyed = auth.KeyedAuth(KEYS)
    try:
        claims = keyed.verify(None if value is None else [("authorization", value)], Cap.LIST)
    except pb.AuthorizationError as e:
        assert str(e) and "\n" not in str(e)
        COUNTS["refused"] = COUNTS.get("refused", 0) + 1
        return
    assert isinstance(claims, auth.Claims) and claims.capability & Cap.LIST
    COUNTS["accepted"] = COUNTS.get("accepted", 0) + 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_segments)
def test_fuzz_arbitrary_tokens(text: str) -> None:
    _verify("Bearer " + text)
    _verify(text)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json, st.booleans(), st.booleans())
def test_fuzz_signed_payloads(payload: Any, with_exp: bool, with_cap: bool) -> None:
    if isinstance(payload, dict) and with_exp:
        payload.setdefault("exp", int(time.time()) + 60)
    if isinstance(payload, dict) and with_cap:
        payload["cap"] = int(Cap.ALL)
    body = json.dumps(payload, allow_nan=True).encode()
    token = jwt.PyJWS().encode(body, KEY, algorithm="HS256")
    _verify("Bearer " + token)


def test_fuzz_counts() -> None:
    if not COUNTS:
        pytest.skip("the fuzz tests did not run")
    print(f"\nfuzzed token parser: {COUNTS}")
    assert COUNTS.get("refused", 0) > 0
