"""The Journal and Shard CustomResourceDefinitions: the one source of truth.

``make crds`` renders them into ``crds/*.yaml`` (``python -m gazette.operator.crds crds``);
``make lint`` re-renders them with ``--check`` and fails when the committed YAML is stale.

The schemas carry Gazette's limits (its `broker/protocol/journal_spec_extensions.go`,
`consumer/protocol/shard_spec_extensions.go`) as far as OpenAPI and CEL can say them, so that ``kubectl apply`` refuses most invalid
objects up front. What they cannot say (byte lengths of non-ASCII names, MIME media types,
Go templates, single-valued labels, ...) is left to the protocol's own validation, run by
the operator, which then reports the object ``InvalidSpec``.

Field names are the camelCase of the protobuf fields, with two exceptions: ``spec.name``
holds the Gazette name of both kinds (a Shard's ``ShardSpec.id``), and durations are Go
duration strings (``30s``, ``1m0s``, ``720h``) as gazctl's YAML writes them.

Labels: an object's ``metadata.labels`` are its journal's (shard's) Gazette labels, so
that ``kubectl get journals -l topic=logs`` selects what ``gazctl journals list -l
topic=logs`` lists; labels of the domains Kubernetes and the operator reserve
(:data:`RESERVED_LABEL_DOMAINS`) are not. ``spec.labels`` carries what Kubernetes labels
cannot say: several values of one name, or a value Kubernetes refuses
(``content-type: application/x-ndjson``). ``spec.name`` is a selectable field:
``kubectl get journals --field-selector spec.name=examples/logs/web``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

__all__ = [
    "CATEGORY",
    "CLUSTER_LABEL",
    "CONSUMER_LABEL",
    "FINALIZER",
    "GROUP",
    "JOURNAL",
    "LAST_HANDLED_FIELD",
    "PAUSED_ANNOTATION",
    "RESERVED_LABEL_DOMAINS",
    "SHARD",
    "UNMANAGED_ANNOTATION",
    "VERSION",
    "Kind",
    "is_reserved_label",
    "journal_crd",
    "render",
    "shard_crd",
]

GROUP = "gazette.dev"
VERSION = "v1alpha1"
CATEGORY = "gazette"

CLUSTER_LABEL = "gazette.dev/cluster"
"""Binds an object to one Gazette cluster: the operator serving that cluster name adopts it."""
CONSUMER_LABEL = "gazette.dev/consumer"
"""On Shards: the consumer application, whose etcd prefix the ShardSpec goes under."""
PAUSED_ANNOTATION = "gazette.dev/paused"
"""``"true"``: leave etcd alone for now; the object reports Ready=False, reason Paused."""
UNMANAGED_ANNOTATION = "gazette.dev/unmanaged"
"""``"true"``: the operator ignores the object entirely (and drops its finalizer)."""
LAST_HANDLED_FIELD = "lastHandledConfiguration"
"""The field of ``status`` where kopf keeps what it last handled (its "diff base")."""
FINALIZER = "gazette.dev/delete-spec"
"""Held only by objects with ``deletionPolicy: Delete``, until their spec left etcd."""

RESERVED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io", "x-k8s.io", GROUP)
"""Label prefixes (with their subdomains) whose labels are not Gazette labels.

