"""Validation of every message Gazette validates (Gazette `*_extensions.go`, `rpc_extensions.go`).

`validate(msg)` dispatches on the message type. Each rule raises a
`ValidationError` whose context names the path of fields, e.g.
``Fragment.Stores[0]: missing bucket (gs:///baz/bing/)``. Fields that Gazette's
Go types hold by value (non-nullable) are validated even when absent on the
wire, as Go sees them as zero values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.message import Message

from gazette.broker.protocol import protocol_pb2 as _pb
from gazette.broker.protocol.durations import (
    HOUR,
    MINUTE,
    SECOND,
    duration_nanos,
    format_duration_nanos,
)
from gazette.broker.protocol.errors import ValidationError
from gazette.broker.protocol.fragments import (
    validate_codec,
    validate_endpoint,
    validate_fragment,
    validate_fragment_store,
)
from gazette.broker.protocol.gotext import message_text
from gazette.broker.protocol.labels import (
    LABEL_CONTENT_TYPE,
    LABEL_MESSAGE_SUBTYPE,
    LABEL_MESSAGE_TYPE,
    validate_label,
    validate_labelset,
    validate_single_value_labels,
    values_of,
)
from gazette.broker.protocol.postfix_template import validate_postfix_template
from gazette.broker.protocol.selector import validate_selector
from gazette.broker.protocol.tokens import (
    MAX_JOURNAL_NAME_LEN,
    TOKEN_SYMBOLS,
    split_meta,
    validate_journal,
    validate_path_component,
    validate_token,
)
from gazette.broker.protocol.urls import URLError, parse_url

__all__ = [
    "MAX_BROKER_JOURNAL_LIMIT",
    "MAX_FRAGMENT_LEN",
    "MAX_JOURNAL_REPLICATION",
    "MIN_FRAGMENT_LEN",
    "check_media_type",
    "desired_replication",
    "enum_text",
    "journal_may_read",
    "journal_may_write",
    "label_set_ext",
    "route_equivalent",
    "validate",
    "validate_offsets",
    "validate_status",
]

MAX_JOURNAL_REPLICATION = 5
MIN_FRAGMENT_LEN = 1 << 10
MAX_FRAGMENT_LEN = 1 << 34
MIN_REFRESH_INTERVAL = SECOND
MAX_REFRESH_INTERVAL = 24 * HOUR
MIN_FLUSH_INTERVAL = MINUTE
MIN_ZONE_LEN, MAX_ZONE_LEN = 1, 32
MIN_SUFFIX_LEN, MAX_SUFFIX_LEN = 4, 128
MAX_BROKER_JOURNAL_LIMIT = 1 << 17
MAX_PAGE_LIMIT = 10000


def enum_text(wrapper: Any, value: int) -> str:
    """Go's String() of an enum value: its name, or its number when unknown."""
    try:
        return str(wrapper.Name(value))
    except ValueError:
        return str(value)


# --------------------------------------------------------------------------- identities


def _validate_process_id(m: _pb.ProcessSpec.ID) -> None:
    try:
        validate_token(m.zone, MIN_ZONE_LEN, MAX_ZONE_LEN, TOKEN_SYMBOLS)
    except ValidationError as e:
        raise e.within("Zone") from None
    try:
        validate_token(m.suffix, MIN_SUFFIX_LEN, MAX_SUFFIX_LEN, TOKEN_SYMBOLS)
    except ValidationError as e:
        raise e.within("Suffix") from None


def _validate_process_spec(m: _pb.ProcessSpec) -> None:
    try:
        _validate_process_id(m.id)
    except ValidationError as e:
        raise e.within("Id") from None
    try:
        validate_endpoint(m.endpoint)
    except ValidationError as e:
        raise e.within("Endpoint") from None


def _validate_broker_spec(m: _pb.BrokerSpec) -> None:
    _validate_process_spec(m.process_spec)
    if m.journal_limit > MAX_BROKER_JOURNAL_LIMIT:
        raise ValidationError(
            f"invalid JournalLimit ({m.journal_limit}; expected 0 <= JournalLimit <= "
            f"{MAX_BROKER_JOURNAL_LIMIT})"
        )


def _id_text(m: _pb.ProcessSpec.ID) -> str:
    return f"{{Zone:{m.zone} Suffix:{m.suffix}}}"


