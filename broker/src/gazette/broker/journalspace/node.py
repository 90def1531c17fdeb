"""The node model of the journal YAML hierarchy, and its structural rules.

A node carries the fields of a JournalSpec "inline", but any of them may be
left at its zero value, meaning "inherit from my parent". Directories (name
empty or ending in ``/``) group children; journals (any other name) are the
leaves that become JournalSpecs.

Values are plain Python types mirroring the wire ones: enums are their integer
values (``pb.JournalSpec.O_RDWR``, ``pb.SNAPPY``), and durations are whole
nanoseconds, as Go's ``time.Duration`` is, so that no precision is lost on a
round trip through YAML.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from gazette.broker import protocol as pb
from gazette.broker.journalspace import errors

__all__ = ["Fragment", "Label", "Node", "Suspend", "describe", "validate"]


@dataclasses.dataclass(frozen=True)
class Label:
    """One label of a node. ``prefix`` exists only so that loading is faithful:
    a JournalSpec rejects it when the node is flattened."""

    name: str
    value: str = ""
    prefix: bool = False


@dataclasses.dataclass
class Fragment:
    """Fragment configuration of a node; zero values are inherited.

    ``stores`` is ``None`` when absent (inherit the parent's list); an explicit
    empty list overrides the parent with "no stores".
    """

    length: int = 0
    compression_codec: int = 0
    stores: list[str] | None = None
    refresh_interval: int = 0
    """Nanoseconds."""
    retention: int = 0
    """Nanoseconds; may be negative (keep forever)."""
    flush_interval: int = 0
    """Nanoseconds."""
    path_postfix_template: str = ""


@dataclasses.dataclass
class Suspend:
    """Suspension state of a journal: written by brokers, carried through edits."""

    level: int = 0
    offset: int = 0


@dataclasses.dataclass
class Node:
    """A directory or journal of the YAML hierarchy (see the package docstring).

    Fields are in the order they are written out. ``delete`` is ``None`` when
    unset, so that a child's explicit ``false`` can override a parent's ``true``.
    """

    comment: str = ""
    delete: bool | None = None
    name: str = ""
    replication: int = 0
    labels: list[Label] = dataclasses.field(default_factory=list)
    fragment: Fragment = dataclasses.field(default_factory=Fragment)
    flags: int = 0
    max_append_rate: int = 0
    suspend: Suspend | None = None
    revision: int = 0
    children: list[Node] = dataclasses.field(default_factory=list)

    @property
    def is_dir(self) -> bool:
        """Whether this node is a directory: its name is empty or ends in ``/``."""
        return self.name == "" or self.name.endswith("/")

    def terminals(self) -> Iterator[Node]:
        """Yield the journal (non-directory) nodes under this one, in tree order."""
        if not self.is_dir:
            yield self
            return
        for child in self.children:
            yield from child.terminals()


def describe(name: str, path: str) -> str:
    """How errors name a node: by its name, else by its position in the tree."""
    if name:
        return name
    return path or "(root)"


def validate(node: Node) -> None:
    """Raise ``StructureError`` if the tree breaks a rule of the hierarchy.

    Directories need one or more children, may not carry a revision, and their
    children must be prefixed by the directory name and strictly sorted by name.
    Journals need a valid journal name and may not have children. The
    JournalSpec fields themselves are partial here and are checked by
    ``flatten``, once inherited values are filled in.
    """
    _validate(node, "")


def _validate(node: Node, path: str) -> None:
    who = describe(node.name, path)
    if not node.is_dir:
        try:
            pb.validate_journal(node.name)
        except pb.ValidationError as e:
            raise errors.StructureError(who, _join("name", *e.context), e.reason) from e
        if node.children:
            raise errors.StructureError(
                who, "children", "a journal (a name not ending in '/') cannot have children"
            )
        return

    if node.revision != 0:
        raise errors.StructureError(
            who, "revision", f"a directory cannot have a revision ({node.revision})"
        )
    if not node.children:
        raise errors.StructureError(who, "children", "a directory needs one or more children")

    for i, child in enumerate(node.children):
        child_path = f"{path}.children[{i}]" if path else f"children[{i}]"
        if not child.name.startswith(node.name):
            raise errors.StructureError(
                who,
                f"children[{i}].name",
                f"child is not under its directory ({child.name!r} does not start with"
                f" {node.name!r})",
            )
        if i and node.children[i - 1].name >= child.name:
            raise errors.StructureError(
                who,
                f"children[{i}].name",
                f"children must be strictly sorted by name"
                f" ({node.children[i - 1].name!r} then {child.name!r})",
            )
        _validate(child, child_path)


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)
