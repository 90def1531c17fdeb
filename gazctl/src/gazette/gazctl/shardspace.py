"""The shard YAML of ``gazctl shards apply``, ``edit`` and ``list -o yaml`` (Gazette's shardspace).

ShardSpecs are stored in etcd fully spelled out, which is tedious to read and
write by hand. A *shard set* writes them as one ``common`` ShardSpec holding
the values every shard shares, and a list of ``shards`` holding only what
differs; applying a set pushes ``common`` back down into each shard. The YAML
is Gazette's (``consumer/shardspace``), with its key names and order::

    common:
      recovery_log_prefix: examples/recovery-logs
      hint_prefix: /gazette/hints
      hint_backups: 2
      max_txn_duration: 1s
    shards:
    - id: chunks-part-000
      sources:
      - journal: examples/chunks/part-000
      revision: 1234          # etcd ModRevision: absent or 0 creates, -1 applies regardless
    - delete: true            # deletes the shard (a revision, or -1, is then required)
      id: chunks-part-001
      revision: 1240

A shard's keys are ``comment`` (kept for the reader, never applied),
``delete``, ``id``, the ShardSpec fields ``sources`` (``journal``,
``min_offset``), ``recovery_log_prefix``, ``hint_prefix``, ``hint_backups``,
``max_txn_duration``, ``min_txn_duration``, ``disable``, ``hot_standbys``,
``labels`` (``name``, ``value``), ``disable_wait_for_ack``,
``ring_buffer_size``, ``read_channel_size``, and then ``revision``.
``common`` takes the ShardSpec fields but ``id``. A field a shard leaves at
its zero value takes ``common``'s; labels merge by name, the shard's values
of a name winning. As in Gazette, zero means "unset": a shard can't turn off
a ``disable: true`` that ``common`` sets.

Key types and functions:

- :class:`Set` and :class:`Shard`: the document (ShardSpecs as ``pc.ShardSpec``).
- :func:`load` / :func:`dump`: strict YAML decoding (unknown or repeated keys,
  wrong types, bad durations and labels are errors naming the shard, the key
  path and the line) and Gazette-identical encoding; ``dump(load(t)) == t``
  for text ``dump`` wrote.
- :func:`hoist` / :func:`push_down`: lift shared values into ``common`` and
  back; :func:`from_list_response` is the hoisted set of a List RPC.
- :func:`apply_request`: the ``pc.ApplyRequest`` a set means, each change a
  fully pushed-down, validated ShardSpec (or delete) expecting the revision.
- :func:`union_specs`, :func:`intersect_specs`, :func:`subtract_specs`:
  Gazette's field-wise ShardSpec algebra the above are built on.

Errors::

    ShardSpaceError (ValueError)   .shard, .field, .reason
    ├── DecodeError                the text is not YAML or does not fit the schema;
    │                              .line and .column (1-based)
    └── SpecError                  a shard's pushed-down ShardSpec (or its revision)
                                   fails validation; .error is the pb.ValidationError

Usage::

    from gazette.gazctl import shardspace

    request = shardspace.apply_request(shardspace.load(open("shards.yaml")))
    text = shardspace.dump(shardspace.from_list_response(list_response))

This lives in gazctl, its only user, rather than beside the consumer protocol
as Gazette has it: see the consumer layering contract in ``pyproject.toml``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import IO

import yaml

from gazette.broker import protocol as pb
from gazette.broker.journalspace import codec
from gazette.consumer import protocol as pc

__all__ = [
    "DecodeError",
    "Set",
    "Shard",
    "ShardSpaceError",
    "SpecError",
    "apply_request",
    "dump",
    "from_list_response",
    "hoist",
    "intersect_specs",
    "load",
    "push_down",
    "subtract_specs",
    "union_specs",
]


# --- errors ----------------------------------------------------------------------------


class ShardSpaceError(ValueError):
    """Base of shardspace errors: which shard (or ``common``), which field, and why."""

    def __init__(self, shard: str, field: str, reason: str) -> None:
        self.shard = shard
        self.field = field
        self.reason = reason
        super().__init__(self._render())

    def _render(self) -> str:
        return ": ".join([p for p in (self.shard, self.field) if p] + [self.reason])


class DecodeError(ShardSpaceError):
    """The YAML text could not be decoded into a shard set."""

    def __init__(
        self,
        shard: str,
        field: str,
        reason: str,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.line = line
        self.column = column
        super().__init__(shard, field, reason)

    def _render(self) -> str:
        text = super()._render()
        if self.line is not None:
            text += f" (line {self.line}, column {self.column})"
        return text


class SpecError(ShardSpaceError):
    """A shard's change is not valid once ``common`` is pushed into it.

    ``field`` is the YAML key path the underlying ``pb.ValidationError`` is
    about (``sources[0].journal``, ``max_txn_duration``, ``revision``), so the
    text reads ``shard-A: max_txn_duration: invalid MaxTxnDuration (0; expected > 0)``.
    """

    def __init__(self, shard: str, field: str, error: pb.ValidationError) -> None:
        self.error = error
        super().__init__(shard, field, error.reason)


# --- the document ----------------------------------------------------------------------


@dataclasses.dataclass
class Shard:
    """One shard of a :class:`Set`: a partial ShardSpec and its etcd revision."""

    spec: pc.ShardSpec = dataclasses.field(default_factory=pc.ShardSpec)
    comment: str = ""
    #: True deletes the shard. None is "not written" (``delete: false`` is kept as False,
    #: so that it dumps back as written); nothing inherits it.
    delete: bool | None = None
    #: The etcd ModRevision the change expects: 0 creates, -1 applies unconditionally.
    revision: int = 0


@dataclasses.dataclass
class Set:
    """Shards, and the ShardSpec values they take where they leave a field unset."""

    common: pc.ShardSpec = dataclasses.field(default_factory=pc.ShardSpec)
    shards: list[Shard] = dataclasses.field(default_factory=list)


# --- the ShardSpec algebra (Gazette's Union/Intersect/SubtractShardSpecs) ----------------

# ShardSpec fields other than id, sources, labels and the two durations, and their zero
# values, which mean "unset".
_SCALARS: dict[str, str | int | bool] = {
    "recovery_log_prefix": "",
    "hint_prefix": "",
    "hint_backups": 0,
    "disable": False,
    "hot_standbys": 0,
    "disable_wait_for_ack": False,
    "ring_buffer_size": 0,
    "read_channel_size": 0,
}
_DURATIONS = ("max_txn_duration", "min_txn_duration")


def _copy(spec: pc.ShardSpec) -> pc.ShardSpec:
    out = pc.ShardSpec()
    out.CopyFrom(spec)
    return out


def _sources(spec: pc.ShardSpec) -> list[tuple[str, int]]:
    return [(s.journal, s.min_offset) for s in spec.sources]


def _nanos(spec: pc.ShardSpec, name: str) -> int:
    return pb.duration_nanos(getattr(spec, name))


def _set_nanos(spec: pc.ShardSpec, name: str, nanos: int) -> None:
    getattr(spec, name).CopyFrom(pb.duration_from_nanos(nanos))


def union_specs(a: pc.ShardSpec, b: pc.ShardSpec) -> pc.ShardSpec:
    """A copy of ``a`` taking ``b``'s value of every field ``a`` leaves zero (labels: by name)."""
    out = _copy(a)
    if not out.sources:
        out.sources.extend(b.sources)
    for name in _SCALARS:
        if not getattr(out, name):
            setattr(out, name, getattr(b, name))
    for name in _DURATIONS:
        if not _nanos(out, name):
            _set_nanos(out, name, _nanos(b, name))
    out.labels.CopyFrom(pb.union(a.labels, b.labels))
    return out