def _validate_route(m: _pb.Route) -> None:
    members = m.members
    prev: _pb.ProcessSpec.ID | None = None
    for i, cur in enumerate(members):
        try:
            _validate_process_id(cur)
        except ValidationError as e:
            raise e.within(f"Members[{i}]") from None
        if prev is not None and not (prev.zone, prev.suffix) < (cur.zone, cur.suffix):
            raise ValidationError(
                f"Members not in unique, sorted order (index {i}; {_id_text(prev)} <= {_id_text(cur)})"
            )
        prev = cur
    n = len(members)
    if m.primary < -1 or m.primary >= n:
        raise ValidationError(f"invalid Primary ({m.primary}; expected -1 <= Primary < {n})")
    ne = len(m.endpoints)
    if ne != 0 and ne != n:
        raise ValidationError(f"len(Endpoints) != 0, and != len(Members) ({ne} vs {n})")
    for i, ep in enumerate(m.endpoints):
        if ep == "":
            continue
        try:
            validate_endpoint(ep)
        except ValidationError as e:
            raise e.within(f"Endpoints[{i}]") from None


def route_equivalent(a: _pb.Route, b: _pb.Route | None) -> bool:
    """Same primary and the same members in the same order; endpoints are ignored."""
    if b is None or a.primary != b.primary or len(a.members) != len(b.members):
        return False
    return all(
        x.zone == y.zone and x.suffix == y.suffix for x, y in zip(a.members, b.members, strict=True)
    )


def _validate_etcd(m: _pb.Header.Etcd) -> None:
    if m.cluster_id == 0:
        raise ValidationError("invalid ClusterId (expected != 0)")
    if m.member_id == 0:
        raise ValidationError("invalid MemberId (expected != 0)")
    if m.revision <= 0:
        raise ValidationError(f"invalid Revision ({m.revision}; expected 0 < revision)")
    if m.raft_term == 0:
        raise ValidationError("invalid RaftTerm (expected != 0)")


def _validate_header(m: _pb.Header) -> None:
    pid = m.process_id
    if pid.zone or pid.suffix:
        try:
            _validate_process_id(pid)
        except ValidationError as e:
            raise e.within("ProcessId") from None
    try:
        _validate_route(m.route)
    except ValidationError as e:
        raise e.within("Route") from None
    try:
        _validate_etcd(m.etcd)
    except ValidationError as e:
        raise e.within("Etcd") from None


def _header_in(m: _pb.Header, field: str = "Header") -> None:
    try:
        _validate_header(m)
    except ValidationError as e:
        raise e.within(field) from None


# --------------------------------------------------------------------------- journal specs

_TSPECIALS = frozenset('()<>@,;:\\"/[]?=')


def _consume_token(s: str) -> tuple[str, str]:
    i = 0
    while i < len(s) and " " < s[i] < "\x7f" and s[i] not in _TSPECIALS:
        i += 1
    return s[:i], s[i:]


def check_media_type(value: str) -> None:
    """Raise ValueError with Go's `mime.ParseMediaType` message if `value` is not a media type.

    Only the type/subtype part is checked: label values cannot hold ``;``
    parameters or spaces.
    """
    base = value.partition(";")[0].lower().strip()
    typ, rest = _consume_token(base)
    if typ == "":
        raise ValueError("mime: no media type")
    if rest == "":
        pass
    elif not rest.startswith("/"):
        raise ValueError("mime: expected slash after first token")
    else:
        sub, rest = _consume_token(rest[1:])
        if sub == "":
            raise ValueError("mime: expected token after slash")
        if rest != "":
            raise ValueError("mime: unexpected content after media subtype")
    if ";" in value:
        params = value[len(value.partition(";")[0]) :].strip()
        if params.strip(" ;") != "":
            raise ValueError("mime: invalid media parameter")


def _validate_journal_label_constraints(labels: _pb.LabelSet) -> None:
    validate_single_value_labels(labels)
    ct = values_of(labels, LABEL_CONTENT_TYPE)
    if ct:
        try:
            check_media_type(ct[0])
        except ValueError as e:
            raise ValidationError(f"parsing {LABEL_CONTENT_TYPE}: {e}") from None
    if values_of(labels, LABEL_MESSAGE_TYPE):
        if not ct:
            raise ValidationError(
                f"expected {LABEL_CONTENT_TYPE} label alongside {LABEL_MESSAGE_TYPE}"
            )
    elif values_of(labels, LABEL_MESSAGE_SUBTYPE):
        raise ValidationError(
            f"expected {LABEL_MESSAGE_TYPE} label alongside {LABEL_MESSAGE_SUBTYPE}"
        )


