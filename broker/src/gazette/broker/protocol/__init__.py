"""Gazette's broker protocol: messages, validation, labels, selectors and fragment names.

This is the bottom layer of the broker (alias ``pb``). It re-exports every
message and enum of the ``protocol`` package (the generated `protocol_pb2`),
and adds what Gazette's Go types add to them:

- **Validation** — `validate(msg)` checks any request, response or spec
  message with Gazette's rules and messages, raising `ValidationError`
  (``.context`` is the dotted field path, ``.reason`` the broken rule;
  ``with within("Field"):`` prefixes a nested check's errors). Plain
  values have their own checks: `validate_journal`, `validate_label`,
  `validate_labelset`, `validate_fragment_store`, `validate_endpoint`,
  `validate_token`, `validate_path_component`. The rules live with what
  they check: `specs` (journals, processes, brokers), `headers` (routes and
  headers), `rpc` (requests and responses), `fragments`, `labels`,
  `selector`, `tokens`; `validation` dispatches on the message type.
- **Labels and selectors** — `label_set`, `union` / `intersect` / `subtract`,
  `parse_selector` / `format_selector` / `matches`, the ``name`` and
  ``prefix`` meta-labels (`label_set_ext`, `rewrite_prefix_selector`) and the
  well-known label names (`LABEL_CONTENT_TYPE`, ...).
- **Fragments** — content names and paths as stored in buckets
  (`fragment_path`, `parse_fragment_path`), codecs and their file extensions,
  `SHA1Sum` <-> digest.
- **Journal specs** — `journal_may_read`, `journal_may_write`,
  `desired_replication`, and the path postfix template
  (`render_postfix_template`, a restricted Go text/template evaluator).
- **Go durations** — `format_duration` / `parse_duration` speak Go's
  ``1m0s`` / ``1h30m`` text.
- **Authorization** — the module ``gazette.broker.protocol.auth`` (imported
  on its own, as it brings pyjwt): Gazette's bearer tokens, their
  capabilities and selector claims, and the keys that sign and verify them;
  a refusal is an `AuthorizationError`. ``gazette.broker.protocol.dial`` is
  the seam every channel and server port is made through, and owns TLS
  (certificate files that don't load are a `TLSConfigError`);
  ``gazette.broker.protocol.tlstesting`` is a test seam making throwaway CAs
  and certificates.

Usage::

    from gazette.broker import protocol as pb

    spec = pb.JournalSpec(name="examples/foo", replication=3, ...)
    pb.validate(spec)                      # raises pb.ValidationError
    sel = pb.parse_selector("topic=logs, region in (apac, us), !deprecated")
    pb.format_selector(sel)                # 'region in (apac,us),topic=logs,!deprecated'
    pb.matches(sel, pb.label_set_ext(spec))

This package imports nothing of ours but itself; everything else builds on it.
The path postfix template evaluator loads on first use of its names (it pulls
in the ``regex`` module, which a one-shot ``gazctl`` need not pay for).
"""

from typing import TYPE_CHECKING, Any

