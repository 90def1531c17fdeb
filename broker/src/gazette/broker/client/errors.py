"""Errors of the broker client.

Hierarchy::

    Exception
     └── ClientError                    anything this package raises on purpose
          ├── StatusError               a broker answered with a non-OK ``pb.Status``
          │    ├── JournalNotFound            (JOURNAL_NOT_FOUND)
          │    ├── NoJournalPrimaryBroker     (NO_JOURNAL_PRIMARY_BROKER)
          │    ├── NotJournalPrimaryBroker    (NOT_JOURNAL_PRIMARY_BROKER)
          │    ├── InsufficientJournalBrokers (INSUFFICIENT_JOURNAL_BROKERS)
          │    ├── NotJournalBroker           (NOT_JOURNAL_BROKER)
          │    ├── OffsetNotYetAvailable      (OFFSET_NOT_YET_AVAILABLE)
          │    ├── EtcdTransactionFailed      (ETCD_TRANSACTION_FAILED)
          │    ├── NotAllowed                 (NOT_ALLOWED)
          │    ├── WrongAppendOffset          (WRONG_APPEND_OFFSET)
          │    ├── IndexHasGreaterOffset      (INDEX_HAS_GREATER_OFFSET)
          │    ├── RegisterMismatch           (REGISTER_MISMATCH)
          │    ├── Suspended                  (SUSPENDED)
          │    └── FragmentStoreUnhealthy     (FRAGMENT_STORE_UNHEALTHY)
          ├── TransportError            the RPC itself failed (a gRPC status code)
          ├── ProtocolViolation         a broker's response broke the protocol's rules
          ├── OffsetJump                a read skipped forward (not fatal: the reader goes on)
          ├── FragmentReadError         reading a fragment straight from its store failed
          │    ├── FragmentURLError          the store answered the signed URL with an error
          │    └── FragmentLengthError       the file decoded to more or fewer bytes than it spans
          ├── DeleteProbeNotRun         a broker ignored a store-health delete probe (older Gazette)
          └── DependencyFailed          an append's dependency failed, so it was not sent

`status_error` is the one place that maps a ``pb.Status`` to its class. Every
`StatusError` carries the status, the journal (if any) and the broker's
response header, so callers can branch on types and still print the details.
"""

from __future__ import annotations

import grpc

from gazette.broker import protocol as pb
from gazette.broker.protocol import dial

__all__ = [
    "ClientError",
    "DeleteProbeNotRun",
    "DependencyFailed",
    "EtcdTransactionFailed",
    "FragmentLengthError",
    "FragmentReadError",
    "FragmentStoreUnhealthy",
    "FragmentURLError",
    "IndexHasGreaterOffset",
    "InsufficientJournalBrokers",
    "JournalNotFound",
    "NoJournalPrimaryBroker",
    "NotAllowed",
    "NotJournalBroker",
    "NotJournalPrimaryBroker",
    "OffsetJump",
    "OffsetNotYetAvailable",
    "ProtocolViolation",
    "RegisterMismatch",
    "StatusError",
    "Suspended",
    "TransportError",
    "WrongAppendOffset",
    "is_refused",
    "is_transient",
    "status_error",
    "transport_error",
]


class ClientError(Exception):
    """Base of every error this package raises on purpose."""


class StatusError(ClientError):
    """A broker answered with a status other than OK."""

    status: int
    journal: str
    header: pb.Header | None
    detail: str

    def __init__(
        self,
        status: int,
        *,
        journal: str = "",
        header: pb.Header | None = None,
        detail: str = "",
    ) -> None:
        self.status = status
        self.journal = journal
        self.header = header
        self.detail = detail
        super().__init__(str(self))

    @property
    def status_name(self) -> str:
        return pb.enum_text(pb.Status, self.status)

    def __str__(self) -> str:
        text = self.status_name
        if self.journal:
            text += f" (journal {self.journal})"
        if self.detail:
            text += f": {self.detail}"
        return text


class JournalNotFound(StatusError):
    pass


class NoJournalPrimaryBroker(StatusError):
    pass


class NotJournalPrimaryBroker(StatusError):
    pass


class InsufficientJournalBrokers(StatusError):
    pass


class NotJournalBroker(StatusError):
    pass


class OffsetNotYetAvailable(StatusError):
    pass


class EtcdTransactionFailed(StatusError):
    pass


class NotAllowed(StatusError):
    pass


class WrongAppendOffset(StatusError):
    pass


class IndexHasGreaterOffset(StatusError):
    """The journal's persisted fragments end past its write head (its spools were lost
    or wiped while the store kept their content). The message names the fix."""

    def __str__(self) -> str:
        text = super().__str__()
        name = self.journal or "<journal>"
        return (
            f"{text}: the journal's fragment store holds content past its write head;"
            f" brokers resume at the store's end by themselves after --etcd.lease + 2s,"
            f" or run `gazctl journals reset-head -l name={name}`"
        )


class RegisterMismatch(StatusError):
    pass


class Suspended(StatusError):
    pass


class FragmentStoreUnhealthy(StatusError):
    pass