def _validate_spec_fragment(m: _pb.JournalSpec.Fragment) -> None:
    if m.length < MIN_FRAGMENT_LEN or m.length > MAX_FRAGMENT_LEN:
        raise ValidationError(
            f"invalid Length ({m.length}; expected {MIN_FRAGMENT_LEN} <= length <= {MAX_FRAGMENT_LEN})"
        )
    try:
        validate_codec(m.compression_codec)
    except ValidationError as e:
        raise e.within("CompressionCodec") from None
    for i, store in enumerate(m.stores):
        try:
            validate_fragment_store(store)
        except ValidationError as e:
            raise e.within(f"Stores[{i}]") from None
        if (
            i == 0
            and m.compression_codec == _pb.GZIP_OFFLOAD_DECOMPRESSION
            and parse_url(store).scheme == "file"
        ):
            raise ValidationError(
                f"GZIP_OFFLOAD_DECOMPRESSION is incompatible with file:// stores ({store})"
            )
    refresh = duration_nanos(m.refresh_interval)
    if refresh < MIN_REFRESH_INTERVAL or refresh > MAX_REFRESH_INTERVAL:
        raise ValidationError(
            f"invalid RefreshInterval ({format_duration_nanos(refresh)}; expected "
            f"{format_duration_nanos(MIN_REFRESH_INTERVAL)} <= interval <= "
            f"{format_duration_nanos(MAX_REFRESH_INTERVAL)})"
        )
    flush = duration_nanos(m.flush_interval)
    if flush != 0 and flush < MIN_FLUSH_INTERVAL:
        raise ValidationError(
            f"invalid FlushInterval ({format_duration_nanos(flush)}; expected >= "
            f"{format_duration_nanos(MIN_FLUSH_INTERVAL)})"
        )
    try:
        validate_postfix_template(m.path_postfix_template)
    except ValidationError as e:
        raise e.within("PathPostfixTemplate") from None


_FLAGS = frozenset({_pb.JournalSpec.NOT_SPECIFIED, _pb.JournalSpec.O_RDONLY,
                    _pb.JournalSpec.O_WRONLY, _pb.JournalSpec.O_RDWR})  # fmt: skip
_MAY_READ = frozenset(
    {_pb.JournalSpec.NOT_SPECIFIED, _pb.JournalSpec.O_RDONLY, _pb.JournalSpec.O_RDWR}
)
_MAY_WRITE = frozenset(
    {_pb.JournalSpec.NOT_SPECIFIED, _pb.JournalSpec.O_WRONLY, _pb.JournalSpec.O_RDWR}
)


def _validate_suspend(m: _pb.JournalSpec.Suspend) -> None:
    if m.level not in (0, 1, 2):
        raise ValidationError(
            f"invalid Level variant ({enum_text(_pb.JournalSpec.Suspend.Level, m.level)})",
            ("Level",),
        )
    if m.offset < 0:
        raise ValidationError(f"invalid Offset ({m.offset}; expected >= 0)", ("Offset",))


def _validate_journal_spec(m: _pb.JournalSpec) -> None:
    try:
        validate_journal(m.name)
    except ValidationError as e:
        raise e.within("Name") from None
    _, meta = split_meta(m.name)
    if meta:
        raise ValidationError(
            f"Name cannot have a metadata path segment ({meta}; expected no segment)"
        )
    if m.replication < 1 or m.replication > MAX_JOURNAL_REPLICATION:
        raise ValidationError(
            f"invalid Replication ({m.replication}; expected 1 <= Replication <= "
            f"{MAX_JOURNAL_REPLICATION})"
        )
    try:
        validate_labelset(m.labels)
    except ValidationError as e:
        raise e.within("Labels") from None
    if values_of(m.labels, "name"):
        raise ValidationError('Labels cannot include label "name"')
    if values_of(m.labels, "prefix"):
        raise ValidationError('Labels cannot include label "prefix"')
    try:
        _validate_journal_label_constraints(m.labels)
    except ValidationError as e:
        raise e.within("Labels") from None
    try:
        _validate_spec_fragment(m.fragment)
    except ValidationError as e:
        raise e.within("Fragment") from None
    if m.flags not in _FLAGS:
        raise ValidationError(
            f"invalid combination ({enum_text(_pb.JournalSpec.Flag, m.flags)})", ("Flags",)
        )
    if m.max_append_rate < 0:
        raise ValidationError(f"invalid MaxAppendRate ({m.max_append_rate}; expected >= 0)")
    try:
        _validate_suspend(m.suspend)
    except ValidationError as e:
        raise e.within("Suspend") from None


