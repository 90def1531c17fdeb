"""The operator's bearer tokens for Shards' lag: READ of one journal or one shard, for a minute.

With authorization on, a lag round makes two kinds of calls, and each needs a token:

* a metadata-only ``Read`` at offset -1 to a broker, for a source journal's write head
  (brokers ask READ of that journal: Gazette ``broker/protocol/auth.go``);
* ``Stat`` to the shard's primary, for its read-through offsets (consumers ask READ of
  that shard, selected on its ``id``: Gazette ``consumer/protocol/auth.go``).

Nothing else: no LIST (the operator finds journals, shards and endpoints in the etcd
mirrors it keeps), no APPEND, APPLY or REPLICATE. So the operator signs its own tokens
from the cluster's keys, each granting READ of exactly the journal or shard of the call
and living :data:`TOKEN_LIFETIME` seconds; :class:`LagAuthorizer` refuses to sign
anything wider, so a future call asking more fails loudly rather than quietly getting it.
The tokens are Gazette's JWTs (:mod:`gazette.broker.protocol.auth`), so Go brokers and
consumers sharing the keys take them as they are.

Why the operator holds the signing keys at all (rather than a token minted for it): it
already writes every JournalSpec and ShardSpec into etcd, and an etcd writer can give
itself any journal's content (register a member the allocator makes a replica, point a
journal at another store), so the keys add no reach, only a more direct one; while a
token minted elsewhere must outlive every rotation it is not renewed across (its
expiry is fixed when it is signed), which makes it longer-lived and wider in time
than per-call tokens of a minute. A separate key for the operator would narrow
nothing either: a broker honours whatever claims any of its keys signed.

Keys come as brokers take them: inline (``--broker.auth-keys``) or from a file
(``--broker.auth-keys-file``, e.g. a mounted Secret), re-read at the start of a round
when it changed, so a rotated Secret reaches the operator without a restart. Consumers
may verify with other keys (``--consumer.auth-keys`` / ``-file``); without them the
Stat carries no token, as gazctl's does without ``--consumer.auth-keys``.

Usage::

    keys = lagauth.Keys(keys_file="/etc/gazette/auth/auth-keys", flag="--broker.auth-keys")
    keys.refresh()  # AuthorizationError naming the flag if the file has no keys
    signer = lagauth.LagAuthorizer(keys)
    signer.authorize(auth.journal_claims(auth.Capability.READ, "a/journal"))
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable

from gazette.broker import protocol as pb
from gazette.broker.protocol import auth

__all__ = ["TOKEN_LIFETIME", "Keys", "LagAuthorizer", "shard_claims"]

logger = logging.getLogger(__name__)

#: Seconds a lag token lives: a round's calls take at most ``--shard-lag-interval``'s
#: Stat timeout (10 s), and every call signs afresh, so a minute is ample and a token
#: seen in a log or a proxy is worthless soon after.
TOKEN_LIFETIME = 60.0
#: The keys file is a Secret's key: anything larger is not one.
_MAX_FILE_SIZE = 64 << 10
#: The labels a lag token may pin: a journal's name, a shard's id.
_PINS = ("name", "id")


def shard_claims(capability: int, shard_id: str) -> auth.Claims:
    """Claims of ``capability`` over one shard (selected on its ``id`` meta-label)."""
    sel = pb.LabelSelector()
    sel.include.labels.add(name="id", value=shard_id)
    return auth.Claims(capability, sel)


@dataclasses.dataclass(frozen=True, slots=True)
class _Loaded:
    signature: tuple[int, int, int, int] | None
    keyed: auth.KeyedAuth


class Keys:
    """The keys of one flag: ``keys`` inline, or the file ``keys_file`` (re-read on change).

    Neither given: :attr:`current` is None and calls carry no token. ``flag`` names the
    inline flag (the file's is ``<flag>-file``) in every error.
    """

    def __init__(
        self,
        keys: str = "",
        keys_file: str = "",
        *,
        flag: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if keys and keys_file:
            raise pb.AuthorizationError(f"{flag} and {flag}-file are mutually exclusive")
        self.flag = flag
        self._keys = keys
        self._file = keys_file
        self._clock = clock
        self._loaded: _Loaded | None = None
        self._failure = ""

    @property
    def configured(self) -> bool:
        return bool(self._keys or self._file)

    @property
    def current(self) -> auth.KeyedAuth | None:
        """The keys in force (None: no keys were given)."""
        return self._loaded.keyed if self._loaded else None

    def refresh(self) -> None:
        """Load the keys, or reload the file if it changed since.

        Raises AuthorizationError naming the flag when there are no good keys to use.
        A file that turns bad after it was good (a rotation half done) leaves the good
        keys in force, with a warning: the brokers keep theirs likewise.
        """
        if self._keys:
            if self._loaded is None:
                try:
                    self._loaded = _Loaded(None, auth.KeyedAuth(self._keys, clock=self._clock))
                except pb.AuthorizationError as e:
                    raise pb.AuthorizationError(f"{self.flag}: {e}") from None
            return
        if not self._file:
            return
        flag = f"{self.flag}-file"
        try:
            st = os.stat(self._file)  # Follows a mounted Secret's symlinks.
            signature = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if self._loaded is not None and self._loaded.signature == signature:
                return
            keyed = self._read()
        except (OSError, pb.AuthorizationError) as e:
            why = (e.strerror or str(e)) if isinstance(e, OSError) else str(e)
            text = f"{flag}: {self._file}: {why}"
            if self._loaded is None:
                raise pb.AuthorizationError(text) from None
            if text != self._failure:
                logger.warning("%s; signing with the keys read before", text)
            self._failure = text
            return
        if self._loaded is not None:
            logger.info("%s: %s changed: signing with its new keys", flag, self._file)
        self._loaded = _Loaded(signature, keyed)
        self._failure = ""

    def _read(self) -> auth.KeyedAuth:
        with open(self._file, "rb") as f:
            data = f.read(_MAX_FILE_SIZE + 1)
        if len(data) > _MAX_FILE_SIZE:
            raise pb.AuthorizationError(f"larger than {_MAX_FILE_SIZE} bytes: not a keys file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise pb.AuthorizationError(f"not UTF-8 text: {e}") from None
        return auth.KeyedAuth(text, clock=self._clock)


class LagAuthorizer:
    """Signs lag's calls (an :class:`~gazette.broker.protocol.auth.Authorizer`): READ only,
    of one journal or one shard, for at most ``lifetime`` seconds.

    Asked for anything wider it raises AuthorizationError: only a change of the lag code
    can ask that, and it should fail its tests rather than widen the operator's tokens.
    """

    def __init__(self, keys: Keys, *, lifetime: float = TOKEN_LIFETIME) -> None:
        self.keys = keys
        self.lifetime = lifetime

    def authorize(self, claims: auth.Claims, lifetime: float = auth.LIFETIME) -> auth.Metadata:
        if claims.capability != auth.Capability.READ:
            raise pb.AuthorizationError(
                f"lag tokens grant READ only, not capability {int(claims.capability):#x}"
            )
        include, exclude = claims.selector.include.labels, claims.selector.exclude.labels
        if (
            len(include) != 1
            or exclude
            or include[0].name not in _PINS
            or not include[0].value
            or include[0].prefix
        ):
            raise pb.AuthorizationError(
                "lag tokens select one journal (name=) or one shard (id=), not "
                f"{pb.format_selector(claims.selector) or 'every one'!r}"
            )
        keyed = self.keys.current
        if keyed is None:
            return ()
        return keyed.authorize(claims, min(lifetime, self.lifetime))
