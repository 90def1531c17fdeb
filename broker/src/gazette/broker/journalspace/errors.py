"""Errors of the journal YAML hierarchy.

Every error says *which node* (its journal or directory name, or its position in
the tree when it has no name) and *which field* (a dotted path of YAML keys such
as ``fragment.compression_codec`` or ``labels[1].value``) it is about::

    JournalSpaceError (ValueError)      .node, .field, .reason
    ├── DecodeError                     the text is not YAML, or does not fit the node schema
    │                                   (unknown key, wrong type, bad enum name or duration);
    │                                   .line and .column (1-based) of the offending value
    ├── StructureError                  the tree breaks a directory / journal rule
    │                                   (children sorted and prefixed, revision placement, ...)
    └── SpecError                       a journal's flattened JournalSpec fails validation;
                                        __cause__ and .error are the pb.ValidationError
"""

from __future__ import annotations

from gazette.broker import protocol as pb

__all__ = ["DecodeError", "JournalSpaceError", "SpecError", "StructureError"]


class JournalSpaceError(ValueError):
    """Base of journalspace errors: a node, a field within it, and the reason."""

    def __init__(self, node: str, field: str, reason: str) -> None:
        self.node = node
        self.field = field
        self.reason = reason
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [p for p in (self.node, self.field) if p]
        return ": ".join([*parts, self.reason])


class DecodeError(JournalSpaceError):
    """The YAML text could not be decoded into a node tree."""

    def __init__(
        self, node: str, field: str, reason: str, line: int | None = None, column: int | None = None
    ) -> None:
        self.line = line
        self.column = column
        super().__init__(node, field, reason)

    def _render(self) -> str:
        text = super()._render()
        if self.line is not None:
            text += f" (line {self.line}, column {self.column})"
        return text


class StructureError(JournalSpaceError):
    """The node tree is not well formed."""


class SpecError(JournalSpaceError):
    """The JournalSpec that a journal node flattens to is not valid.

    ``field`` is the dotted context of the underlying ``pb.ValidationError``
    (for example ``Fragment``) and ``reason`` its message, so the text reads
    ``examples/foo: Fragment: invalid Length (0; ...)``.
    """

    def __init__(self, node: str, error: pb.ValidationError) -> None:
        self.error = error
        super().__init__(node, ".".join(error.context), error.reason)