def journal_may_read(spec: _pb.JournalSpec) -> bool:
    """Reads (and ListFragments) are allowed by the spec's flags (NOT_SPECIFIED, O_RDONLY, O_RDWR)."""
    return spec.flags in _MAY_READ


def journal_may_write(spec: _pb.JournalSpec) -> bool:
    """Appends of content are allowed by the spec's flags (NOT_SPECIFIED, O_WRONLY, O_RDWR)."""
    return spec.flags in _MAY_WRITE


def desired_replication(spec: _pb.JournalSpec, max_replication: int = 9) -> int:
    """Replication, reduced by suspension (PARTIAL: 1, FULL: 0) and capped by `max_replication`."""
    r = spec.replication
    level = spec.suspend.level
    if level == _pb.JournalSpec.Suspend.PARTIAL:
        r = 1
    elif level == _pb.JournalSpec.Suspend.FULL:
        r = 0
    return min(r, max_replication)


def label_set_ext(spec: _pb.JournalSpec) -> _pb.LabelSet:
    """The spec's labels plus the meta-label ``name=<journal>`` (what selectors match)."""
    from gazette.broker.protocol.labels import union

    return union(_pb.LabelSet(labels=[_pb.Label(name="name", value=spec.name)]), spec.labels)


# --------------------------------------------------------------------------- RPC messages


def validate_status(status: int) -> None:
    """A known `Status` value."""
    if status not in _STATUSES:
        raise ValidationError(f"invalid status ({status})")


_STATUSES = frozenset(_pb.Status.values())


def _status_in(status: int) -> None:
    try:
        validate_status(status)
    except ValidationError as e:
        raise e.within("Status") from None


def _journal_in(journal: str, field: str = "Journal") -> None:
    try:
        validate_journal(journal)
    except ValidationError as e:
        raise e.within(field) from None


def _validate_read_request(m: _pb.ReadRequest) -> None:
    if m.HasField("header"):
        _header_in(m.header)
    _journal_in(m.journal)
    if m.offset < -1:
        raise ValidationError(f"invalid Offset ({m.offset}; expected -1 <= Offset <= MaxInt64)")
    if m.end_offset < 0 or (m.end_offset != 0 and m.end_offset < m.offset):
        raise ValidationError(
            f"invalid EndOffset ({m.end_offset}; expected 0 or Offset <= EndOffset)"
        )


def _validate_read_response(m: _pb.ReadResponse) -> None:
    _status_in(m.status)
    # proto3 cannot tell an empty `content` from an absent one: a response with
    # empty content is a metadata response (so never send empty chunks).
    if m.content:
        if m.status != _pb.OK:
            raise ValidationError(
                f"unexpected Status with Content ({enum_text(_pb.Status, m.status)})"
            )
        if m.HasField("header"):
            raise ValidationError(f"unexpected Header with Content ({message_text(m.header)})")
        if m.write_head != 0:
            raise ValidationError(f"unexpected WriteHead with Content ({m.write_head})")
        if m.HasField("fragment"):
            raise ValidationError(f"unexpected Fragment with Content ({message_text(m.fragment)})")
        if m.fragment_url:
            raise ValidationError(f"unexpected FragmentUrl with Content ({m.fragment_url})")
        return
    if m.HasField("header"):
        _header_in(m.header)
    if m.write_head < 0:
        raise ValidationError(f"invalid WriteHead ({m.write_head}; expected >= 0)")
    if m.HasField("fragment"):
        f = m.fragment
        try:
            validate_fragment(f)
        except ValidationError as e:
            raise e.within("Fragment") from None
        if m.offset < f.begin or m.offset >= f.end:
            raise ValidationError(
                f"invalid Offset ({m.offset}; expected {f.begin} <= offset < {f.end})"
            )
        if m.write_head < f.end:
            raise ValidationError(f"invalid WriteHead ({m.write_head}; expected >= {f.end})")
        if m.fragment_url:
            _url_in(m.fragment_url, "FragmentUrl")
    else:
        if m.status == _pb.OK and m.offset != 0:
            raise ValidationError(f"unexpected Offset without Fragment or Content ({m.offset})")
        if m.fragment_url:
            raise ValidationError(f"unexpected FragmentUrl without Fragment ({m.fragment_url})")