def intersect_specs(a: pc.ShardSpec, b: pc.ShardSpec) -> pc.ShardSpec:
    """A copy of ``a`` keeping only the field values (and labels) ``b`` has too."""
    out = _copy(a)
    if _sources(a) != _sources(b):
        del out.sources[:]
    for name in _SCALARS:
        if getattr(a, name) != getattr(b, name):
            setattr(out, name, _SCALARS[name])
    for name in _DURATIONS:
        if _nanos(a, name) != _nanos(b, name):
            _set_nanos(out, name, 0)
    out.labels.CopyFrom(pb.intersect(a.labels, b.labels))
    return out


def subtract_specs(a: pc.ShardSpec, b: pc.ShardSpec) -> pc.ShardSpec:
    """A copy of ``a`` with every field (and label name) whose value ``b`` shares zeroed."""
    out = _copy(a)
    if _sources(a) == _sources(b):
        del out.sources[:]
    for name in _SCALARS:
        if getattr(a, name) == getattr(b, name):
            setattr(out, name, _SCALARS[name])
    for name in _DURATIONS:
        if _nanos(a, name) == _nanos(b, name):
            _set_nanos(out, name, 0)
    out.labels.CopyFrom(pb.subtract(a.labels, b.labels))
    return out


def _shard_copy(shard: Shard, spec: pc.ShardSpec) -> Shard:
    return dataclasses.replace(shard, spec=spec)


