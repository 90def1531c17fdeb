"""Authorization: Gazette's bearer tokens, their claims, and who signs and checks them.

A broker started with ``--broker.auth-keys`` authorizes every RPC with a JSON
Web Token sent as gRPC metadata ``authorization: Bearer <token>`` (and, through
the HTTP gateway, as the ``Authorization`` header). The token is signed with
HMAC (HS256 when we sign; HS256 and HS384 accepted) under a pre-shared key, and
its claims say what it grants (Gazette ``auth/auth.go``, ``broker/protocol/auth.go``):

- ``cap``: a bit mask of :class:`Capability` (LIST, APPLY, READ, APPEND,
  REPLICATE; applications may use bits from 1 << 16);
- ``sel``: a label selector of the journals it covers, matched against a
  journal's labels plus its ``name`` meta-label; a journal it doesn't select
  looks, to the bearer, as if it did not exist;
- ``iat`` and ``exp`` (required; 5 s of clock skew are tolerated).

The JSON is Gazette's, so tokens travel both ways between Go and Python::

    {"cap":8,"sel":{"include":{"labels":[{"name":"name","value":"a/j"}]},
     "exclude":{"labels":null}},"exp":1700003600,"iat":1700000000}

(a label omits an empty ``name`` / ``value`` and a false ``prefix``; an empty
label set is ``{"labels":null}``).

Key types:

- :class:`Claims` — capability, selector, issued-at and expiry.
- :class:`KeyedAuth` — ``--broker.auth-keys``: base64 keys separated by
  whitespace and/or commas; the first signs, any verifies. The key ``AA==``
  (one zero byte) is not a key but a switch: requests *without* an
  ``authorization`` header are let through (for rolling auth out).
- :class:`BearerAuth` — a client holding one static token.
- :class:`NoopAuth` — no keys: nothing is sent, everything is allowed.
- :class:`SwappableAuth` — a server's keys, replaceable while it serves
  (key rotation: ``--broker.auth-keys-file`` and SIGHUP, see
  :mod:`gazette.broker.server.keyreload`). Every call reads the current keys
  once, so a call verifies and signs with one key set, and the next call
  already with the new one.

Every refusal is an :class:`~gazette.broker.protocol.errors.AuthorizationError`
whose text names the problem (``authorization is missing required READ
capability``, ``verifying Authorization: token has invalid claims: token is
expired``, ...); brokers answer it with gRPC ``UNAUTHENTICATED``.

Usage::

    from gazette.broker.protocol import auth

    keys = auth.KeyedAuth("c2VjcmV0LWtleS1vbmU=")
    token = keys.sign(auth.Claims(auth.Capability.READ | auth.Capability.LIST,
                                  pb.parse_selector("topic=logs")), lifetime=3600)
    claims = keys.verify([("authorization", f"Bearer {token}")], auth.Capability.READ)

or, to mint a token from a shell::

    BROKER_AUTH_KEYS=... python -m gazette.broker.protocol.auth --cap READ,LIST -l topic=logs

``pyjwt`` is imported on first use: processes without keys never load it.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import enum
import functools
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gazette.broker.protocol import durations, selector, tokens
from gazette.broker.protocol.errors import AuthorizationError, ValidationError
from gazette.broker.protocol.protocol_pb2 import Label, LabelSelector, LabelSet

if TYPE_CHECKING:
    import jwt

__all__ = [
    "ALLOW_MISSING_KEY",
    "APPLY_LIFETIME",
    "LIFETIME",
    "Authorizer",
    "BearerAuth",
    "Capability",
    "Claims",
    "KeyedAuth",
    "Metadata",
    "NoopAuth",
    "ServerAuth",
    "SwappableAuth",
    "Verifier",
    "check_capability",
    "claims_from_json",
    "claims_to_json",
    "journal_claims",
    "new_authorizer",
    "parse_keys",
]

#: The key that is no key: requests without an ``authorization`` header are allowed.
ALLOW_MISSING_KEY = "AA=="
#: Lifetime of the tokens clients and brokers sign for an RPC (Gazette's: an hour,
#: since reads, list watches and replication streams are long-lived).
LIFETIME = 3600.0
#: Apply is a single short call: its tokens live a minute.
APPLY_LIFETIME = 60.0
#: Clock skew tolerated on ``exp``, ``iat`` and ``nbf``.
LEEWAY = 5.0
#: What an RPC without a token may do when ``AA==`` allows it: its claims expire in an hour.
_ALLOW_MISSING_LIFETIME = 3600.0
_ALGORITHMS = ("HS256", "HS384")
_SIGNING_ALGORITHM = "HS256"
_BEARER = "Bearer "
_MAX_CAPABILITY = 0xFFFFFFFF
#: Verified tokens remembered (a token is checked once, then only its expiry).
_VERIFIED_CACHE_SIZE = 4096

Metadata = tuple[tuple[str, str], ...]
"""gRPC call metadata: ``(("authorization", "Bearer ..."),)`` or ``()``."""


class Capability(enum.IntFlag):
    """Bits of a token's ``cap`` claim (Gazette's values)."""

    LIST = 1 << 1
    APPLY = 1 << 2
    READ = 1 << 3
    APPEND = 1 << 4
    REPLICATE = 1 << 5
    ALL = _MAX_CAPABILITY


_NAMED = (
    (Capability.LIST, "LIST"),
    (Capability.APPLY, "APPLY"),
    (Capability.READ, "READ"),
    (Capability.APPEND, "APPEND"),
    (Capability.REPLICATE, "REPLICATE"),
)


@dataclasses.dataclass(frozen=True)
class Claims:
    """What a token grants: ``capability`` over the journals ``selector`` selects.

    ``issued_at`` and ``expires_at`` are Unix seconds (None when absent: the
    claims of a broker without keys, which never expire).
    """

    capability: int
    selector: LabelSelector = dataclasses.field(default_factory=LabelSelector)
    issued_at: float | None = None
    expires_at: float | None = None

    def allows(self, labels: LabelSet) -> bool:
        """Whether the claims' selector selects a journal of ``labels`` (with ``name``)."""
        return selector.matches(self.selector, labels)