def _url_in(url: str, field: str) -> None:
    try:
        parse_url(url)
    except URLError as e:
        raise ValidationError(str(e), (field,)) from None


def _selector_in(m: _pb.LabelSelector, field: str) -> None:
    try:
        validate_selector(m)
    except ValidationError as e:
        raise e.within(field) from None


def _labelset_in(m: _pb.LabelSet, field: str) -> None:
    try:
        validate_labelset(m)
    except ValidationError as e:
        raise e.within(field) from None


_APPEND_SUSPENDS = frozenset(_pb.AppendRequest.Suspend.values())


def _validate_append_request(m: _pb.AppendRequest) -> None:
    if m.journal:
        if m.HasField("header"):
            _header_in(m.header)
        _journal_in(m.journal)
        if m.offset < 0:
            raise ValidationError(f"invalid Offset ({m.offset}; expected >= 0)")
        if m.content:
            raise ValidationError("unexpected Content")
        if m.HasField("check_registers"):
            _selector_in(m.check_registers, "CheckRegisters")
        if m.HasField("union_registers"):
            _labelset_in(m.union_registers, "UnionRegisters")
        if m.HasField("subtract_registers"):
            _labelset_in(m.subtract_registers, "SubtractRegisters")
        if m.suspend not in _APPEND_SUSPENDS:
            raise ValidationError(f"invalid Suspend variant ({m.suspend})", ("Suspend",))
        return
    if m.HasField("header"):
        raise ValidationError("unexpected Header")
    if m.do_not_proxy:
        raise ValidationError("unexpected DoNotProxy")
    if m.offset != 0:
        raise ValidationError("unexpected Offset")
    if m.HasField("check_registers"):
        raise ValidationError("unexpected CheckRegisters")
    if m.HasField("union_registers"):
        raise ValidationError("unexpected UnionRegisters")
    if m.HasField("subtract_registers"):
        raise ValidationError("unexpected SubtractRegisters")
    if m.suspend != _pb.AppendRequest.SUSPEND_RESUME:
        raise ValidationError(
            f"unexpected Suspend ({enum_text(_pb.AppendRequest.Suspend, m.suspend)}; "
            "expected SUSPEND_RESUMED)"
        )


def _validate_append_response(m: _pb.AppendResponse) -> None:
    _status_in(m.status)
    _header_in(m.header)
    if m.status == _pb.OK and not m.HasField("commit"):
        raise ValidationError("expected Commit")
    if m.status in (_pb.OK, _pb.REGISTER_MISMATCH) and not m.HasField("registers"):
        raise ValidationError("expected Registers")
    if m.HasField("commit"):
        try:
            validate_fragment(m.commit)
        except ValidationError as e:
            raise e.within("Commit") from None
    if m.HasField("registers"):
        _labelset_in(m.registers, "Registers")


def _validate_replicate_request(m: _pb.ReplicateRequest) -> None:
    if m.HasField("proposal"):
        # A missing `registers` reads as empty: Gazette's shim for older peers.
        if m.HasField("header"):
            _header_in(m.header)
            if not m.acknowledge:
                raise ValidationError("expected Acknowledge with Header")
        try:
            validate_fragment(m.proposal)
        except ValidationError as e:
            raise e.within("Proposal") from None
        _labelset_in(m.registers, "Registers")
        if m.content:
            raise ValidationError(f"unexpected Content with Proposal (len {len(m.content)})")
        if m.content_delta != 0:
            raise ValidationError(f"unexpected ContentDelta with Proposal ({m.content_delta})")
        if m.deprecated_journal and m.deprecated_journal != m.proposal.journal:
            raise ValidationError(
                "DeprecatedJournal and Proposal.Journal mismatch "
                f"({m.deprecated_journal} vs {m.proposal.journal})"
            )
        return
    if not m.content:
        raise ValidationError("expected Content or Proposal")
    if m.content_delta < 0:
        raise ValidationError(f"invalid ContentDelta ({m.content_delta}; expected >= 0)")
    if m.HasField("header"):
        raise ValidationError(f"unexpected Header with Content ({message_text(m.header)})")
    if m.HasField("registers"):
        raise ValidationError(f"unexpected Registers with Content ({message_text(m.registers)})")
    if m.acknowledge:
        raise ValidationError("unexpected Acknowledge with Content")
    if m.deprecated_journal:
        raise ValidationError("unexpected DeprecatedJournal with Content")


