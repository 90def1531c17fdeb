"""The journal YAML hierarchy of ``gazctl journals apply / edit / list -o yaml``.

JournalSpecs are stored in etcd fully spelled out, which is tedious to read
and write by hand. This package maps a set of JournalSpecs to a tree in which
journals sharing a ``/``-separated name prefix sit under a *directory* node
holding the values they have in common, and maps such a tree back to specs.

A node has the keys ``comment``, ``delete``, the JournalSpec fields ``name``,
``replication``, ``labels``, ``fragment``, ``flags``, ``max_append_rate``,
``suspend``, and then ``revision`` and ``children``. A node whose name is empty
or ends in ``/`` is a directory (it needs children, has no revision, and its
children are sorted and start with its name); any other node is a journal.
A journal inherits each field it leaves unset from the directories above it
(labels merge by name, the nearer value winning); ``suspend`` is never
inherited.

Key types and functions:

- ``Node`` (with ``Label``, ``Fragment``, ``Suspend``): the tree, plain dataclasses.
- ``load(text) -> Node`` / ``dump(node) -> str``: strict YAML decoding and
  Gazette-identical encoding; ``dump(load(text)) == text`` for dumped text.
- ``flatten(node) -> list[pb.ApplyRequest.Change]``: what ``apply`` sends; each
  upsert is a fully inherited, validated JournalSpec expecting the node's revision.
- ``hoist([(spec, mod_revision), ...]) -> Node``: what ``list -o yaml`` prints;
  ``flatten(load(dump(hoist(x))))`` gives back exactly ``x``.
- ``validate(node)``, ``push_down(node)``, ``hoist_node(node)``,
  ``from_list_response(resp)``, ``spec_from_node`` / ``node_from_spec``.
- Errors (``errors.py``): ``JournalSpaceError`` > ``DecodeError``,
  ``StructureError``, ``SpecError``; each names the node and the field.

Usage::

    from gazette.broker import journalspace

    tree = journalspace.load(open("journals.yaml"))
    request = pb.ApplyRequest(changes=journalspace.flatten(tree))

    text = journalspace.dump(journalspace.from_list_response(list_response))

Modelled on Gazette's ``broker/journalspace/node.go``.
"""

from gazette.broker.journalspace.codec import dump, load
from gazette.broker.journalspace.errors import (
    DecodeError,
    JournalSpaceError,
    SpecError,
    StructureError,
)
from gazette.broker.journalspace.node import Fragment, Label, Node, Suspend, validate
from gazette.broker.journalspace.tree import (
    flatten,
    from_list_response,
    hoist,
    hoist_node,
    node_from_spec,
    push_down,
    spec_from_node,
)

__all__ = [
    "DecodeError",
    "Fragment",
    "JournalSpaceError",
    "Label",
    "Node",
    "SpecError",
    "StructureError",
    "Suspend",
    "dump",
    "flatten",
    "from_list_response",
    "hoist",
    "hoist_node",
    "load",
    "node_from_spec",
    "push_down",
    "spec_from_node",
    "validate",
]
