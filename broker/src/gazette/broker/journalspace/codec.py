"""Reading and writing the journal YAML hierarchy.

``load`` is strict in the way ``gazctl journals apply`` is: unknown or repeated
keys, values of the wrong YAML type, enum names that do not exist and malformed
durations are all errors, each naming the node, the key path and the line.

``dump`` writes what ``gazctl journals list -o yaml`` writes: keys in Gazette's
order, zero values left out, enums by name, durations as Go duration strings,
and strings quoted only when YAML would otherwise read them as something else.
``dump(load(text)) == text`` for any text ``dump`` wrote.
"""

from __future__ import annotations

from typing import IO, Any

import yaml

from gazette.broker import protocol as pb
from gazette.broker.journalspace import errors
from gazette.broker.journalspace import node as nodes

__all__ = ["YAML_LOADER", "YamlReader", "dump", "is_null", "kind", "load"]

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: The loader that composes YAML nodes (libyaml's when present).
YAML_LOADER = _Loader
# Builds YAML 1.1 ints (0x10, 1_000, 1:30) and bools (yes, on) from scalar nodes.
_CONSTRUCTOR = yaml.constructor.SafeConstructor()

# Enum tables. Each enum loads from its name or from an integer, and dumps as its
# name when it has one (an integer otherwise, which loads back to the same value).
_CODECS = pb.CompressionCodec
_FLAGS = pb.JournalSpec.Flag
_LEVELS = pb.JournalSpec.Suspend.Level


def load(source: str | bytes | IO[str] | IO[bytes]) -> nodes.Node:
    """Decode a YAML journal hierarchy and check its structure.

    Raises ``DecodeError`` if the text does not fit the node schema, and
    ``StructureError`` if the tree breaks a directory / journal rule.
    """
    try:
        root = yaml.compose(source, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise errors.DecodeError(
            "",
            "",
            f"not valid YAML: {getattr(e, 'problem', None) or e}",
            mark.line + 1 if mark is not None else None,
            mark.column + 1 if mark is not None else None,
        ) from e
    out = nodes.Node() if root is None else _Decoder("(root)").node(root)
    nodes.validate(out)
    return out


class YamlReader:
    """Reads YAML nodes into typed values, failing with the field path and position.

    The shared part of the journalspace and shardspace decoders (gazctl's):
    subclasses say how a failure is raised (:meth:`fail`) and add their own
    structures. As Gazette's decoders, any scalar reads as its text into a
    string field, and null reads as the zero value.
    """

    def __init__(self, who: str) -> None:
        self.who = who

    def fail(self, field: str, reason: str, at: yaml.Node) -> Exception:
        raise NotImplementedError

    def mapping(
        self, field: str, at: yaml.Node, keys: tuple[str, ...]
    ) -> dict[str, tuple[str, yaml.Node]] | None:
        """Check `at` is a mapping of known, distinct keys; map key -> (field path, value)."""
        if is_null(at):
            return None
        if not isinstance(at, yaml.MappingNode):
            raise self.fail(field, f"expected a mapping, not {kind(at)}", at)
        out: dict[str, tuple[str, yaml.Node]] = {}
        for key_node, value in at.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR:
                raise self.fail(field, f"expected a string key, not {kind(key_node)}", key_node)
            key = key_node.value
            path = f"{field}.{key}" if field else key
            if key not in keys:
                raise self.fail(
                    path, f"unknown key {key!r} (expected one of {', '.join(keys)})", key_node
                )
            if key in out:
                raise self.fail(path, "key is repeated", key_node)
            out[key] = (path, value)
        return out

    def sequence(self, field: str, at: yaml.Node) -> list[yaml.Node] | None:
        if is_null(at):
            return None
        if not isinstance(at, yaml.SequenceNode):
            raise self.fail(field, f"expected a list, not {kind(at)}", at)
        return list(at.value)

    def string(self, field: str, at: yaml.Node) -> str:
        # `value: 123` is the label value "123"; null is the empty string.
        if is_null(at):
            return ""
        if not isinstance(at, yaml.ScalarNode):
            raise self.fail(field, f"expected a string, not {kind(at)}", at)
        return str(at.value)

    def integer(self, field: str, at: yaml.Node, bounds: tuple[int, int] | None = None) -> int:
        if is_null(at):
            return 0
        if not isinstance(at, yaml.ScalarNode) or at.tag != _INT:
            raise self.fail(field, f"expected an integer, not {kind(at)}", at)
        value = int(_CONSTRUCTOR.construct_yaml_int(at))
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise self.fail(
                field, f"{value} is out of range (expected {bounds[0]} to {bounds[1]})", at
            )
        return value

    def boolean(self, field: str, at: yaml.Node) -> bool | None:
        if is_null(at):
            return None
        if not isinstance(at, yaml.ScalarNode) or at.tag != _BOOL:
            raise self.fail(field, f"expected true or false, not {kind(at)}", at)
        return bool(_CONSTRUCTOR.construct_yaml_bool(at))

    def duration(self, field: str, at: yaml.Node) -> int:
        if is_null(at):
            return 0
        if not isinstance(at, yaml.ScalarNode) or at.tag != _STR:
            raise self.fail(
                field, f"expected a duration such as 1m30s, not {kind(at)} {at.value!r}", at
            )
        try:
            return pb.parse_duration_nanos(at.value)
        except ValueError as e:
            raise self.fail(field, f"not a duration ({at.value!r}): {e}", at) from e


class _Decoder(YamlReader):
    """Decodes a journalspace tree."""

    def fail(self, field: str, reason: str, at: yaml.Node) -> errors.DecodeError:
        return errors.DecodeError(
            self.who, field, reason, at.start_mark.line + 1, at.start_mark.column + 1
        )

    def enum(self, field: str, at: yaml.Node, table: Any, type_name: str) -> int:
        if is_null(at):
            return 0
        if isinstance(at, yaml.ScalarNode) and at.tag == _INT:
            return self.integer(field, at)
        if isinstance(at, yaml.ScalarNode) and at.tag == _STR:
            try:
                return int(table.Value(at.value))
            except ValueError:
                options = ", ".join(table.keys())
                raise self.fail(
                    field, f"{at.value!r} is not a {type_name} (expected one of {options})", at
                ) from None
        raise self.fail(field, f"expected a {type_name} name, not {kind(at)}", at)

    def node(self, at: yaml.Node, path: str = "") -> nodes.Node:
        out = nodes.Node()
        # Read the name first, so that errors in any other key can name the node.
        if isinstance(at, yaml.MappingNode):
            for key_node, value in at.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == "name":
                    out.name = self.string("name", value)
                    self.who = nodes.describe(out.name, path)
                    break
        fields = self.mapping("", at, _NODE_KEYS)
        if fields is None:
            return out

        for key, (field, value) in fields.items():
            if key == "comment":
                out.comment = self.string(field, value)
            elif key == "name":
                pass  # Read above.
            elif key == "delete":
                out.delete = self.boolean(field, value)
            elif key == "replication":
                out.replication = self.integer(field, value)
            elif key == "labels":
                out.labels = self.labels(field, value)
            elif key == "fragment":
                out.fragment = self.fragment(field, value)
            elif key == "flags":
                out.flags = self.enum(field, value, _FLAGS, "JournalSpec.Flag")
            elif key == "max_append_rate":
                out.max_append_rate = self.integer(field, value)
            elif key == "suspend":
                out.suspend = self.suspend(field, value)
            elif key == "revision":
                out.revision = self.integer(field, value)
            elif key == "children":
                for i, child in enumerate(self.sequence(field, value) or ()):
                    child_path = f"{path}.children[{i}]" if path else f"children[{i}]"
                    decoder = _Decoder(nodes.describe("", child_path))
                    out.children.append(decoder.node(child, child_path))
        return out

    def labels(self, field: str, at: yaml.Node) -> list[nodes.Label]:
        out = []
        for i, item in enumerate(self.sequence(field, at) or ()):
            path = f"{field}[{i}]"
            fields = self.mapping(path, item, ("name", "value", "prefix")) or {}
            name = self.string(*fields["name"]) if "name" in fields else ""
            value = self.string(*fields["value"]) if "value" in fields else ""
            prefix = bool(self.boolean(*fields["prefix"])) if "prefix" in fields else False
            out.append(nodes.Label(name, value, prefix))
        return out

    def fragment(self, field: str, at: yaml.Node) -> nodes.Fragment:
        fields = self.mapping(field, at, _FRAGMENT_KEYS)
        out = nodes.Fragment()
        for key, (path, value) in (fields or {}).items():
            if key == "length":
                out.length = self.integer(path, value)
            elif key == "compression_codec":
                out.compression_codec = self.enum(path, value, _CODECS, "CompressionCodec")
            elif key == "stores":
                items = self.sequence(path, value)
                if items is not None:
                    out.stores = [self.string(f"{path}[{i}]", s) for i, s in enumerate(items)]
            elif key == "refresh_interval":
                out.refresh_interval = self.duration(path, value)
            elif key == "retention":
                out.retention = self.duration(path, value)
            elif key == "flush_interval":
                out.flush_interval = self.duration(path, value)
            elif key == "path_postfix_template":
                out.path_postfix_template = self.string(path, value)
        return out

    def suspend(self, field: str, at: yaml.Node) -> nodes.Suspend | None:
        fields = self.mapping(field, at, ("level", "offset"))
        if fields is None:
            return None
        out = nodes.Suspend()
        if "level" in fields:
            out.level = self.enum(*fields["level"], _LEVELS, "JournalSpec.Suspend.Level")
        if "offset" in fields:
            out.offset = self.integer(*fields["offset"])
        return out


_NODE_KEYS = (
    "comment",
    "delete",
    "name",
    "replication",
    "labels",
    "fragment",
    "flags",
    "max_append_rate",
    "suspend",
    "revision",
    "children",
)
_FRAGMENT_KEYS = (
    "length",
    "compression_codec",
    "stores",
    "refresh_interval",
    "retention",
    "flush_interval",
    "path_postfix_template",
)


def is_null(at: yaml.Node) -> bool:
    """Whether ``at`` is YAML's null."""
    return isinstance(at, yaml.ScalarNode) and at.tag == _NULL


def kind(at: yaml.Node) -> str:
    """How an error names the kind of node ``at`` is."""
    if isinstance(at, yaml.MappingNode):
        return "a mapping"
    if isinstance(at, yaml.SequenceNode):
        return "a list"
    return {_STR: "a string", _INT: "an integer", _BOOL: "a boolean", _NULL: "null"}.get(
        at.tag, f"a {at.tag.rsplit(':', 1)[-1]}"
    )


# --- dumping -------------------------------------------------------------------------


def dump(node: nodes.Node) -> str:
    """Encode a node tree as YAML text, as ``gazctl journals list -o yaml`` does."""
    return yaml.dump(
        _node_doc(node),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
    )


def _node_doc(node: nodes.Node) -> dict[str, object]:
    doc: dict[str, object] = {}
    _put(doc, "comment", node.comment)
    if node.delete is not None:
        doc["delete"] = node.delete
    _put(doc, "name", node.name)
    _put(doc, "replication", node.replication)
    if node.labels:
        doc["labels"] = [_label_doc(label) for label in node.labels]
    fragment = _fragment_doc(node.fragment)
    if fragment:
        doc["fragment"] = fragment
    if node.flags:
        doc["flags"] = _enum_name(_FLAGS, node.flags)
    _put(doc, "max_append_rate", node.max_append_rate)
    if node.suspend is not None:
        suspend: dict[str, object] = {}
        if node.suspend.level:
            suspend["level"] = _enum_name(_LEVELS, node.suspend.level)
        _put(suspend, "offset", node.suspend.offset)
        doc["suspend"] = suspend
    _put(doc, "revision", node.revision)
    if node.children:
        doc["children"] = [_node_doc(child) for child in node.children]
    return doc


def _label_doc(label: nodes.Label) -> dict[str, object]:
    # `name` and `value` are always written, even when empty: `value: ""` is how
    # a label without a value reads.
    doc: dict[str, object] = {"name": label.name, "value": label.value}
    if label.prefix:
        doc["prefix"] = True
    return doc


def _fragment_doc(fragment: nodes.Fragment) -> dict[str, object]:
    doc: dict[str, object] = {}
    _put(doc, "length", fragment.length)
    if fragment.compression_codec:
        doc["compression_codec"] = _enum_name(_CODECS, fragment.compression_codec)
    if fragment.stores is not None:
        # An explicit empty list is kept (it overrides a parent's stores on
        # apply), where Gazette's encoder would drop it.
        doc["stores"] = list(fragment.stores)
    if fragment.refresh_interval:
        doc["refresh_interval"] = pb.format_duration_nanos(fragment.refresh_interval)
    if fragment.retention:
        doc["retention"] = pb.format_duration_nanos(fragment.retention)
    if fragment.flush_interval:
        doc["flush_interval"] = pb.format_duration_nanos(fragment.flush_interval)
    _put(doc, "path_postfix_template", fragment.path_postfix_template)
    return doc


def _put(doc: dict[str, object], key: str, value: str | int) -> None:
    if value:
        doc[key] = value


def _enum_name(table: Any, value: int) -> str | int:
    try:
        return str(table.Name(value))
    except ValueError:
        return value


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes strings the way Go's yaml.v2 encoder does."""


_ODD_BREAKS = "\r\x85\u2028\u2029"


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style: str | None = None
    if any(ch in value for ch in _ODD_BREAKS):
        # PyYAML's plain and single-quoted writers mangle these line breaks;
        # double quotes escape them.
        style = '"'
    elif "\n" in value:
        style = "|"
    elif _plain_tag(dumper, value) != _STR:
        # Text that would read back as another type (null, a bool, a number, a
        # date...) is double-quoted; everything else is plain where YAML allows.
        style = '"'
    return dumper.represent_scalar(_STR, value, style=style)


def _plain_tag(dumper: yaml.SafeDumper, value: str) -> str:
    """The tag YAML would give `value` written plain."""
    tag: str = dumper.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
    return tag


_Dumper.add_representer(str, _represent_str)