def hoist(s: Set) -> Set:
    """A copy of ``s`` with what all its shards share lifted into ``common``.

    ``common`` becomes the intersection of every shard's (pushed-down) spec,
    and each shard keeps only what differs from it. No shards give an empty
    ``common``; one shard gives all its values to ``common``, as Gazette's does.
    """
    flat = push_down(s)
    if not flat.shards:
        return flat
    common = _copy(flat.shards[0].spec)
    common.id = ""
    for shard in flat.shards[1:]:
        common = intersect_specs(common, shard.spec)
    return Set(
        common=common,
        shards=[_shard_copy(sh, subtract_specs(sh.spec, common)) for sh in flat.shards],
    )


def push_down(s: Set) -> Set:
    """A copy of ``s`` in which every shard holds its full spec, and ``common`` is empty."""
    return Set(shards=[_shard_copy(sh, union_specs(sh.spec, s.common)) for sh in s.shards])


def from_list_response(resp: pc.ListResponse) -> Set:
    """The hoisted set of the shards of a List RPC response, with their revisions."""
    return hoist(
        Set(shards=[Shard(spec=_copy(sh.spec), revision=sh.mod_revision) for sh in resp.shards])
    )


# --- flatten into an ApplyRequest ----------------------------------------------------------


def _go_presence(spec: pc.ShardSpec) -> pc.ShardSpec:
    # Gazette's encoder always writes these (non-nullable in Go); marking them present
    # makes our bytes in etcd Gazette's bytes for the same spec.
    spec.labels.SetInParent()
    spec.max_txn_duration.SetInParent()
    spec.min_txn_duration.SetInParent()
    return spec


def apply_request(s: Set) -> pc.ApplyRequest:
    """The ApplyRequest that ``gazctl shards apply`` sends for ``s``.

    Each shard, in order, becomes a delete (``delete: true``) or an upsert of
    its pushed-down spec, expecting its ``revision``. A shard listed twice is a
    ``SpecError``, as is any change that fails ``pc.validate`` (naming the
    shard and the YAML field).
    """
    req = pc.ApplyRequest()
    seen: dict[str, int] = {}
    for i, shard in enumerate(push_down(s).shards):
        who = shard.spec.id or f"shards[{i}]"
        if shard.spec.id in seen:
            raise SpecError(
                who,
                "id",
                pb.ValidationError(
                    f"shard is listed more than once (shards[{seen[shard.spec.id]}] and shards[{i}])"
                ),
            )
        seen[shard.spec.id] = i
        if shard.delete:
            change = pc.ApplyRequest.Change(
                expect_mod_revision=shard.revision, delete=shard.spec.id
            )
        else:
            change = pc.ApplyRequest.Change(
                expect_mod_revision=shard.revision, upsert=_go_presence(_copy(shard.spec))
            )
        try:
            pc.validate(change)
        except pb.ValidationError as e:
            raise SpecError(who, _yaml_field(e), e) from e
        req.changes.append(change)
    return req


# Go field names of ShardSpec (and of a Change), as validation errors name them, and
# their YAML keys. Longer names first, so "RecoveryLogPrefix" is not read as a "Prefix".
_GO_FIELDS = {
    "ExpectModRevision": "revision",
    "RecoveryLogPrefix": "recovery_log_prefix",
    "DisableWaitForAck": "disable_wait_for_ack",
    "ReadChannelSize": "read_channel_size",
    "RingBufferSize": "ring_buffer_size",
    "MaxTxnDuration": "max_txn_duration",
    "MinTxnDuration": "min_txn_duration",
    "HintBackups": "hint_backups",
    "HotStandbys": "hot_standbys",
    "HintPrefix": "hint_prefix",
    "MinOffset": "min_offset",
    "LabelSet": "labels",
    "Sources": "sources",
    "Journal": "journal",
    "Labels": "labels",
    "Value": "value",
    "Name": "name",
    "Delete": "id",
    "Id": "id",
}
_GO_FIELD = re.compile(r"\b(" + "|".join(_GO_FIELDS) + r")\b")


