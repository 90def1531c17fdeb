"""Errors raised by :mod:`gazette.keyspace`.

Hierarchy::

    KeySpaceError                    base of everything this package raises
    ├── InvalidRootError             a root prefix that is not a clean path (ValueError too)
    ├── InconsistentUpdateError      an update that would make the mirror lie:
    │   ├── ClusterMismatchError     ... it comes from another etcd cluster
    │   └── RevisionRegressionError  ... its revisions go backwards
    ├── WatchCompactedError          the watch resume revision was compacted away
    ├── EtcdConfigError              bad --etcd.* connection options (ValueError too)
    └── EtcdError                    an etcd call failed (wraps the client's exception)
        └── EtcdAuthError            etcd refused --etcd.username and its password

Decoder failures are not errors of the KeySpace: the key is logged and skipped,
so a bad value written by hand never stops a broker, and a later good value
brings the mirror back.
"""

from __future__ import annotations

__all__ = [
    "ClusterMismatchError",
    "EtcdAuthError",
    "EtcdConfigError",
    "EtcdError",
    "InconsistentUpdateError",
    "InvalidRootError",
    "KeySpaceError",
    "RevisionRegressionError",
    "WatchCompactedError",
]


class KeySpaceError(Exception):
    """Base of the errors of :mod:`gazette.keyspace`."""


class InvalidRootError(KeySpaceError, ValueError):
    """The root prefix of a KeySpace is not a clean path.

    ``root`` is what was given and ``clean`` what it would be once cleaned.
    """

    def __init__(self, root: str, clean: str) -> None:
        super().__init__(f"expected a clean path as KeySpace root ({root!r} != {clean!r})")
        self.root = root
        self.clean = clean


class InconsistentUpdateError(KeySpaceError):
    """An update can't be applied without making the mirror inconsistent with etcd."""


class ClusterMismatchError(InconsistentUpdateError):
    """A response came from another etcd cluster than the one the mirror was loaded from."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"etcd cluster ID mismatch (expected {expected}, got {got})")
        self.expected = expected
        self.got = got


class RevisionRegressionError(InconsistentUpdateError):
    """A response's revision is behind what the mirror already reflects."""

    def __init__(self, what: str, current: int, got: int) -> None:
        super().__init__(f"{what} went backwards (mirror is at revision {current}, got {got})")
        self.current = current
        self.got = got


class WatchCompactedError(KeySpaceError):
    """etcd compacted the revision the watch had to resume from: the mirror must be reloaded."""

    def __init__(self, resume_revision: int, compact_revision: int) -> None:
        super().__init__(
            f"watch from revision {resume_revision} failed: etcd compacted "
            f"revisions below {compact_revision}"
        )
        self.resume_revision = resume_revision
        self.compact_revision = compact_revision


class EtcdError(KeySpaceError):
    """An etcd request failed; ``__cause__`` is the client library's exception.

    ``code`` is the gRPC status code name when one is known (e.g. ``"UNAVAILABLE"``).
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class EtcdAuthError(EtcdError):
    """etcd refused to authenticate ``username`` (a wrong password, or no such user)."""

    def __init__(self, username: str, detail: str) -> None:
        super().__init__(
            f"etcd refused user {username!r} (--etcd.username): {detail}; check "
            "--etcd.password or the file of --etcd.password-file",
            code="INVALID_ARGUMENT",
        )
        self.username = username


class EtcdConfigError(KeySpaceError, ValueError):
    """An ``--etcd.*`` connection option is unusable; ``flag`` names it.

    The message starts with the flag, so a command-line parser can print it as is.
    """

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag
