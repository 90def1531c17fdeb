"""The data plane authorizes as the Python server does: same verdicts, same words.

Tokens are signed by :class:`~gazette.broker.protocol.auth.KeyedAuth` with generated
claims (capabilities, selectors with prefixes and exclusions, issue times in the past
and the future, lifetimes that have or have not run out), then judged by the Python
server's checks (``KeyedAuth.verify`` and the resolver's authorizer) and by the data
plane (``gazette.dataplane._native.check_token``). Times stay 20 s or more from every
boundary, so the two clocks never straddle one.
"""

from __future__ import annotations

import base64
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gazette.broker import protocol as pb
from gazette.broker.protocol import auth
from gazette.broker.server import metadata_api
from gazette.dataplane import _native

KEYS = [b"first-key-of-the-cluster", b"second, rotated in"]
KEYS_TEXT = ",".join(base64.b64encode(k).decode() for k in KEYS)
Cap = auth.Capability
NAMED = [Cap.LIST, Cap.APPLY, Cap.READ, Cap.APPEND, Cap.REPLICATE]

names = st.sampled_from(["name", "topic", "app"])
values = st.sampled_from(["", "a", "a/", "a/b", "logs", "lo", "web"])
labels = st.lists(st.tuples(names, values, st.booleans()), max_size=4)


def selector_of(
    include: list[tuple[str, str, bool]], exclude: list[tuple[str, str, bool]]
) -> pb.LabelSelector:
    sel = pb.LabelSelector()
    for group, items in ((sel.include, include), (sel.exclude, exclude)):
        for name, value, prefix in sorted(set(items)):
            group.labels.add(name=name, value=value, prefix=prefix and bool(value))
    return sel


def spec_of(name: str, journal_labels: list[tuple[str, str]]) -> pb.JournalSpec:
    spec = pb.JournalSpec(name=name)
    for label_name, value in sorted(set(journal_labels)):
        spec.labels.labels.add(name=label_name, value=value)
    return spec


def python_verdict(
    token: str | None, require: int, spec: pb.JournalSpec
) -> tuple[str | None, bool]:
    keys = auth.KeyedAuth(KEYS_TEXT)
    metadata = [] if token is None else [("authorization", token)]
    try:
        claims = keys.verify(metadata, require)
    except pb.AuthorizationError as e:
        return str(e), False
    allowed = metadata_api.authorizer(claims)
    return None, allowed is None or allowed(spec)


def native_verdict(
    token: str | None, require: int, spec: pb.JournalSpec
) -> tuple[str | None, bool]:
    return _native.check_token(KEYS, token, require, spec.SerializeToString())


@settings(max_examples=300, deadline=None)
@given(
    cap=st.integers(0, 2**32 - 1) | st.sets(st.sampled_from(NAMED)).map(lambda s: sum(s)),
    require=st.sets(st.sampled_from(NAMED), min_size=1).map(lambda s: sum(s)),
    include=labels,
    exclude=labels,
    journal=st.sampled_from(["a/b", "a/c", "logs/x"]),
    journal_labels=st.lists(
        st.tuples(st.sampled_from(["topic", "app"]), values.filter(bool)), max_size=3
    ),
    issued=st.sampled_from([-100.0, -30.0, 0.0, 30.0]),
    lifetime=st.sampled_from([10.0, 60.0, 3600.0]),
    signer=st.sampled_from([0, 1]),
)
def test_signed_tokens_get_the_same_verdict(
    cap: int,
    require: int,
    include: list[tuple[str, str, bool]],
    exclude: list[tuple[str, str, bool]],
    journal: str,
    journal_labels: list[tuple[str, str]],
    issued: float,
    lifetime: float,
    signer: int,
) -> None:
    now = time.time()
    key = base64.b64encode(KEYS[signer]).decode()
    token = auth.KeyedAuth(key, clock=lambda: now + issued).sign(
        auth.Claims(cap, selector_of(include, exclude)), lifetime
    )
    spec = spec_of(journal, journal_labels)
    bearer = f"Bearer {token}"
    assert native_verdict(bearer, require, spec) == python_verdict(bearer, require, spec)


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Basic dXNlcjpwdw==",
        "Bearer ",
        "Bearer not-a-token",
        "Bearer a.b",
    ],
)
def test_refused_tokens_get_the_same_words(authorization: str | None) -> None:
    spec = spec_of("a/b", [])
    assert native_verdict(authorization, Cap.READ, spec) == python_verdict(
        authorization, Cap.READ, spec
    )


def test_a_token_of_another_key_and_a_tampered_one_are_refused_alike() -> None:
    spec = spec_of("a/b", [])
    other = auth.KeyedAuth(base64.b64encode(b"not ours").decode())
    token = other.sign(auth.journal_claims(Cap.READ, "a/b"))
    for bearer in (f"Bearer {token}", f"Bearer {token[:-2]}xx"):
        refusal, _ = native_verdict(bearer, Cap.READ, spec)
        assert refusal is not None and refusal.startswith("verifying Authorization: ")
        assert (refusal, False) == python_verdict(bearer, Cap.READ, spec)


def test_too_many_segments_are_named_as_gazette_names_them() -> None:
    # pyjwt reads "a.b.c.d" as header "a" and payload "b.c"; the data plane, which refuses
    # such a token before the Python server sees it, says what golang-jwt says.
    refusal, _ = native_verdict("Bearer a.b.c.d", Cap.READ, spec_of("a/b", []))
    assert refusal == "verifying Authorization: token is malformed: too many segments"