def _yaml_field(e: pb.ValidationError) -> str:
    """The YAML key path of a Change's validation error.

    From its context (``Upsert.Sources[0].Journal`` is ``sources[0].journal``)
    or, when the rule is checked on the whole spec, from the first field its
    reason names (``invalid MaxTxnDuration ...`` is ``max_txn_duration``).
    """
    parts = []
    for part in e.context:
        if part == "Upsert":
            continue
        name, bracket, rest = part.partition("[")
        parts.append(_GO_FIELDS.get(name, name) + bracket + rest)
    if parts:
        return ".".join(parts)
    m = _GO_FIELD.search(e.reason)
    return _GO_FIELDS[m.group(1)] if m else ""


# --- decoding ------------------------------------------------------------------------------


# Builds YAML 1.1 ints (0x10, 1_000) and bools (yes, on) from scalar nodes, as Go's yaml.v2.

_SPEC_KEYS = (
    "id",
    "sources",
    "recovery_log_prefix",
    "hint_prefix",
    "hint_backups",
    "max_txn_duration",
    "min_txn_duration",
    "disable",
    "hot_standbys",
    "labels",
    "disable_wait_for_ack",
    "ring_buffer_size",
    "read_channel_size",
)
_SHARD_KEYS = ("comment", "delete", *_SPEC_KEYS, "revision")
_COMMON_KEYS = _SPEC_KEYS[1:]
_INT32 = (-(2**31), 2**31 - 1)
_UINT32 = (0, 2**32 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def load(source: str | bytes | IO[str] | IO[bytes]) -> Set:
    """Decode a shard set; raises :class:`DecodeError` naming the shard, key and line."""
    try:
        root = yaml.compose(source, Loader=codec.YAML_LOADER)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise DecodeError(
            "",
            "",
            f"not valid YAML: {getattr(e, 'problem', None) or e}",
            mark.line + 1 if mark is not None else None,
            mark.column + 1 if mark is not None else None,
        ) from e
    out = Set()
    if root is None:
        return out
    top = _Decoder("")
    fields = top.mapping("", root, ("common", "shards")) or {}
    if "common" in fields:
        common = _Decoder("common")
        out.common = common.spec(fields["common"][1], _COMMON_KEYS)
    if "shards" in fields:
        path, node = fields["shards"]
        for i, item in enumerate(top.sequence(path, node) or ()):
            out.shards.append(_Decoder(f"shards[{i}]").shard(item))
    return out


class _Decoder(codec.YamlReader):
    """Decodes a shardspace document (the typed reads are the journalspace's)."""

    def fail(self, field: str, reason: str, at: yaml.Node) -> DecodeError:
        return DecodeError(
            self.who, field, reason, at.start_mark.line + 1, at.start_mark.column + 1
        )

    def shard(self, at: yaml.Node) -> Shard:
        # Name the shard by its id in every error, once the id is known.
        if isinstance(at, yaml.MappingNode):
            for key_node, value in at.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == "id":
                    if isinstance(value, yaml.ScalarNode) and value.value:
                        self.who = f"{self.who} ({value.value})"
                    break
        fields = self.mapping("", at, _SHARD_KEYS) or {}
        out = Shard(spec=self.spec(at, _SPEC_KEYS, fields))
        if "comment" in fields:
            out.comment = self.string(*fields["comment"])
        if "delete" in fields:
            out.delete = self.boolean(*fields["delete"])
        if "revision" in fields:
            out.revision = self.integer(*fields["revision"], _INT64)
        return out

    def spec(
        self,
        at: yaml.Node,
        keys: tuple[str, ...],
        fields: dict[str, tuple[str, yaml.Node]] | None = None,
    ) -> pc.ShardSpec:
        if fields is None:
            fields = self.mapping("", at, keys) or {}
        out = pc.ShardSpec()
        for key, (field, value) in fields.items():
            if key in ("id", "recovery_log_prefix", "hint_prefix"):
                setattr(out, key, self.string(field, value))
            elif key == "hint_backups":
                out.hint_backups = self.integer(field, value, _INT32)
            elif key in ("hot_standbys", "ring_buffer_size", "read_channel_size"):
                setattr(out, key, self.integer(field, value, _UINT32))
            elif key in ("disable", "disable_wait_for_ack"):
                setattr(out, key, bool(self.boolean(field, value)))
            elif key in _DURATIONS:
                _set_nanos(out, key, self.duration(field, value))
            elif key == "sources":
                for i, item in enumerate(self.sequence(field, value) or ()):
                    path = f"{field}[{i}]"
                    src = self.mapping(path, item, ("journal", "min_offset")) or {}
                    out.sources.add(
                        journal=self.string(*src["journal"]) if "journal" in src else "",
                        min_offset=(
                            self.integer(*src["min_offset"], _INT64) if "min_offset" in src else 0
                        ),
                    )
            elif key == "labels":
                out.labels.CopyFrom(self.labels(field, value))
        return out

    def labels(self, field: str, at: yaml.Node) -> pb.LabelSet:
        out = pb.LabelSet()
        for i, item in enumerate(self.sequence(field, at) or ()):
            path = f"{field}[{i}]"
            fields = self.mapping(path, item, ("name", "value", "prefix")) or {}
            out.labels.add(
                name=self.string(*fields["name"]) if "name" in fields else "",
                value=self.string(*fields["value"]) if "value" in fields else "",
                prefix=bool(self.boolean(*fields["prefix"])) if "prefix" in fields else False,
            )
        # Checked here, not only at apply: pushing `common` down merges label sets,
        # which is only meaningful for sorted, well-formed ones.
        try:
            pb.validate_labelset(out)
        except pb.ValidationError as e:
            sub = _yaml_field(e)  # "labels[1].value", or "labels" for the whole set.
            path = field + sub.removeprefix("labels") if sub.startswith("labels") else field
            raise self.fail(path, e.reason, at) from e
        return out


# --- encoding ------------------------------------------------------------------------------

_STR_TAG = "tag:yaml.org,2002:str"


def dump(s: Set) -> str:
    """Encode a shard set as Gazette's ``gazctl shards list -o yaml`` does."""
    doc = {
        "common": _spec_doc(s.common, with_id=False),
        "shards": [_shard_doc(sh) for sh in s.shards],
    }
    return yaml.dump(
        doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )


def _shard_doc(shard: Shard) -> dict[str, object]:
    doc: dict[str, object] = {}
    if shard.comment:
        doc["comment"] = shard.comment
    if shard.delete is not None:
        doc["delete"] = shard.delete
    doc.update(_spec_doc(shard.spec, with_id=True))
    if shard.revision:
        doc["revision"] = shard.revision
    return doc


def _spec_doc(spec: pc.ShardSpec, *, with_id: bool) -> dict[str, object]:
    doc: dict[str, object] = {}
    for key in _SPEC_KEYS:
        if key == "id":
            if with_id and spec.id:
                doc["id"] = spec.id
        elif key == "sources":
            if spec.sources:
                doc["sources"] = [_source_doc(src) for src in spec.sources]
        elif key in _DURATIONS:
            nanos = _nanos(spec, key)
            if nanos:
                doc[key] = pb.format_duration_nanos(nanos)
        elif key == "labels":
            if spec.labels.labels:
                doc["labels"] = [_label_doc(lb) for lb in spec.labels.labels]
        elif getattr(spec, key):
            doc[key] = getattr(spec, key)
    return doc


def _source_doc(src: pc.ShardSpec.Source) -> dict[str, object]:
    # `journal` is written even when empty, as Gazette's encoder does.
    doc: dict[str, object] = {"journal": src.journal}
    if src.min_offset:
        doc["min_offset"] = src.min_offset
    return doc


def _label_doc(label: pb.Label) -> dict[str, object]:
    doc: dict[str, object] = {"name": label.name, "value": label.value}
    if label.prefix:
        doc["prefix"] = True
    return doc


class _Dumper(yaml.SafeDumper):
    """A SafeDumper quoting strings as Go's yaml.v2 does: only when they'd read as another type."""


_ODD_BREAKS = "\r\x85\u2028\u2029"


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style: str | None = None
    if any(ch in value for ch in _ODD_BREAKS):
        # PyYAML's plain and single-quoted styles mangle these breaks; double quotes escape them.
        style = '"'
    elif "\n" in value:
        style = "|"
    elif dumper.resolve(yaml.ScalarNode, value, (True, False)) != _STR_TAG:  # type: ignore[no-untyped-call]
        # "true", "123", "null", "2024-01-01": quoted, so they read back as strings.
        style = '"'
    return dumper.represent_scalar(_STR_TAG, value, style=style)


_Dumper.add_representer(str, _represent_str)