_BY_STATUS: dict[int, type[StatusError]] = {
    pb.JOURNAL_NOT_FOUND: JournalNotFound,
    pb.NO_JOURNAL_PRIMARY_BROKER: NoJournalPrimaryBroker,
    pb.NOT_JOURNAL_PRIMARY_BROKER: NotJournalPrimaryBroker,
    pb.INSUFFICIENT_JOURNAL_BROKERS: InsufficientJournalBrokers,
    pb.NOT_JOURNAL_BROKER: NotJournalBroker,
    pb.OFFSET_NOT_YET_AVAILABLE: OffsetNotYetAvailable,
    pb.ETCD_TRANSACTION_FAILED: EtcdTransactionFailed,
    pb.NOT_ALLOWED: NotAllowed,
    pb.WRONG_APPEND_OFFSET: WrongAppendOffset,
    pb.INDEX_HAS_GREATER_OFFSET: IndexHasGreaterOffset,
    pb.REGISTER_MISMATCH: RegisterMismatch,
    pb.SUSPENDED: Suspended,
    pb.FRAGMENT_STORE_UNHEALTHY: FragmentStoreUnhealthy,
}


def status_error(
    status: int, *, journal: str = "", header: pb.Header | None = None, detail: str = ""
) -> StatusError:
    """The `StatusError` subclass instance for a non-OK ``status``."""
    if status == pb.OK:
        raise ValueError("status_error of Status OK")
    cls = _BY_STATUS.get(status, StatusError)
    return cls(status, journal=journal, header=header, detail=detail)


class DeleteProbeNotRun(ClientError):
    """A FragmentStoreHealth asked to probe deletes came back OK without the probe's echo:
    the broker (e.g. a Go Gazette broker that predates the probe) ignored the request."""


class TransportError(ClientError):
    """The RPC failed at the gRPC level (``code`` is a ``grpc.StatusCode``)."""

    code: grpc.StatusCode
    details: str
    method: str
    address: str

    def __init__(
        self, code: grpc.StatusCode, details: str, *, method: str = "", address: str = ""
    ) -> None:
        self.code = code
        self.details = details
        self.method = method
        self.address = address
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.method} " if self.method else ""
        at = f" ({self.address})" if self.address else ""
        return f"{where}{self.code.name}: {self.details}{at}"


def transport_error(
    e: grpc.aio.AioRpcError, *, method: str = "", address: str = ""
) -> TransportError:
    """Wrap a grpc.aio error (raise the result ``from e``), its code as :func:`dial.rpc_code` reads it."""
    return TransportError(dial.rpc_code(e), e.details() or "", method=method, address=address)


class ProtocolViolation(ClientError):
    """A broker's response broke the protocol's rules (wraps ``pb.ValidationError``)."""

    def __init__(self, what: str, cause: Exception) -> None:
        self.what = what
        self.cause = cause
        super().__init__(f"{what}: {cause}")


class OffsetJump(ClientError):
    """The broker served content from a greater offset than requested.

    Happens when the journal's content below ``to_offset`` was removed (retention)
    or a hole was skipped. The reader stays usable and continues at ``to_offset``.
    """

    def __init__(self, journal: str, from_offset: int, to_offset: int) -> None:
        self.journal = journal
        self.from_offset = from_offset
        self.to_offset = to_offset
        super().__init__(f"offset jump in {journal} ({from_offset} => {to_offset})")


class FragmentReadError(ClientError):
    """Reading a fragment straight from its store (a signed URL) failed."""

    def __init__(self, message: str, *, url: str = "", fragment: pb.Fragment | None = None):
        self.url = url
        self.fragment = fragment
        super().__init__(message)


class FragmentURLError(FragmentReadError):
    """The store did not answer 200 OK for the signed URL (``http_status``)."""

    def __init__(self, url: str, http_status: int, reason: str = "") -> None:
        self.http_status = http_status
        status = f"{http_status} {reason}".strip()
        super().__init__(f"!OK fetching ({status}, {url!r})", url=url)


class FragmentLengthError(FragmentReadError):
    """A fragment file decoded to a length other than ``end - begin``."""


class DependencyFailed(ClientError):
    """An append was not sent because an append it depends on failed."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"dependency failed: {cause}")


# Routing outcomes that resolve themselves once the cluster's assignments settle.
_TRANSIENT_STATUS = (
    NotJournalPrimaryBroker,
    NoJournalPrimaryBroker,
    InsufficientJournalBrokers,
    NotJournalBroker,
)


_REFUSED_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def is_refused(err: BaseException) -> bool:
    """Whether a broker refused the call's credentials (retrying can't help)."""
    if isinstance(err, TransportError):
        return err.code in _REFUSED_CODES
    if isinstance(err, grpc.aio.AioRpcError):
        return err.code() in _REFUSED_CODES
    return False


def is_transient(err: BaseException) -> bool:
    """Whether an append/read failure is worth retrying as-is (as Gazette's `client.Append` retries).

    UNAVAILABLE transports (a broker went away, or is not up yet) and routing
    statuses are; everything else is the caller's problem.
    """
    if isinstance(err, _TRANSIENT_STATUS):
        return True
    return isinstance(err, TransportError) and err.code == grpc.StatusCode.UNAVAILABLE
