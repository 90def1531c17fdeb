"""Moving between a node tree and flat JournalSpecs.

``flatten`` (what ``gazctl journals apply`` does) pushes every directory's
values down to the journals beneath it and turns each journal into an
``ApplyRequest.Change``. ``hoist`` (what ``gazctl journals list -o yaml`` does)
goes the other way: it groups journals into directories at the ``/`` where
their names diverge and lifts values shared by all children into the parent.
The two are inverses: ``flatten(hoist(x))`` is ``x`` again.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence

from gazette.broker import protocol as pb
from gazette.broker.journalspace import errors
from gazette.broker.journalspace import node as nodes

__all__ = [
    "flatten",
    "from_list_response",
    "hoist",
    "hoist_node",
    "node_from_spec",
    "push_down",
    "spec_from_node",
]


# --- field algebra over nodes ----------------------------------------------------------
#
# The three operations mirror Gazette's Union/Intersect/SubtractJournalSpecs. A
# zero value means "unset" throughout; `stores` is unset only when None.


def _union(child: nodes.Node, parent: nodes.Node) -> None:
    """Fill the child's unset fields from the parent (in place); the child wins."""
    child.replication = child.replication or parent.replication
    child.labels = _labels_from(pb.union(_labelset(child.labels), _labelset(parent.labels)))
    cf, pf = child.fragment, parent.fragment
    cf.length = cf.length or pf.length
    cf.compression_codec = cf.compression_codec or pf.compression_codec
    if cf.stores is None and pf.stores is not None:
        cf.stores = list(pf.stores)
    cf.refresh_interval = cf.refresh_interval or pf.refresh_interval
    cf.retention = cf.retention or pf.retention
    cf.flush_interval = cf.flush_interval or pf.flush_interval
    cf.path_postfix_template = cf.path_postfix_template or pf.path_postfix_template
    child.flags = child.flags or parent.flags
    child.max_append_rate = child.max_append_rate or parent.max_append_rate
    # `suspend` is deliberately not inherited: it is per-journal broker state.


def _intersect(a: nodes.Node, b: nodes.Node) -> None:
    """Keep only the fields of `a` that `b` has equally (in place)."""
    if a.replication != b.replication:
        a.replication = 0
    a.labels = _labels_from(pb.intersect(_labelset(a.labels), _labelset(b.labels)))
    af, bf = a.fragment, b.fragment
    if af.length != bf.length:
        af.length = 0
    if af.compression_codec != bf.compression_codec:
        af.compression_codec = 0
    if af.stores != bf.stores:
        af.stores = None
    if af.refresh_interval != bf.refresh_interval:
        af.refresh_interval = 0
    if af.retention != bf.retention:
        af.retention = 0
    if af.flush_interval != bf.flush_interval:
        af.flush_interval = 0
    if af.path_postfix_template != bf.path_postfix_template:
        af.path_postfix_template = ""
    if a.flags != b.flags:
        a.flags = 0
    if a.max_append_rate != b.max_append_rate:
        a.max_append_rate = 0
    a.suspend = None


def _subtract(child: nodes.Node, parent: nodes.Node) -> None:
    """Unset the child's fields that the parent already provides (in place)."""
    if child.replication == parent.replication:
        child.replication = 0
    child.labels = _labels_from(pb.subtract(_labelset(child.labels), _labelset(parent.labels)))
    cf, pf = child.fragment, parent.fragment
    if cf.length == pf.length:
        cf.length = 0
    if cf.compression_codec == pf.compression_codec:
        cf.compression_codec = 0
    if cf.stores == pf.stores:
        cf.stores = None
    if cf.refresh_interval == pf.refresh_interval:
        cf.refresh_interval = 0
    if cf.retention == pf.retention:
        cf.retention = 0
    if cf.flush_interval == pf.flush_interval:
        cf.flush_interval = 0
    if cf.path_postfix_template == pf.path_postfix_template:
        cf.path_postfix_template = ""
    if child.flags == parent.flags:
        child.flags = 0
    if child.max_append_rate == parent.max_append_rate:
        child.max_append_rate = 0


def _labelset(labels: Sequence[nodes.Label]) -> pb.LabelSet:
    return pb.LabelSet(
        labels=[pb.Label(name=lb.name, value=lb.value, prefix=lb.prefix) for lb in labels]
    )


def _labels_from(labels: pb.LabelSet) -> list[nodes.Label]:
    return [nodes.Label(lb.name, lb.value, lb.prefix) for lb in labels.labels]