from gazette.broker.protocol.durations import (
    Duration,
    duration_from_nanos,
    duration_from_seconds,
    duration_nanos,
    duration_seconds,
    format_duration,
    format_duration_nanos,
    parse_duration,
    parse_duration_nanos,
)
from gazette.broker.protocol.errors import (
    AuthorizationError,
    TLSConfigError,
    ValidationError,
    within,
)
from gazette.broker.protocol.fragments import (
    CODEC_EXTENSIONS,
    codec_from_extension,
    codec_to_extension,
    endpoint_grpc_addr,
    endpoint_uses_tls,
    fragment_content_name,
    fragment_path,
    parse_fragment_path,
    sha1sum_from_digest,
    sha1sum_hex,
    sha1sum_to_digest,
    validate_codec,
    validate_endpoint,
    validate_fragment,
    validate_fragment_store,
)
from gazette.broker.protocol.gotext import enum_text
from gazette.broker.protocol.headers import route_equivalent
from gazette.broker.protocol.labels import (
    CONTENT_TYPE_CSV,
    CONTENT_TYPE_JSON_LINES,
    CONTENT_TYPE_PROTOBUF_FIXED,
    CONTENT_TYPE_RECOVERYLOG,
    LABEL_CONTENT_TYPE,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_MESSAGE_SUBTYPE,
    LABEL_MESSAGE_TYPE,
    LABEL_REGION,
    LABEL_TAG,
    SINGLE_VALUE_LABELS,
    add_value,
    intersect,
    label_set,
    remove,
    set_value,
    subtract,
    union,
    validate_label,
    validate_labelset,
    validate_single_value_labels,
    value_of,
    values_of,
)
from gazette.broker.protocol.protocol_pb2 import (
    ETCD_TRANSACTION_FAILED,
    FRAGMENT_STORE_UNHEALTHY,
    GZIP,
    GZIP_OFFLOAD_DECOMPRESSION,
    INDEX_HAS_GREATER_OFFSET,
    INSUFFICIENT_JOURNAL_BROKERS,
    INVALID,
    JOURNAL_NOT_FOUND,
    NO_JOURNAL_PRIMARY_BROKER,
    NONE,
    NOT_ALLOWED,
    NOT_JOURNAL_BROKER,
    NOT_JOURNAL_PRIMARY_BROKER,
    OFFSET_NOT_YET_AVAILABLE,
    OK,
    PROPOSAL_MISMATCH,
    REGISTER_MISMATCH,
    SNAPPY,
    SUSPENDED,
    WRONG_APPEND_OFFSET,
    WRONG_ROUTE,
    ZSTANDARD,
    AppendRequest,
    AppendResponse,
    ApplyRequest,
    ApplyResponse,
    BrokerSpec,
    CompressionCodec,
    Fragment,
    FragmentsRequest,
    FragmentsResponse,
    FragmentStoreHealthRequest,
    FragmentStoreHealthResponse,
    Header,
    JournalSpec,
    Label,
    LabelSelector,
    LabelSet,
    ListRequest,
    ListResponse,
    ProcessSpec,
    ReadRequest,
    ReadResponse,
    ReplicateRequest,
    ReplicateResponse,
    Route,
    SHA1Sum,
    Status,
)
from gazette.broker.protocol.rpc import validate_offsets, validate_status
from gazette.broker.protocol.selector import (
    format_selector,
    matches,
    parse_selector,
    rewrite_prefix_selector,
    validate_selector,
)
from gazette.broker.protocol.specs import (
    MAX_BROKER_JOURNAL_LIMIT,
    MAX_FRAGMENT_LEN,
    MAX_JOURNAL_REPLICATION,
    MIN_FRAGMENT_LEN,
    check_media_type,
    desired_replication,
    journal_may_read,
    journal_may_write,
    label_set_ext,
)
from gazette.broker.protocol.tokens import (
    PATH_SYMBOLS,
    TOKEN_SYMBOLS,
    path_clean,
    split_meta,
    strip_meta,
    validate_journal,
    validate_path_component,
    validate_token,
)
from gazette.broker.protocol.validation import validate