def journal_claims(capability: int, journal: str) -> Claims:
    """Claims of ``capability`` over one journal (its name, without a ``;meta`` suffix)."""
    sel = LabelSelector()
    sel.include.labels.add(name="name", value=tokens.strip_meta(journal))
    return Claims(capability, sel)


def check_capability(actual: int, require: int) -> None:
    """Raise AuthorizationError unless ``actual`` has every bit of ``require``."""
    if actual & require == require:
        return
    for cap, name in _NAMED:
        if require & cap and not actual & cap:
            raise AuthorizationError(f"authorization is missing required {name} capability")
    raise AuthorizationError(
        f"authorization is missing required capability (have {actual:b}, but require {require:b})"
    )


# -- JSON of claims ----------------------------------------------------------------------


def _label_json(label: Label) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if label.name:
        out["name"] = label.name
    if label.value:
        out["value"] = label.value
    if label.prefix:
        out["prefix"] = True
    return out


def _label_set_json(labels: LabelSet) -> dict[str, Any]:
    # Go encodes a nil slice as null, which is what an empty set is there.
    return {"labels": [_label_json(x) for x in labels.labels] or None}


def claims_to_json(claims: Claims) -> dict[str, Any]:
    """The JSON object of ``claims``, with Gazette's field names and order."""
    out: dict[str, Any] = {
        "cap": int(claims.capability),
        "sel": {
            "include": _label_set_json(claims.selector.include),
            "exclude": _label_set_json(claims.selector.exclude),
        },
    }
    if claims.expires_at is not None:
        out["exp"] = int(claims.expires_at)
    if claims.issued_at is not None:
        out["iat"] = int(claims.issued_at)
    return out