def _copy(node: nodes.Node) -> nodes.Node:
    """A deep copy of the node's own fields, without children."""
    return dataclasses.replace(
        node,
        labels=list(node.labels),
        fragment=dataclasses.replace(
            node.fragment,
            stores=None if node.fragment.stores is None else list(node.fragment.stores),
        ),
        suspend=None if node.suspend is None else dataclasses.replace(node.suspend),
        children=[],
    )


def _spec_fields_only(node: nodes.Node) -> nodes.Node:
    """Only the JournalSpec fields that directories pass down (no name, suspend...)."""
    out = _copy(node)
    out.comment, out.delete, out.name, out.suspend, out.revision = "", None, "", None, 0
    return out


# --- push down and flatten --------------------------------------------------------------


def push_down(node: nodes.Node) -> nodes.Node:
    """Return a copy of the tree in which every journal holds its full, inherited values.

    Each child takes every field it leaves unset from its parent: labels are a
    union in which the child's values of a label name win; stores are taken only
    when the child has none listed; ``delete`` is taken when the child leaves it
    unset. ``suspend`` is never inherited. Directories are left holding only
    their name and children, as their values now live in their journals.
    """
    return _push_down(node, None, None)


def _push_down(node: nodes.Node, inherited: nodes.Node | None, delete: bool | None) -> nodes.Node:
    out = _copy(node)
    if out.delete is None:
        out.delete = delete
    if inherited is not None:
        _union(out, inherited)
    if not out.is_dir:
        return out
    below = _spec_fields_only(out)
    out.children = [_push_down(c, below, out.delete) for c in node.children]
    return nodes.Node(comment=out.comment, name=out.name, children=out.children)


def flatten(node: nodes.Node) -> list[pb.ApplyRequest.Change]:
    """Turn a tree into the ApplyRequest changes that ``gazctl journals apply`` sends.

    The tree's structure is checked first (``StructureError``). Each journal
    becomes, in tree order, either a delete (when ``delete`` is true, after
    inheritance) or an upsert of its fully inherited JournalSpec. Both expect the
    journal's ``revision``: for an upsert 0 creates and -1 applies unconditionally;
    a delete needs a revision (or -1). Each change must pass ``pb.validate``
    (``SpecError`` naming the journal and field otherwise).
    """
    nodes.validate(node)
    changes = []
    for journal in push_down(node).terminals():
        if journal.delete:
            change = pb.ApplyRequest.Change(
                expect_mod_revision=journal.revision, delete=journal.name
            )
        else:
            change = pb.ApplyRequest.Change(
                expect_mod_revision=journal.revision, upsert=spec_from_node(journal)
            )
        try:
            pb.validate(change)
        except pb.ValidationError as e:
            raise errors.SpecError(journal.name, _in_journal_terms(e)) from e
        changes.append(change)
    return changes


def _in_journal_terms(e: pb.ValidationError) -> pb.ValidationError:
    """Re-root a Change's validation error at the journal: its spec's own field
    path, or ``revision`` for a bad expected revision."""
    if e.context[:1] == ("Upsert",):
        return pb.ValidationError(e.reason, e.context[1:])
    if "ExpectModRevision" in e.reason:
        return pb.ValidationError(e.reason, ("revision", *e.context))
    return e


def spec_from_node(node: nodes.Node) -> pb.JournalSpec:
    """The JournalSpec of a (pushed-down) journal node.

    The message is shaped as Gazette's Go encoder shapes it: ``labels``,
    ``fragment`` and its three durations are always present (they are
    non-nullable in Go), so our bytes in etcd are Gazette's bytes; ``suspend``
    is present only when the node has one.
    """
    fragment = node.fragment
    spec = pb.JournalSpec(
        name=node.name,
        replication=node.replication,
        labels=_labelset(node.labels),
        fragment=pb.JournalSpec.Fragment(
            length=fragment.length,
            compression_codec=pb.CompressionCodec.ValueType(fragment.compression_codec),
            stores=fragment.stores or (),
            refresh_interval=pb.duration_from_nanos(fragment.refresh_interval),
            retention=pb.duration_from_nanos(fragment.retention),
            flush_interval=pb.duration_from_nanos(fragment.flush_interval),
            path_postfix_template=fragment.path_postfix_template,
        ),
        flags=node.flags,
        max_append_rate=node.max_append_rate,
    )
    if node.suspend is not None:
        spec.suspend.level = pb.JournalSpec.Suspend.Level.ValueType(node.suspend.level)
        spec.suspend.offset = node.suspend.offset
        spec.suspend.SetInParent()
    return spec


# --- hoist ------------------------------------------------------------------------------