__all__ = [
    "CODEC_EXTENSIONS",
    "CONTENT_TYPE_CSV",
    "CONTENT_TYPE_JSON_LINES",
    "CONTENT_TYPE_PROTOBUF_FIXED",
    "CONTENT_TYPE_RECOVERYLOG",
    "ETCD_TRANSACTION_FAILED",
    "FRAGMENT_STORE_UNHEALTHY",
    "GZIP",
    "GZIP_OFFLOAD_DECOMPRESSION",
    "INDEX_HAS_GREATER_OFFSET",
    "INSUFFICIENT_JOURNAL_BROKERS",
    "INVALID",
    "JOURNAL_NOT_FOUND",
    "LABEL_CONTENT_TYPE",
    "LABEL_INSTANCE",
    "LABEL_MANAGED_BY",
    "LABEL_MESSAGE_SUBTYPE",
    "LABEL_MESSAGE_TYPE",
    "LABEL_REGION",
    "LABEL_TAG",
    "MAX_BROKER_JOURNAL_LIMIT",
    "MAX_FRAGMENT_LEN",
    "MAX_JOURNAL_REPLICATION",
    "MIN_FRAGMENT_LEN",
    "NONE",
    "NOT_ALLOWED",
    "NOT_JOURNAL_BROKER",
    "NOT_JOURNAL_PRIMARY_BROKER",
    "NO_JOURNAL_PRIMARY_BROKER",
    "OFFSET_NOT_YET_AVAILABLE",
    "OK",
    "PATH_SYMBOLS",
    "PROPOSAL_MISMATCH",
    "REGISTER_MISMATCH",
    "SINGLE_VALUE_LABELS",
    "SNAPPY",
    "SUSPENDED",
    "TOKEN_SYMBOLS",
    "WRONG_APPEND_OFFSET",
    "WRONG_ROUTE",
    "ZSTANDARD",
    "AppendRequest",
    "AppendResponse",
    "ApplyRequest",
    "ApplyResponse",
    "AuthorizationError",
    "BrokerSpec",
    "CompressionCodec",
    "Duration",
    "Fragment",
    "FragmentStoreHealthRequest",
    "FragmentStoreHealthResponse",
    "FragmentsRequest",
    "FragmentsResponse",
    "Header",
    "JournalSpec",
    "Label",
    "LabelSelector",
    "LabelSet",
    "ListRequest",
    "ListResponse",
    "ProcessSpec",
    "ReadRequest",
    "ReadResponse",
    "ReplicateRequest",
    "ReplicateResponse",
    "Route",
    "SHA1Sum",
    "Status",
    "TLSConfigError",
    "ValidationError",
    "add_value",
    "check_media_type",
    "codec_from_extension",
    "codec_to_extension",
    "desired_replication",
    "duration_from_nanos",
    "duration_from_seconds",
    "duration_nanos",
    "duration_seconds",
    "endpoint_grpc_addr",
    "endpoint_uses_tls",
    "enum_text",
    "format_duration",
    "format_duration_nanos",
    "format_go_time",
    "format_selector",
    "fragment_content_name",
    "fragment_path",
    "intersect",
    "journal_may_read",
    "journal_may_write",
    "label_set",
    "label_set_ext",
    "matches",
    "parse_duration",
    "parse_duration_nanos",
    "parse_fragment_path",
    "parse_selector",
    "path_clean",
    "remove",
    "render_postfix_template",
    "rewrite_prefix_selector",
    "route_equivalent",
    "set_value",
    "sha1sum_from_digest",
    "sha1sum_hex",
    "sha1sum_to_digest",
    "split_meta",
    "strip_meta",
    "subtract",
    "union",
    "validate",
    "validate_codec",
    "validate_endpoint",
    "validate_fragment",
    "validate_fragment_store",
    "validate_journal",
    "validate_label",
    "validate_labelset",
    "validate_offsets",
    "validate_path_component",
    "validate_postfix_template",
    "validate_selector",
    "validate_single_value_labels",
    "validate_status",
    "validate_token",
    "value_of",
    "values_of",
    "within",
]


if TYPE_CHECKING:
    from gazette.broker.protocol.postfix_template import (
        format_go_time,
        render_postfix_template,
        validate_postfix_template,
    )

_POSTFIX_TEMPLATE_NAMES = frozenset(
    ("format_go_time", "render_postfix_template", "validate_postfix_template")
)


def __getattr__(name: str) -> Any:
    # PEP 562: the postfix template names load with their module, on first use.
    if name in _POSTFIX_TEMPLATE_NAMES:
        from gazette.broker.protocol import postfix_template

        value = getattr(postfix_template, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