def _validate_replicate_response(m: _pb.ReplicateResponse) -> None:
    """Gazette's rule; note its primary attaches a header to its first OK ack anyway.

    A pipeline must therefore not apply this to acks (Gazette's does not either).
    """
    _status_in(m.status)
    if m.status == _pb.WRONG_ROUTE:
        if not m.HasField("header"):
            raise ValidationError("expected Header")
        _header_in(m.header)
    elif m.HasField("header"):
        raise ValidationError(f"unexpected Header ({message_text(m.header)})")
    if m.status == _pb.PROPOSAL_MISMATCH:
        if not m.HasField("fragment"):
            raise ValidationError("expected Fragment")
        try:
            validate_fragment(m.fragment)
        except ValidationError as e:
            raise e.within("Fragment") from None
        if not m.HasField("registers"):
            raise ValidationError("expected Registers")
        _labelset_in(m.registers, "Registers")
    elif m.HasField("fragment"):
        raise ValidationError(f"unexpected Fragment ({message_text(m.fragment)})")
    elif m.HasField("registers"):
        raise ValidationError(f"unexpected Registers ({message_text(m.registers)})")


def _validate_list_request(m: _pb.ListRequest) -> None:
    _selector_in(m.selector, "Selector")
    for group, name in ((m.selector.include, "Include"), (m.selector.exclude, "Exclude")):
        for v in values_of(group, "prefix"):
            if not v.endswith("/"):
                raise ValidationError(
                    f"Selector.{name}.Labels[\"prefix\"]: expected trailing '/' ({v})"
                )


def _validate_list_response_journal(m: _pb.ListResponse.Journal) -> None:
    try:
        _validate_journal_spec(m.spec)
    except ValidationError as e:
        raise e.within("Spec") from None
    if m.mod_revision <= 0:
        raise ValidationError(f"invalid ModRevision ({m.mod_revision}; expected > 0)")
    try:
        _validate_route(m.route)
    except ValidationError as e:
        raise e.within("Route") from None


def _validate_list_response(m: _pb.ListResponse) -> None:
    _status_in(m.status)
    _header_in(m.header)
    for i, j in enumerate(m.journals):
        try:
            _validate_list_response_journal(j)
        except ValidationError as e:
            raise e.within(f"Journals[{i}]") from None


def _validate_apply_change(m: _pb.ApplyRequest.Change) -> None:
    if m.HasField("upsert"):
        if m.delete:
            raise ValidationError("both Upsert and Delete are set (expected exactly one)")
        try:
            _validate_journal_spec(m.upsert)
        except ValidationError as e:
            raise e.within("Upsert") from None
        if m.expect_mod_revision < 0 and m.expect_mod_revision != -1:
            raise ValidationError(
                f"invalid ExpectModRevision ({m.expect_mod_revision}; expected >= 0 or -1)"
            )
    elif m.delete:
        _journal_in(m.delete, "Delete")
        if m.expect_mod_revision <= 0 and m.expect_mod_revision != -1:
            raise ValidationError(
                f"invalid ExpectModRevision ({m.expect_mod_revision}; expected > 0 or -1)"
            )
    else:
        raise ValidationError("neither Upsert nor Delete are set (expected exactly one)")


def _validate_apply_request(m: _pb.ApplyRequest) -> None:
    for i, c in enumerate(m.changes):
        try:
            _validate_apply_change(c)
        except ValidationError as e:
            raise e.within(f"Changes[{i}]") from None


def _validate_status_header(m: Any) -> None:
    _status_in(m.status)
    _header_in(m.header)


def _validate_fragments_request(m: _pb.FragmentsRequest) -> None:
    if m.HasField("header"):
        _header_in(m.header)
    _journal_in(m.journal)
    if m.end_mod_time != 0 and m.end_mod_time < m.begin_mod_time:
        raise ValidationError(
            f"invalid EndModTime ({m.end_mod_time} must be after {m.begin_mod_time})"
        )
    if m.next_page_token < 0:
        raise ValidationError(f"invalid NextPageToken ({m.next_page_token}; must be >= 0)")
    if m.page_limit < 0 or m.page_limit > MAX_PAGE_LIMIT:
        raise ValidationError(
            f"invalid PageLimit ({m.page_limit}; must be >= 0 and <= {MAX_PAGE_LIMIT})"
        )
    if m.HasField("signatureTTL"):
        ttl = duration_nanos(m.signatureTTL)
        if ttl <= 0:
            raise ValidationError(
                f"invalid SignatureTTL ({format_duration_nanos(ttl)}; must be > 0s)"
            )


