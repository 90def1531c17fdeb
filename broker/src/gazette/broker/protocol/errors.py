"""Errors of the protocol layer.

Hierarchy::

    ValueError
     └── ValidationError      a message or value breaks a rule of the protocol
    Exception
     └── AuthorizationError   a request's bearer token is missing, invalid, or
                              doesn't grant what the request needs (brokers answer
                              UNAUTHENTICATED with its text, as Gazette does)
     └── TLSConfigError       a TLS certificate, key or CA file can't be read or
                              doesn't parse (``gazette.broker.protocol.dial``)

A `ValidationError` carries the dotted path of fields leading to the offending
value (`context`) and the rule it broke (`reason`). Nested validators add their
field name in front of the context as the error travels outwards, so the final
text reads like Gazette's, e.g. ``Fragment.Journal: must be a clean path (a//b)``.
`within` is that step as a context manager::

    with within("Journal"):
        validate_journal(m.journal)   # fails as "Journal: ..."
"""

from __future__ import annotations

from types import TracebackType

__all__ = ["AuthorizationError", "TLSConfigError", "ValidationError", "within"]


class ValidationError(ValueError):
    """A protocol message or value is not well-formed.

    ``str(e)`` is ``".".join(e.context) + ": " + e.reason``, or just the reason
    when the context is empty.
    """

    context: tuple[str, ...]
    reason: str

    def __init__(self, reason: str, context: tuple[str, ...] = ()) -> None:
        super().__init__(reason, context)
        self.reason = reason
        self.context = context

    def within(self, field: str) -> ValidationError:
        """Prefix `field` to the context (in place) and return self, for re-raising."""
        self.context = (field, *self.context)
        return self

    def __str__(self) -> str:
        if self.context:
            return ".".join(self.context) + ": " + self.reason
        return self.reason

    def __repr__(self) -> str:
        return f"ValidationError({str(self)!r})"


class AuthorizationError(Exception):
    """A request is not authorized: ``str(e)`` says why (e.g. which capability is missing).

    Raised by :mod:`gazette.broker.protocol.auth` when a token is missing,
    malformed, expired, signed by an unknown key or lacks a capability, by
    brokers when a claim's selector doesn't cover an Apply's journal, and on
    the command line for keys that don't decode.
    """


class TLSConfigError(Exception):
    """A TLS setting can't be used: ``str(e)`` names the file (and its flag) and why.

    ``path`` is the file at fault ("" when the fault is a combination of settings).
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class within:
    """Prefix `field` to the context of a `ValidationError` raised in the block.

    The error propagates, and other exceptions pass, unchanged. Lower case, as
    it reads as a phrase (``with within("Spec"):``); a class rather than a
    generator, as validation runs on every RPC message.
    """

    __slots__ = ("field",)

    def __init__(self, field: str) -> None:
        self.field = field

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, ValidationError):
            exc.within(self.field)
