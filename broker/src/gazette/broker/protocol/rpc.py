"""Validation of the request and response messages of the Journal service.

Gazette's `rpc_extensions.go`: Read, Append, Replicate, List, Apply,
ListFragments and FragmentStoreHealth, plus the `Status` of a response and
journal -> offset maps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gazette.broker.protocol import protocol_pb2 as _pb
from gazette.broker.protocol.durations import duration_nanos, format_duration_nanos
from gazette.broker.protocol.errors import ValidationError, within
from gazette.broker.protocol.fragments import validate_fragment, validate_fragment_store
from gazette.broker.protocol.gotext import enum_text, message_text
from gazette.broker.protocol.headers import header_in, validate_route
from gazette.broker.protocol.labels import validate_labelset, values_of
from gazette.broker.protocol.selector import validate_selector
from gazette.broker.protocol.specs import validate_journal_spec
from gazette.broker.protocol.tokens import (
    MAX_JOURNAL_NAME_LEN,
    validate_journal,
    validate_path_component,
)
from gazette.broker.protocol.urls import URLError, parse_url

__all__ = [
    "validate_append_request",
    "validate_append_response",
    "validate_apply_change",
    "validate_apply_request",
    "validate_fragments_request",
    "validate_fragments_response",
    "validate_fragments_response_fragment",
    "validate_list_request",
    "validate_list_response",
    "validate_list_response_journal",
    "validate_offsets",
    "validate_read_request",
    "validate_read_response",
    "validate_replicate_request",
    "validate_replicate_response",
    "validate_status",
    "validate_status_header",
    "validate_store_health_request",
]

MAX_PAGE_LIMIT = 10000


def validate_status(status: int) -> None:
    """A known `Status` value."""
    if status not in _STATUSES:
        raise ValidationError(f"invalid status ({status})")


_STATUSES = frozenset(_pb.Status.values())


def _status_in(status: int) -> None:
    with within("Status"):
        validate_status(status)


def _journal_in(journal: str, field: str = "Journal") -> None:
    with within(field):
        validate_journal(journal)


def validate_read_request(m: _pb.ReadRequest) -> None:
    if m.HasField("header"):
        header_in(m.header)
    _journal_in(m.journal)
    if m.offset < -1:
        raise ValidationError(f"invalid Offset ({m.offset}; expected -1 <= Offset <= MaxInt64)")
    if m.end_offset < 0 or (m.end_offset != 0 and m.end_offset < m.offset):
        raise ValidationError(
            f"invalid EndOffset ({m.end_offset}; expected 0 or Offset <= EndOffset)"
        )


def validate_read_response(m: _pb.ReadResponse) -> None:
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
        header_in(m.header)
    if m.write_head < 0:
        raise ValidationError(f"invalid WriteHead ({m.write_head}; expected >= 0)")
    if m.HasField("fragment"):
        f = m.fragment
        with within("Fragment"):
            validate_fragment(f)
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
    with within(field):
        validate_selector(m)


def _labelset_in(m: _pb.LabelSet, field: str) -> None:
    with within(field):
        validate_labelset(m)


_APPEND_SUSPENDS = frozenset(_pb.AppendRequest.Suspend.values())


def validate_append_request(m: _pb.AppendRequest) -> None:
    if m.journal:
        if m.HasField("header"):
            header_in(m.header)
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


def validate_append_response(m: _pb.AppendResponse) -> None:
    _status_in(m.status)
    header_in(m.header)
    if m.status == _pb.OK and not m.HasField("commit"):
        raise ValidationError("expected Commit")
    if m.status in (_pb.OK, _pb.REGISTER_MISMATCH) and not m.HasField("registers"):
        raise ValidationError("expected Registers")
    if m.HasField("commit"):
        with within("Commit"):
            validate_fragment(m.commit)
    if m.HasField("registers"):
        _labelset_in(m.registers, "Registers")


def validate_replicate_request(m: _pb.ReplicateRequest) -> None:
    if m.HasField("proposal"):
        # A missing `registers` reads as empty: Gazette's shim for older peers.
        if m.HasField("header"):
            header_in(m.header)
            if not m.acknowledge:
                raise ValidationError("expected Acknowledge with Header")
        with within("Proposal"):
            validate_fragment(m.proposal)
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


def validate_replicate_response(m: _pb.ReplicateResponse) -> None:
    """Gazette's rule; note its primary attaches a header to its first OK ack anyway.

    A pipeline must therefore not apply this to acks (Gazette's does not either).
    """
    _status_in(m.status)
    if m.status == _pb.WRONG_ROUTE:
        if not m.HasField("header"):
            raise ValidationError("expected Header")
        header_in(m.header)
    elif m.HasField("header"):
        raise ValidationError(f"unexpected Header ({message_text(m.header)})")
    if m.status == _pb.PROPOSAL_MISMATCH:
        if not m.HasField("fragment"):
            raise ValidationError("expected Fragment")
        with within("Fragment"):
            validate_fragment(m.fragment)
        if not m.HasField("registers"):
            raise ValidationError("expected Registers")
        _labelset_in(m.registers, "Registers")
    elif m.HasField("fragment"):
        raise ValidationError(f"unexpected Fragment ({message_text(m.fragment)})")
    elif m.HasField("registers"):
        raise ValidationError(f"unexpected Registers ({message_text(m.registers)})")


def validate_list_request(m: _pb.ListRequest) -> None:
    _selector_in(m.selector, "Selector")
    for group, name in ((m.selector.include, "Include"), (m.selector.exclude, "Exclude")):
        for v in values_of(group, "prefix"):
            if not v.endswith("/"):
                raise ValidationError(
                    f"Selector.{name}.Labels[\"prefix\"]: expected trailing '/' ({v})"
                )


def validate_list_response_journal(m: _pb.ListResponse.Journal) -> None:
    with within("Spec"):
        validate_journal_spec(m.spec)
    if m.mod_revision <= 0:
        raise ValidationError(f"invalid ModRevision ({m.mod_revision}; expected > 0)")
    with within("Route"):
        validate_route(m.route)


def validate_list_response(m: _pb.ListResponse) -> None:
    _status_in(m.status)
    header_in(m.header)
    for i, j in enumerate(m.journals):
        with within(f"Journals[{i}]"):
            validate_list_response_journal(j)


def validate_apply_change(m: _pb.ApplyRequest.Change) -> None:
    if m.HasField("upsert"):
        if m.delete:
            raise ValidationError("both Upsert and Delete are set (expected exactly one)")
        with within("Upsert"):
            validate_journal_spec(m.upsert)
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


def validate_apply_request(m: _pb.ApplyRequest) -> None:
    for i, c in enumerate(m.changes):
        with within(f"Changes[{i}]"):
            validate_apply_change(c)


def validate_status_header(m: Any) -> None:
    _status_in(m.status)
    header_in(m.header)


def validate_fragments_request(m: _pb.FragmentsRequest) -> None:
    if m.HasField("header"):
        header_in(m.header)
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


def validate_fragments_response_fragment(m: _pb.FragmentsResponse._Fragment) -> None:
    with within("Spec"):
        validate_fragment(m.spec)
    _url_in(m.signed_url, "SignedUrl")


def validate_fragments_response(m: _pb.FragmentsResponse) -> None:
    validate_status_header(m)
    for i, f in enumerate(m.fragments):
        with within(f"Fragments[{i}]"):
            validate_fragments_response_fragment(f)


def validate_store_health_request(m: _pb.FragmentStoreHealthRequest) -> None:
    with within("FragmentStore"):
        validate_fragment_store(m.fragment_store)
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
        with within("CheckDeletePrefix"):
            validate_path_component(trimmed, 1, MAX_JOURNAL_NAME_LEN)


def validate_offsets(offsets: Mapping[str, int]) -> None:
    """Journal -> offset maps: each journal valid and each offset >= 0 (Gazette `Offsets`)."""
    for journal, offset in offsets.items():
        with within(f"Offsets[{journal}]"):
            validate_journal(journal)
            if offset < 0:
                raise ValidationError(f"invalid offset ({offset}; expected >= 0)")
