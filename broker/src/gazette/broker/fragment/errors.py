"""Errors of the fragment layer.

Hierarchy::

    FragmentError                   base of everything raised here
    ├── CodecError                  undecodable or truncated fragment bytes, unknown codec
    ├── IndexClosedError            a blocked Index.query woken because its index closed
    ├── FragmentReadError           a store's fragment did not decode to exactly its span
    ├── SpoolWriteError             the local spool file could not be written (disk full)
    └── StoreError                  a fragment store operation failed (``store`` = its URL)
        ├── StoreConfigError        the store URL could not be turned into a store
        │                           (unknown scheme, unknown query key, no S3 region)
        └── HealthCheckError        a step of the periodic health check failed

Store implementations raise :class:`StoreError` wrapping the library's
exception (``raise StoreError(...) from e``); ``Store.is_auth_error`` looks at
that cause. Proposal/content validation failures of a spool are
``pb.ValidationError`` (they are protocol errors, mapped at the RPC edge).
"""

from __future__ import annotations


class FragmentError(Exception):
    """Base class of fragment-layer errors."""


class CodecError(FragmentError):
    """Bytes that do not decode under their codec, or an unsupported codec."""


class IndexClosedError(FragmentError):
    """The index was closed while a query waited on it."""


class FragmentReadError(FragmentError):
    """A fragment read from a store was shorter or longer than its span."""

    def __init__(self, message: str, *, fragment_name: str) -> None:
        super().__init__(message)
        self.fragment_name = fragment_name


class SpoolWriteError(FragmentError):
    """Content could not be written to the local spool file (e.g. the disk is full).

    Go's spool retries such writes forever (``broker/fragment/spool.go``); we fail
    the request instead, so that the append fails and its client retries, rather
    than every append of the journal hanging until space comes back.
    """


class StoreError(FragmentError):
    """A fragment store operation failed.

    ``store`` is the FragmentStore URL, ``op`` the operation (signget, exists,
    get, put, list, remove) and ``path`` the store-relative path, when known.
    """

    def __init__(self, message: str, *, store: str = "", op: str = "", path: str = "") -> None:
        super().__init__(message)
        self.store = store
        self.op = op
        self.path = path


class StoreConfigError(StoreError):
    """A FragmentStore URL that cannot be used (scheme, query arguments, region)."""


class HealthCheckError(StoreError):
    """A step of the store health check failed."""