def _malformed(what: str) -> AuthorizationError:
    return AuthorizationError(f"verifying Authorization: token is malformed: {what}")


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """``obj[name]``, else a case-insensitive match (as Go's encoding/json), else None."""
    if name in obj:
        return obj[name]
    for key, value in obj.items():
        if key.lower() == name:
            return value
    return None


def _label_from_json(obj: Any, where: str) -> Label:
    if obj is None:
        return Label()
    if not isinstance(obj, dict):
        raise _malformed(f"{where}: expected an object")
    name, value, prefix = _field(obj, "name"), _field(obj, "value"), _field(obj, "prefix")
    if name is not None and not isinstance(name, str):
        raise _malformed(f"{where}.name: expected a string")
    if value is not None and not isinstance(value, str):
        raise _malformed(f"{where}.value: expected a string")
    if prefix is not None and not isinstance(prefix, bool):
        raise _malformed(f"{where}.prefix: expected a boolean")
    return Label(name=name or "", value=value or "", prefix=bool(prefix))


def _label_set_from_json(obj: Any, where: str) -> LabelSet:
    if obj is None:
        return LabelSet()
    if not isinstance(obj, dict):
        raise _malformed(f"{where}: expected an object")
    items = _field(obj, "labels")
    if items is None:
        return LabelSet()
    if not isinstance(items, list):
        raise _malformed(f"{where}.labels: expected an array")
    labels = {
        (x.name, x.value, x.prefix): x
        for x in (_label_from_json(item, f"{where}.labels[{i}]") for i, item in enumerate(items))
    }
    # Selectors are matched by a merge of sorted labels: Gazette's signers always
    # sort them, and one that didn't must not make matching depend on its order.
    return LabelSet(labels=[labels[k] for k in sorted(labels)])


def _time_claim(payload: Mapping[str, Any], name: str) -> float | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _malformed(f"{name}: expected a number of seconds")
    return float(value)


def claims_from_json(payload: Mapping[str, Any]) -> Claims:
    """Claims of a token's decoded JSON, read as Gazette reads them.

    Absent or null fields are zero values (no capability, an empty selector);
    unknown fields are ignored; a field of the wrong type raises
    AuthorizationError ("token is malformed").
    """
    cap = _field(payload, "cap")
    if cap is None:
        cap = 0
    elif isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap <= _MAX_CAPABILITY:
        raise _malformed("cap: expected an unsigned 32-bit integer")
    sel = _field(payload, "sel")
    if sel is not None and not isinstance(sel, dict):
        raise _malformed("sel: expected an object")
    out = LabelSelector()
    if sel is not None:
        out.include.CopyFrom(_label_set_from_json(_field(sel, "include"), "sel.include"))
        out.exclude.CopyFrom(_label_set_from_json(_field(sel, "exclude"), "sel.exclude"))
    return Claims(
        cap,
        out,
        issued_at=_time_claim(payload, "iat"),
        expires_at=_time_claim(payload, "exp"),
    )


# -- pyjwt -------------------------------------------------------------------------------


@functools.cache
def _jwt() -> jwt.PyJWT:
    """A pyjwt codec for Gazette's keys (imported on first use)."""
    import jwt
    from jwt import algorithms

    class AnyLengthHMAC(algorithms.HMACAlgorithm):
        # Gazette takes keys of any length as raw bytes: no PEM sniffing, and no
        # warning (per token!) for keys shorter than the digest.
        def prepare_key(self, key: str | bytes) -> bytes:
            return key.encode() if isinstance(key, str) else bytes(key)

        def check_key_length(self, key: bytes) -> str | None:
            return None

    codec = jwt.PyJWT(
        options={
            "require": ["exp"],
            "verify_aud": False,  # Gazette checks no audience.
            "verify_iss": False,
        }
    )
    jws = jwt.PyJWS(algorithms=[])
    jws.register_algorithm("HS256", AnyLengthHMAC(AnyLengthHMAC.SHA256))
    jws.register_algorithm("HS384", AnyLengthHMAC(AnyLengthHMAC.SHA384))
    # pyjwt keeps its signature layer in ``_jws``; ours knows only Gazette's algorithms.
    codec._jws = jws
    return codec