def node_from_spec(spec: pb.JournalSpec, revision: int = 0) -> nodes.Node:
    """A journal node holding every field of `spec` (empty stores read as unset)."""
    fragment = spec.fragment
    suspend = None
    if spec.HasField("suspend"):
        suspend = nodes.Suspend(level=spec.suspend.level, offset=spec.suspend.offset)
    return nodes.Node(
        name=spec.name,
        replication=spec.replication,
        labels=_labels_from(spec.labels),
        fragment=nodes.Fragment(
            length=fragment.length,
            compression_codec=fragment.compression_codec,
            stores=list(fragment.stores) or None,
            refresh_interval=pb.duration_nanos(fragment.refresh_interval),
            retention=pb.duration_nanos(fragment.retention),
            flush_interval=pb.duration_nanos(fragment.flush_interval),
            path_postfix_template=fragment.path_postfix_template,
        ),
        flags=spec.flags,
        max_append_rate=spec.max_append_rate,
        suspend=suspend,
        revision=revision,
    )


def hoist(journals: Iterable[tuple[pb.JournalSpec, int]]) -> nodes.Node:
    """Render (spec, mod_revision) pairs as the tree ``gazctl journals list -o yaml`` prints.

    Journals are grouped into directories at ``/`` boundaries, a level being
    made only where journal names diverge; each directory then holds the values
    all its children share, and each child only what differs. Journals keep
    their ``revision`` and ``suspend``. No journals give an empty root node.
    """
    leaves = sorted((node_from_spec(s, r) for s, r in journals), key=lambda n: n.name)
    for prev, cur in itertools.pairwise(leaves):
        if prev.name == cur.name:
            raise ValueError(f"journal {cur.name!r} is listed more than once")
    return _hoist(_extract_tree(leaves))


def from_list_response(resp: pb.ListResponse) -> nodes.Node:
    """``hoist`` of the journals of a List RPC response."""
    return hoist((j.spec, j.mod_revision) for j in resp.journals)


def hoist_node(node: nodes.Node) -> nodes.Node:
    """Return a copy of the tree with values shared by all children lifted into parents.

    The tree is pushed down first, so what each journal means is unchanged. Then,
    bottom-up, a directory takes the values (and ``delete``) on which all its
    children agree, and those values are cleared from the children.
    ``suspend`` is never lifted.
    """
    return _hoist(push_down(node))


def _hoist(node: nodes.Node) -> nodes.Node:
    out = _copy(node)
    if not out.is_dir or not node.children:
        return out
    children = [_hoist(c) for c in node.children]

    shared = _spec_fields_only(children[0])
    delete = children[0].delete
    for child in children[1:]:
        _intersect(shared, child)
        if child.delete != delete:
            delete = None

    _union(out, shared)
    if delete is not None:
        out.delete = delete
    for child in children:
        _subtract(child, out)
        if out.delete is not None and child.delete == out.delete:
            child.delete = None
    out.children = children
    return out


def _extract_tree(leaves: list[nodes.Node]) -> nodes.Node:
    """Group name-sorted journals into directories where their names diverge.

    A directory sits at each ``/``-bounded prefix that is the longest shared
    prefix of some pair of neighbouring names, and holds the neighbours that
    share it. So no chain of single-child directories is made: ``a/b/c/x`` and
    ``a/b/c/y`` give one directory ``a/b/c/``, not ``a/``, ``a/b/`` and ``a/b/c/``.

    Gazette gets the same tree by repeatedly replacing the run of adjacent nodes
    with the longest shared prefix by a directory node, which is quadratic in
    the number of journals; this splits each range at its shortest neighbour
    prefix instead, in time proportional to journals times name depth.
    """
    if not leaves:
        return nodes.Node()
    shared = [0] + [_shared_prefix(a.name, b.name) for a, b in itertools.pairwise(leaves)]
    return _build(leaves, shared, 0, len(leaves))


def _build(leaves: list[nodes.Node], shared: list[int], lo: int, hi: int) -> nodes.Node:
    # shared[i] is the prefix length that leaves[i - 1] and leaves[i] have in common.
    if hi - lo == 1:
        return leaves[lo]
    depth = min(shared[lo + 1 : hi])
    children = []
    begin = lo
    for i in range(lo + 1, hi):
        if shared[i] == depth:
            children.append(_build(leaves, shared, begin, i))
            begin = i
    children.append(_build(leaves, shared, begin, hi))
    return nodes.Node(name=leaves[lo].name[:depth], children=children)


def _shared_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of `a` and `b` that ends in ``/``."""
    if len(a) > len(b):
        a, b = b, a
    length = 0
    while True:
        slash = a.find("/", length)
        if slash == -1 or a[: slash + 1] != b[: slash + 1]:
            return length
        length = slash + 1
