"""Errors of the operator.

Hierarchy::

    OperatorError                 base of everything this package raises
    ├── InvalidSpecError          an object can't become a valid Gazette spec (ValueError too)
    ├── SpecStoreError            etcd failed or refused a read or write of a spec
    └── KubeAPIError              the API server failed or refused a status patch

Each maps to a reason of the object's Ready condition: ``InvalidSpec`` and
``EtcdError``. (A ``ResourceConflict`` is an outcome, not an error: the object
is fine, another one simply owns its name.)
"""

from __future__ import annotations

__all__ = ["InvalidSpecError", "KubeAPIError", "OperatorError", "SpecStoreError"]


class OperatorError(Exception):
    """Base of the errors of :mod:`gazette.operator`."""


class InvalidSpecError(OperatorError, ValueError):
    """The object's spec breaks a rule of Gazette (or of the CRD, when the schema was bypassed).

    ``field`` is the dotted path of the offending field of the object (``spec.fragment.length``),
    or of the Gazette message (``Fragment: ...``) when the protocol's validation refused it.
    """

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


class SpecStoreError(OperatorError):
    """Reading or writing a spec in etcd failed; ``__cause__`` is the underlying error.

    ``transient`` says a retry may succeed (etcd unavailable, a timeout).
    """

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


class KubeAPIError(OperatorError):
    """A call of :mod:`gazette.operator.kube` failed; ``status`` is the HTTP status, if any.

    The caller retries later (the status it meant to write is recomputed then).
    """

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status