def _describe_jwt_error(e: Exception) -> str:
    """Text of a pyjwt failure, phrased as Gazette's (golang-jwt) errors are."""
    import jwt

    if isinstance(e, jwt.ExpiredSignatureError):
        return "token has invalid claims: token is expired"
    if isinstance(e, jwt.ImmatureSignatureError):
        if "iat" in str(e):
            return "token has invalid claims: token used before issued"
        return "token has invalid claims: token is not valid yet"
    if isinstance(e, jwt.MissingRequiredClaimError):
        return f"token has invalid claims: token is missing required claim: {e.claim} claim is required"
    if isinstance(e, jwt.InvalidSignatureError):
        return "token signature is invalid: signature is invalid"
    if isinstance(e, jwt.InvalidAlgorithmError):
        return f"token signature is invalid: {e} (expected {' or '.join(_ALGORITHMS)})"
    if isinstance(e, jwt.InvalidTokenError) and not isinstance(e, jwt.DecodeError):
        return f"token has invalid claims: {e}"
    return f"token is malformed: {e}"


# -- Authorizers and verifiers -----------------------------------------------------------


class Authorizer(Protocol):
    """Gives an RPC the metadata that authorizes ``claims`` (for ``lifetime`` seconds)."""

    def authorize(self, claims: Claims, lifetime: float = LIFETIME) -> Metadata: ...


class Verifier(Protocol):
    """Checks an RPC's metadata for a token granting ``require``; returns its claims."""

    def verify(self, metadata: Iterable[tuple[str, Any]] | None, require: int) -> Claims: ...