def _validate_fragments_response_fragment(m: _pb.FragmentsResponse._Fragment) -> None:
    try:
        validate_fragment(m.spec)
    except ValidationError as e:
        raise e.within("Spec") from None
    _url_in(m.signed_url, "SignedUrl")


def _validate_fragments_response(m: _pb.FragmentsResponse) -> None:
    _validate_status_header(m)
    for i, f in enumerate(m.fragments):
        try:
            _validate_fragments_response_fragment(f)
        except ValidationError as e:
            raise e.within(f"Fragments[{i}]") from None


def _validate_store_health_request(m: _pb.FragmentStoreHealthRequest) -> None:
    try:
        validate_fragment_store(m.fragment_store)
    except ValidationError as e:
        raise e.within("FragmentStore") from None
    prefix = m.check_delete_prefix
    if prefix and not m.check_delete:
        raise ValidationError("cannot be set when CheckDelete is false", ("CheckDeletePrefix",))
    if prefix:
        if not prefix.endswith("/"):
            raise ValidationError(f"must end in '/' ({prefix})", ("CheckDeletePrefix",))
        trimmed = prefix[:-1]
        if trimmed == ".." or trimmed.startswith("../"):
            raise ValidationError(
                f"cannot traverse outside the store ({prefix})", ("CheckDeletePrefix",)
            )
        try:
            validate_path_component(trimmed, 1, MAX_JOURNAL_NAME_LEN)
        except ValidationError as e:
            raise e.within("CheckDeletePrefix") from None


def validate_offsets(offsets: Mapping[str, int]) -> None:
    """Journal -> offset maps: each journal valid and each offset >= 0 (Gazette `Offsets`)."""
    for journal, offset in offsets.items():
        try:
            validate_journal(journal)
            if offset < 0:
                raise ValidationError(f"invalid offset ({offset}; expected >= 0)")
        except ValidationError as e:
            raise e.within(f"Offsets[{journal}]") from None


# --------------------------------------------------------------------------- dispatch

_VALIDATORS: dict[type[Message], Callable[[Any], None]] = {
    _pb.Label: validate_label,
    _pb.LabelSet: validate_labelset,
    _pb.LabelSelector: validate_selector,
    _pb.JournalSpec: _validate_journal_spec,
    _pb.JournalSpec.Fragment: _validate_spec_fragment,
    _pb.JournalSpec.Suspend: _validate_suspend,
    _pb.ProcessSpec: _validate_process_spec,
    _pb.ProcessSpec.ID: _validate_process_id,
    _pb.BrokerSpec: _validate_broker_spec,
    _pb.Fragment: validate_fragment,
    _pb.Route: _validate_route,
    _pb.Header: _validate_header,
    _pb.Header.Etcd: _validate_etcd,
    _pb.ReadRequest: _validate_read_request,
    _pb.ReadResponse: _validate_read_response,
    _pb.AppendRequest: _validate_append_request,
    _pb.AppendResponse: _validate_append_response,
    _pb.ReplicateRequest: _validate_replicate_request,
    _pb.ReplicateResponse: _validate_replicate_response,
    _pb.ListRequest: _validate_list_request,
    _pb.ListResponse: _validate_list_response,
    _pb.ListResponse.Journal: _validate_list_response_journal,
    _pb.ApplyRequest: _validate_apply_request,
    _pb.ApplyRequest.Change: _validate_apply_change,
    _pb.ApplyResponse: _validate_status_header,
    _pb.FragmentsRequest: _validate_fragments_request,
    _pb.FragmentsResponse: _validate_fragments_response,
    _pb.FragmentsResponse._Fragment: _validate_fragments_response_fragment,
    _pb.FragmentStoreHealthRequest: _validate_store_health_request,
    _pb.FragmentStoreHealthResponse: _validate_status_header,
}


def validate(msg: Message) -> None:
    """Validate `msg` by its type; raise ValidationError on the first broken rule.

    Raises TypeError for a message type which has no validation rules.
    """
    fn = _VALIDATORS.get(type(msg))
    if fn is None:
        raise TypeError(f"no validation rules for {type(msg).__qualname__}")
    fn(msg)