Kubernetes reserves ``kubernetes.io/`` and ``k8s.io/`` for its core components
(``app.kubernetes.io/name``, ``kubectl.kubernetes.io/...``); its SIG projects label under
``x-k8s.io/`` (Cluster API, kwok, Gateway API); ``gazette.dev/`` is the operator's own
(``gazette.dev/cluster``, ``gazette.dev/consumer``).
"""


def is_reserved_label(name: str) -> bool:
    """Whether the Kubernetes label ``name`` is of a reserved domain (not a Gazette label)."""
    domain, slash, _ = name.rpartition("/")
    if not slash:
        return False
    domain = domain.lower()
    return any(domain == d or domain.endswith("." + d) for d in RESERVED_LABEL_DOMAINS)


class Kind:
    """Names of one custom resource kind."""

    def __init__(self, kind: str, plural: str, short: str) -> None:
        self.kind = kind
        self.plural = plural
        self.singular = kind.lower()
        self.short = short
        self.list_kind = kind + "List"
        self.crd_name = f"{plural}.{GROUP}"

    def __repr__(self) -> str:
        return f"Kind({self.kind!r})"


JOURNAL = Kind("Journal", "journals", "gj")
SHARD = Kind("Shard", "shards", "gs")

# Character classes of Gazette tokens (RE2 syntax, which the API server's pattern
# and CEL matching both use). Lengths are bounded by maxLength in characters; Gazette
# counts UTF-8 bytes, so a long non-ASCII name passes here and fails in the operator.
_TOKEN = r"^[\p{L}\p{N}\-_+/.]+$"
_PATH_TOKEN = r"^[\p{L}\p{N}\-_+/.=%]*$"
_DURATION = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"
_CLEAN_RELATIVE_PATH = [
    {"rule": "!self.startsWith('/')", "message": "cannot begin with '/'"},
    {
        "rule": "!self.endsWith('/') && !self.contains('//') && !self.matches('(^|/)[.][.]?(/|$)')",
        "message": "must be a clean path",
    },
]
# metav1.Condition's own patterns (k8s.io/apimachinery/pkg/apis/meta/v1/types.go).
_CONDITION_TYPE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
# The codecs by name, in the order of the protobuf enum (INVALID=0 is not writable).
CODECS = ("NONE", "GZIP", "ZSTANDARD", "SNAPPY", "GZIP_OFFLOAD_DECOMPRESSION")
FLAGS = ("O_RDONLY", "O_WRONLY", "O_RDWR")
STORE_SCHEMES = ("s3", "gs", "azure", "azure-ad", "file")
MAX_LABELS = 128
MAX_STORES = 16
MAX_SOURCES = 1024
_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


def _duration(description: str, *rules: dict[str, str]) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "string",
        "description": description + " A Go duration string, e.g. 30s, 1m0s, 720h.",
        "maxLength": 64,
        "pattern": _DURATION,
    }
    if rules:
        schema["x-kubernetes-validations"] = list(rules)
    return schema


def _name_field(description: str, *, journal: bool) -> dict[str, Any]:
    rules = [_rule("self == oldSelf", "name is immutable")]
    if journal:
        rules += _CLEAN_RELATIVE_PATH
    return {
        "type": "string",
        "description": description,
        "minLength": 4,
        "maxLength": 512,
        "pattern": _PATH_TOKEN if journal else _TOKEN,
        "x-kubernetes-validations": rules,
    }


def _labels(reserved: str, what: str) -> dict[str, Any]:
    return {
        "type": "array",
        "description": (
            f"Gazette labels of the {what} that metadata.labels cannot carry: several values "
            "of one name, or a value Kubernetes refuses (content-type: application/x-ndjson). "
            f"The {what}'s labels are these plus metadata.labels outside the reserved "
            "prefixes kubernetes.io/, k8s.io/, x-k8s.io/ and gazette.dev/ (and their "
            "subdomains); a name in both must list the metadata value among its values here. "
            f"The operator sorts them. The meta-label {reserved!r} is reserved."
        ),
        "maxItems": MAX_LABELS,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name", "value"],
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {
                    "type": "string",
                    "minLength": 2,
                    "maxLength": 64,
                    "pattern": _TOKEN,
                },
                "value": {
                    "type": "string",
                    "default": "",
                    "maxLength": 1024,
                    "pattern": _PATH_TOKEN,
                },
            },
            "x-kubernetes-validations": [
                _rule(
                    f"self.name != '{reserved}'"
                    + (" && self.name != 'prefix'" if reserved == "name" else ""),
                    f"labels cannot include the meta-label {reserved!r}",
                )
            ],
        },
    }


def _deletion_policy() -> dict[str, Any]:
    return {
        "type": "string",
        "description": (
            "What deleting this object does to the spec in etcd. Retain (the default) "
            "leaves the spec in etcd and puts no finalizer on the object, so deleting it "
            "(or its namespace) never waits for the operator. Delete removes the spec "
            "first, holding the finalizer gazette.dev/delete-spec until it is gone."
        ),
        "enum": ["Retain", "Delete"],
        "default": "Retain",
    }


def _shard_status_properties() -> dict[str, Any]:
    member = {
        "type": "string",
        "description": "A consumer process, <zone>/<suffix> (its ProcessSpec.ID).",
    }
    return {
        "primary": {
            **member,
            "description": "The member whose slot-0 replica is PRIMARY; empty when none is.",
        },
        "standbys": {
            "type": "array",
            "description": "Members whose replica (slot > 0) is a ready STANDBY.",
            "items": member,
        },
        "standbyCount": {
            "type": "integer",
            "format": "int32",
            "description": "How many standbys there are (for `kubectl get`).",
        },
        "route": {
            "type": "array",
            "description": "Every member the shard is assigned to, in slot order (0: primary).",
            "items": member,
        },
        "replicaStatus": {
            "type": "string",
            "description": (
                "The shard's status reduced over its replicas (the highest code, as "
                "`gazctl shards list` shows it); empty when no replica is assigned."
            ),
        },
        "replicas": {
            "type": "array",
            "description": "The shard's assignments in etcd and the ReplicaStatus each reports.",
            "items": {
                "type": "object",
                "required": ["member", "slot", "status"],
                "properties": {
                    "member": member,
                    "zone": {"type": "string"},
                    "suffix": {"type": "string"},
                    "slot": {"type": "integer", "format": "int32"},
                    "status": {
                        "type": "string",
                        "description": "IDLE, BACKFILL, STANDBY, PRIMARY or FAILED.",
                    },
                    "errors": {
                        "type": "array",
                        "description": "Why the replica FAILED.",
                        "items": {"type": "string"},
                    },
                },
            },
        },
        "lag": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "description": (
                "Bytes written to the shard's sources that its primary has not read through "
                "yet (as `gazctl shards list --lag` sums them), as of lagCheckedAt. Absent "
                "when unknown: lagUnknown says why."
            ),
        },
        "lagSources": {
            "type": "array",
            "description": "Per source journal: where the primary has read through, the write head.",
            "items": {
                "type": "object",
                "required": ["journal", "readThrough"],
                "properties": {
                    "journal": {"type": "string"},
                    "readThrough": {"type": "integer", "format": "int64", "minimum": 0},
                    "writeHead": {"type": "integer", "format": "int64", "minimum": 0},
                    "lag": {"type": "integer", "format": "int64", "minimum": 0},
                    "error": {"type": "string", "description": "Why the write head is unknown."},
                },
            },
        },
        "lagUnknown": {
            "type": "string",
            "description": (
                "Why the lag is unknown (e.g. NO_SHARD_PRIMARY, UNAVAILABLE, a write head "
                "not read); absent when lag is known."
            ),
        },
        "lagCheckedAt": {
            "type": "string",
            "format": "date-time",
            "description": (
                "When the operator last asked the primary (every --shard-lag-interval; an "
                "unchanged answer is written again at most every few minutes)."
            ),
        },
    }


def _status(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "description": "What the operator last did with this object.",
        "properties": {
            **(extra or {}),
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The metadata.generation the conditions describe.",
            },
            "modRevision": {
                "type": "integer",
                "format": "int64",
                "description": "Etcd mod revision of the spec's key as last written or seen.",
            },
            "etcdKey": {
                "type": "string",
                "description": (
                    "The etcd key holding the spec. When the object comes to name another "
                    "key (its gazette.dev/consumer label, or the operator's etcd prefix, "
                    "changed), the spec moves: the new key is written and this one removed."
                ),
            },
            "cluster": {
                "type": "string",
                "description": (
                    "The Gazette cluster (gazette.dev/cluster) whose operator wrote etcdKey, "
                    "into its etcd."
                ),
            },
            LAST_HANDLED_FIELD: {
                "type": "string",
                "description": (
                    "The operator's record (JSON) of the spec, labels and annotations it last "
                    "handled, to tell edits apart. Kept in status, so that handling an object "
                    "costs one status write."
                ),
            },
            "conditions": {
                "type": "array",
                "description": "Conditions as Kubernetes' metav1.Condition has them.",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": {
                    "type": "object",
                    "required": ["type", "status", "reason", "message", "lastTransitionTime"],
                    "properties": {
                        "type": {
                            "type": "string",
                            "maxLength": 316,
                            "pattern": _CONDITION_TYPE,
                        },
                        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                        "reason": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 1024,
                            "pattern": _CONDITION_REASON,
                        },
                        "message": {"type": "string", "maxLength": 32768},
                        "observedGeneration": {
                            "type": "integer",
                            "format": "int64",
                            "minimum": 0,
                        },
                        "lastTransitionTime": {"type": "string", "format": "date-time"},
                    },
                },
            },
        },
    }


def _journal_spec_schema() -> dict[str, Any]:
    store = {
        "type": "string",
        "maxLength": 2048,
        "x-kubernetes-validations": [
            _rule("isURL(self)", "must be an absolute URL"),
            _rule(
                "isURL(self) && url(self).getScheme() in " + _cel_list(STORE_SCHEMES),
                "invalid scheme (expected one of " + ", ".join(STORE_SCHEMES) + ")",
            ),
            _rule(
                "!isURL(self) || url(self).getEscapedPath().endsWith('/')",
                "path component doesn't end in '/'",
            ),
            _rule(
                "!isURL(self) || url(self).getScheme() != 'file' || url(self).getHost() == ''",
                "file scheme cannot have host",
            ),
            _rule(
                "!isURL(self) || url(self).getScheme() == 'file' || url(self).getHost() != ''",
                "missing bucket",
            ),
        ],
    }
    fragment = {
        "type": "object",
        "description": "How the journal is cut into fragments and where they are persisted.",
        "required": ["length", "compressionCodec", "refreshInterval"],
        "properties": {
            "length": {
                "type": "integer",
                "format": "int64",
                "minimum": 1024,
                "maximum": 2**34,
                "description": "Target size of a fragment, in bytes.",
            },
            "compressionCodec": {
                "type": "string",
                "enum": list(CODECS),
                "description": "Codec of persisted fragments.",
            },
            "stores": {
                "type": "array",
                "maxItems": MAX_STORES,
                "description": "Fragment stores: new fragments go to the first.",
                "items": store,
            },
            "refreshInterval": _duration(
                "How often the fragment index is refreshed from the stores.",
                _rule(
                    "duration(self) >= duration('1s') && duration(self) <= duration('24h')",
                    "expected 1s <= refreshInterval <= 24h",
                ),
            ),
            "retention": _duration("How long fragments are kept (0: forever)."),
            "flushInterval": _duration(
                "Fragments are persisted at least this often (0: only by length).",
                _rule(
                    "duration(self) == duration('0s') || duration(self) >= duration('1m')",
                    "expected flushInterval 0 or >= 1m",
                ),
            ),
            "pathPostfixTemplate": {
                "type": "string",
                "maxLength": 1024,
                "description": "Go text/template of the fragment path postfix.",
            },
        },
        "x-kubernetes-validations": [
            _rule(
                "!has(self.stores) || size(self.stores) == 0 || "
                "!self.stores[0].startsWith('file://') || "
                "self.compressionCodec != 'GZIP_OFFLOAD_DECOMPRESSION'",
                "GZIP_OFFLOAD_DECOMPRESSION is incompatible with a file:// first store",
            )
        ],
    }
    return {
        "type": "object",
        "description": "A Gazette JournalSpec (Gazette broker/protocol/protocol.proto), plus the deletion policy.",
        "required": ["name", "replication", "fragment"],
        "properties": {
            "name": _name_field(
                "The journal name, e.g. examples/foo/bar (a clean relative path).",
                journal=True,
            ),
            "replication": {
                "type": "integer",
                "format": "int32",
                "minimum": 1,
                "maximum": 5,
                "description": "Desired number of broker replicas.",
            },
            "labels": _labels("name", "journal"),
            "fragment": fragment,
            "flags": {
                "type": "string",
                "enum": list(FLAGS),
                "description": "Read/write mode; unset means O_RDWR.",
            },
            "maxAppendRate": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "description": "Bytes per second appends may sustain (0: the broker's default).",
            },
            "deletionPolicy": _deletion_policy(),
        },
    }


def _shard_spec_schema() -> dict[str, Any]:
    source = {
        "type": "object",
        "required": ["journal"],
        "properties": {
            "journal": {
                "type": "string",
                "minLength": 4,
                "maxLength": 1025,
                "pattern": r"^[\p{L}\p{N}\-_+/.=%;]+$",
                "description": "A journal to read, optionally with a ;meta segment.",
            },
            "minOffset": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "description": "Reads start no earlier than this offset.",
            },
        },
    }
    return {
        "type": "object",
        "description": "A Gazette ShardSpec (Gazette consumer/protocol/protocol.proto), plus the deletion policy.",
        "required": ["name", "maxTxnDuration"],
        "properties": {
            "name": _name_field("The shard id (ShardSpec.id).", journal=False),
            "sources": {
                "type": "array",
                "maxItems": MAX_SOURCES,
                "description": "Journals the shard reads; the operator sorts them.",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["journal"],
                "items": source,
            },
            "recoveryLogPrefix": {
                "type": "string",
                "maxLength": 512,
                "pattern": _PATH_TOKEN,
                "description": "The recovery log is <recoveryLogPrefix>/<name>.",
                "x-kubernetes-validations": [
                    _rule("self == '' || !self.startsWith('/')", "cannot begin with '/'")
                ],
            },
            "hintPrefix": {
                "type": "string",
                "maxLength": 512,
                "description": "Absolute etcd path under which recovery hints are kept.",
                "x-kubernetes-validations": [
                    _rule(
                        "self == '' || (self.startsWith('/') && !self.endsWith('/') && "
                        "!self.contains('//') && !self.matches('/[.][.]?(/|$)'))",
                        "must be an absolute, clean, non-directory path",
                    )
                ],
            },
            "hintBackups": {
                "type": "integer",
                "format": "int32",
                "minimum": 0,
                "maximum": _INT32_MAX,
            },
            "maxTxnDuration": _duration(
                "Upper bound of a consumer transaction.",
                _rule("duration(self) > duration('0s')", "expected maxTxnDuration > 0"),
            ),
            "minTxnDuration": _duration("Lower bound of a consumer transaction."),
            "disable": {
                "type": "boolean",
                "default": False,
                "description": "Disabled shards are assigned no replicas.",
            },
            "hotStandbys": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "maximum": _UINT32_MAX,
                "description": "Warm standby replicas (capped by the consumers' flag).",
            },
            "labels": _labels("id", "shard"),
            "disableWaitForAck": {"type": "boolean"},
            "ringBufferSize": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "maximum": _UINT32_MAX,
            },
            "readChannelSize": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "maximum": _UINT32_MAX,
            },
            "deletionPolicy": _deletion_policy(),
        },
        "x-kubernetes-validations": [
            _rule(
                "!has(self.minTxnDuration) || "
                "duration(self.minTxnDuration) <= duration(self.maxTxnDuration)",
                "minTxnDuration must not exceed maxTxnDuration",
            ),
            _rule(
                "(has(self.hintPrefix) && self.hintPrefix != '') == "
                "(has(self.recoveryLogPrefix) && self.recoveryLogPrefix != '')",
                "hintPrefix and recoveryLogPrefix go together",
            ),
        ],
    }


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _ready_column() -> dict[str, Any]:
    return {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    }


def _cluster_column() -> dict[str, Any]:
    return {
        "name": "Cluster",
        "type": "string",
        "description": "The Gazette cluster (label gazette.dev/cluster) whose operator serves it.",
        "jsonPath": ".metadata.labels.gazette\\.dev/cluster",
    }


def _deletion_policy_column() -> dict[str, Any]:
    return {
        "name": "DeletionPolicy",
        "type": "string",
        "priority": 1,
        "description": "Retain (the default: no finalizer) or Delete (the spec leaves etcd).",
        "jsonPath": ".spec.deletionPolicy",
    }


def _crd(
    kind: Kind,
    spec: dict[str, Any],
    columns: list[dict[str, Any]],
    status: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.crd_name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": kind.list_kind,
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": [kind.short],
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    # `kubectl get journals --field-selector spec.name=a/journal` (GA in 1.32).
                    "selectableFields": [{"jsonPath": ".spec.name"}],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": f"A Gazette {kind.kind}, reconciled into etcd.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def journal_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of Journals, as a plain dict."""
    columns = [
        {
            "name": "Journal",
            "type": "string",
            "description": "The journal name (spec.name).",
            "jsonPath": ".spec.name",
        },
        _cluster_column(),
        {"name": "Replication", "type": "integer", "jsonPath": ".spec.replication"},
        {"name": "Codec", "type": "string", "jsonPath": ".spec.fragment.compressionCodec"},
        _ready_column(),
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {
            "name": "Store",
            "type": "string",
            "priority": 1,
            "jsonPath": ".spec.fragment.stores[0]",
        },
        {
            "name": "Reason",
            "type": "string",
            "priority": 1,
            "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        },
        _deletion_policy_column(),
    ]
    return _crd(JOURNAL, _journal_spec_schema(), columns, _status())


def shard_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of Shards, as a plain dict."""
    columns = [
        {
            "name": "Shard",
            "type": "string",
            "description": "The shard id (spec.name).",
            "jsonPath": ".spec.name",
        },
        _cluster_column(),
        {
            "name": "Consumer",
            "type": "string",
            "jsonPath": ".metadata.labels.gazette\\.dev/consumer",
        },
        {"name": "Primary", "type": "string", "jsonPath": ".status.primary"},
        {"name": "Status", "type": "string", "jsonPath": ".status.replicaStatus"},
        {"name": "Standbys", "type": "integer", "jsonPath": ".status.standbyCount"},
        _ready_column(),
        {
            "name": "Lag",
            "type": "integer",
            "description": "Bytes of its sources the shard has yet to read (empty: unknown).",
            "jsonPath": ".status.lag",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Hot-Standbys", "type": "integer", "priority": 1, "jsonPath": ".spec.hotStandbys"},
        {"name": "Disabled", "type": "boolean", "priority": 1, "jsonPath": ".spec.disable"},
        {
            "name": "Recovery Log",
            "type": "string",
            "priority": 1,
            "jsonPath": ".spec.recoveryLogPrefix",
        },
        {
            "name": "Reason",
            "type": "string",
            "priority": 1,
            "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        },
        {
            "name": "Applied",
            "type": "string",
            "priority": 1,
            "jsonPath": '.status.conditions[?(@.type=="Applied")].status',
        },
        {
            "name": "Lag Unknown",
            "type": "string",
            "priority": 1,
            "description": "Why the lag is unknown.",
            "jsonPath": ".status.lagUnknown",
        },
        {
            "name": "Lag Checked",
            "type": "date",
            "priority": 1,
            "jsonPath": ".status.lagCheckedAt",
        },
        _deletion_policy_column(),
    ]
    return _crd(SHARD, _shard_spec_schema(), columns, _status(_shard_status_properties()))


_HEADER = "# Generated by `make crds` from operator/src/gazette/operator/crd.py. Do not edit.\n"


def _dump(doc: Mapping[str, Any]) -> str:
    return _HEADER + yaml.safe_dump(
        dict(doc), sort_keys=False, allow_unicode=True, width=100, default_flow_style=False
    )


def render() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    return {
        f"{JOURNAL.crd_name}.yaml": _dump(journal_crd()),
        f"{SHARD.crd_name}.yaml": _dump(shard_crd()),
    }