def _authorization(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The first ``authorization`` value of gRPC ``metadata`` (None if there is none)."""
    for key, value in metadata or ():
        if key.lower() == "authorization":
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None


class NoopAuth:
    """No keys: nothing is signed, and every request has exactly what it asks for."""

    def authorize(self, claims: Claims, lifetime: float = LIFETIME) -> Metadata:
        return ()

    def verify(self, metadata: Iterable[tuple[str, Any]] | None, require: int) -> Claims:
        return Claims(require)


class BearerAuth:
    """A client with one pre-shared token, sent with every RPC whatever it needs."""

    def __init__(self, token: str) -> None:
        self._metadata: Metadata = (("authorization", _BEARER + token),)

    def authorize(self, claims: Claims, lifetime: float = LIFETIME) -> Metadata:
        return self._metadata


@dataclasses.dataclass(frozen=True)
class _Keys:
    keys: tuple[bytes, ...]
    allow_missing: bool


def parse_keys(text: str) -> _Keys:
    """Keys of ``--broker.auth-keys``; raises AuthorizationError naming a bad one."""
    keys: list[bytes] = []
    allow_missing = False
    for i, field in enumerate(text.replace(",", " ").split()):
        if field == ALLOW_MISSING_KEY:
            allow_missing = True
            continue
        try:
            keys.append(base64.b64decode(field, validate=True))
        except (binascii.Error, ValueError) as e:
            raise AuthorizationError(f"failed to decode key at index {i}: {e}") from None
    if not keys:
        raise AuthorizationError("at least one key must be provided")
    return _Keys(tuple(keys), allow_missing)


class KeyedAuth:
    """Signs with the first of pre-shared keys and verifies with any (``--broker.auth-keys``).

    Tokens are remembered once verified (bounded), so a token presented again
    costs a dictionary lookup and an expiry check; and a token signed for the
    same claims within the same second is the one signed before (its bytes
    would be identical).
    """

    def __init__(self, keys: str, *, clock: Callable[[], float] = time.time) -> None:
        parsed = parse_keys(keys)
        self.keys = parsed.keys
        self.allow_missing = parsed.allow_missing
        self.clock = clock
        self._verified: dict[str, Claims] = {}
        self._signed: dict[tuple[int, bytes, int], tuple[int, str]] = {}

    # -- Signing ---------------------------------------------------------------------

    def sign(self, claims: Claims, lifetime: float = LIFETIME) -> str:
        """A token of ``claims`` issued now, expiring ``lifetime`` seconds from now."""
        now = int(self.clock())
        cache_key = (
            int(claims.capability),
            claims.selector.SerializeToString(deterministic=True),
            int(lifetime),
        )
        hit = self._signed.get(cache_key)
        if hit is not None and hit[0] == now:
            return hit[1]
        stamped = dataclasses.replace(claims, issued_at=now, expires_at=now + int(lifetime))
        token = _jwt().encode(claims_to_json(stamped), self.keys[0], algorithm=_SIGNING_ALGORITHM)
        if len(self._signed) >= _VERIFIED_CACHE_SIZE:
            self._signed.clear()
        self._signed[cache_key] = (now, token)
        return token

    def authorize(self, claims: Claims, lifetime: float = LIFETIME) -> Metadata:
        return (("authorization", _BEARER + self.sign(claims, lifetime)),)

    # -- Verifying -------------------------------------------------------------------

    def verify(self, metadata: Iterable[tuple[str, Any]] | None, require: int) -> Claims:
        """The claims of the RPC's token, which must grant ``require``.

        Without an ``authorization`` header: refused, unless ``AA==`` is among
        the keys (then the RPC has ``require`` over every journal, for an hour).
        """
        value = _authorization(metadata)
        if value is None:
            if self.allow_missing:
                return Claims(require, expires_at=self.clock() + _ALLOW_MISSING_LIFETIME)
            raise AuthorizationError("missing or empty Authorization token")
        if not value.startswith(_BEARER):
            raise AuthorizationError(
                "invalid or unsupported Authorization header (expected 'Bearer')"
            )
        claims = self.parse(value[len(_BEARER) :])
        check_capability(claims.capability, require)
        return claims

    def parse(self, token: str) -> Claims:
        """The claims of ``token`` if one of our keys signed it and it is in force."""
        claims = self._verified.get(token)
        if claims is None:
            claims = self._decode(token)
            if len(self._verified) >= _VERIFIED_CACHE_SIZE:
                self._verified.clear()
            self._verified[token] = claims
        assert claims.expires_at is not None  # "exp" is required.
        if claims.expires_at <= self.clock() - LEEWAY:
            raise AuthorizationError(
                "verifying Authorization: token has invalid claims: token is expired"
            )
        return claims

    def _decode(self, token: str) -> Claims:
        import jwt

        codec = _jwt()
        failure: Exception | None = None
        for key in self.keys:
            try:
                payload = codec.decode(token, key, algorithms=list(_ALGORITHMS), leeway=LEEWAY)
            except jwt.InvalidSignatureError as e:
                failure = e  # Another key may have signed it.
                continue
            except (jwt.PyJWTError, ValueError, TypeError, RecursionError, OverflowError) as e:
                # pyjwt lets a few malformations through as plain Python errors.
                raise AuthorizationError(
                    f"verifying Authorization: {_describe_jwt_error(e)}"
                ) from None
            return claims_from_json(payload)
        assert failure is not None
        raise AuthorizationError(f"verifying Authorization: {_describe_jwt_error(failure)}")


class ServerAuth(Authorizer, Verifier, Protocol):
    """What a server holds: it verifies its RPCs' tokens and signs those of its calls to peers."""


class SwappableAuth:
    """A server's :class:`KeyedAuth` (or :class:`NoopAuth`), replaced whole on key rotation.

    Servers keep this holder and consult it on every call, never a copy of
    the keys. :meth:`swap` installs a new key set in one assignment (the
    event loop runs one call at a time), so a request is verified, and a peer
    call signed, under either the old keys or the new ones, never a mix; and
    the new KeyedAuth starts with empty caches, so a token of a retired key is
    refused from the next request on (RPCs already running keep going until
    their token expires, as they would in Gazette).
    """

    def __init__(self, current: KeyedAuth | NoopAuth) -> None:
        self._current = current
        self._watchers: list[Callable[[KeyedAuth | NoopAuth], None]] = []

    @property
    def current(self) -> KeyedAuth | NoopAuth:
        """The key set in force."""
        return self._current

    def watch(self, watcher: Callable[[KeyedAuth | NoopAuth], None]) -> None:
        """Call ``watcher`` with the key set in force, now and on every swap (the
        native front door checks tokens with the same keys)."""
        self._watchers.append(watcher)
        watcher(self._current)

    def swap(self, new: KeyedAuth | NoopAuth) -> KeyedAuth | NoopAuth:
        """Put ``new`` in force from the next call on; returns the key set it replaced."""
        old, self._current = self._current, new
        for watcher in self._watchers:
            watcher(new)
        return old

    def verify(self, metadata: Iterable[tuple[str, Any]] | None, require: int) -> Claims:
        return self._current.verify(metadata, require)

    def authorize(self, claims: Claims, lifetime: float = LIFETIME) -> Metadata:
        return self._current.authorize(claims, lifetime)


def new_authorizer(auth_keys: str = "", auth_token: str = "") -> KeyedAuth | BearerAuth | NoopAuth:
    """The authorizer of a client: keys sign per-RPC claims, else a static token, else none.

    As Gazette's clients choose (``--broker.auth-keys`` wins over ``--broker.auth-token``).
    """
    if auth_keys:
        return KeyedAuth(auth_keys)
    if auth_token:
        return BearerAuth(auth_token)
    return NoopAuth()


# -- Minting tokens from a shell ---------------------------------------------------------


def _parse_capability(text: str) -> int:
    out = 0
    for part in text.replace("|", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if part.upper() in Capability.__members__:
            out |= Capability[part.upper()]
            continue
        try:
            value = int(part, 0)
        except ValueError:
            names = ", ".join(Capability.__members__)
            raise argparse.ArgumentTypeError(
                f"unknown capability {part!r} (expected {names}, or a number)"
            ) from None
        if not 0 <= value <= _MAX_CAPABILITY:
            raise argparse.ArgumentTypeError(f"capability {part!r} is not a 32-bit mask")
        out |= value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gazette.broker.protocol.auth``: print a token signed with the first key."""
    parser = argparse.ArgumentParser(
        prog="python -m gazette.broker.protocol.auth",
        description="Mint a Gazette authorization token (a JWT signed with the first of "
        "--keys) granting capabilities over the journals a label selector selects. Send "
        "it as 'Authorization: Bearer <token>', e.g. with gazctl --broker.auth-token.",
    )
    parser.add_argument(
        "--keys",
        default=os.environ.get("BROKER_AUTH_KEYS", ""),
        help="Base64 keys, as --broker.auth-keys (default: $BROKER_AUTH_KEYS)",
    )
    parser.add_argument(
        "--cap",
        required=True,
        type=_parse_capability,
        help="Capabilities, e.g. READ,LIST (names: "
        + ", ".join(Capability.__members__)
        + "; numbers for application bits)",
    )
    parser.add_argument(
        "-l", "--selector", default="", help="Label selector of the journals (default: all)"
    )
    parser.add_argument(
        "--ttl", default="1h", help="Lifetime of the token, a Go duration (default: 1h)"
    )
    ns = parser.parse_args(argv)
    try:
        sel = selector.parse_selector(ns.selector)
        lifetime = durations.parse_duration(ns.ttl)
        if lifetime <= 0:
            raise ValueError(f"--ttl {ns.ttl}: must be positive")
        token = KeyedAuth(ns.keys).sign(Claims(ns.cap, sel), lifetime)
    except (AuthorizationError, ValidationError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
