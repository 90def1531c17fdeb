"""ProcessSpec, BrokerSpec, Route, Header and every RPC message rule (broker.md §1.5, §2.1, §3.2)."""

from collections.abc import Callable

import pytest

from gazette.broker import protocol as pb
from gazette.broker.protocol import protocol_pb2


def _err(msg) -> str:
    with pytest.raises(pb.ValidationError) as info:
        pb.validate(msg)
    return str(info.value)


def _id(zone: str = "zone-a", suffix: str = "member-1") -> pb.ProcessSpec.ID:
    return pb.ProcessSpec.ID(zone=zone, suffix=suffix)


def _route() -> pb.Route:
    return pb.Route(
        primary=-1,
        members=[_id("zone-a", "member-1"), _id("zone-a", "member-3"), _id("zone-b", "member-2")],
        endpoints=["http://foo", "http://bar", "http://baz"],
    )


def _header() -> pb.Header:
    return pb.Header(
        process_id=_id(),
        route=_route(),
        etcd=pb.Header.Etcd(cluster_id=12, member_id=34, revision=56, raft_term=78),
    )


def _frag() -> pb.Fragment:
    return pb.Fragment(journal="a/journal", begin=100, end=200, compression_codec=pb.NONE)


def _spec() -> pb.JournalSpec:
    return pb.JournalSpec(
        name="a/journal",
        replication=1,
        fragment=pb.JournalSpec.Fragment(
            length=1024, compression_codec=pb.NONE, refresh_interval=pb.duration_from_seconds(60)
        ),
    )


Mutation = Callable[[object], None]


def _run(build: Callable[[], object], cases: list[tuple[Mutation, str | None]]) -> None:
    base = build()
    pb.validate(base)  # type: ignore[arg-type]
    for mutate, expect in cases:
        msg = build()
        mutate(msg)
        if expect is None:
            pb.validate(msg)  # type: ignore[arg-type]
        else:
            assert _err(msg) == expect, expect


# --------------------------------------------------------------------------- identities


@pytest.mark.parametrize(
    ("pid", "expect"),
    [
        (_id("a", "abcd"), None),
        (_id("z" * 32, "s" * 128), None),
        (_id("", "member-1"), "Zone: invalid length (0; expected 1 <= length <= 32)"),
        (_id("z" * 33, "member-1"), "Zone: invalid length (33; expected 1 <= length <= 32)"),
        (_id("invalid zone", "member-1"), "Zone: not a valid token (invalid zone)"),
        (_id("zone", "abc"), "Suffix: invalid length (3; expected 4 <= length <= 128)"),
        (_id("zone", "s" * 129), "Suffix: invalid length (129; expected 4 <= length <= 128)"),
        (_id("zone", "bad=suffix"), "Suffix: not a valid token (bad=suffix)"),
    ],
)
def test_process_id(pid: pb.ProcessSpec.ID, expect: str | None) -> None:
    if expect is None:
        pb.validate(pid)
    else:
        assert _err(pid) == expect


def test_process_and_broker_spec() -> None:
    spec = pb.ProcessSpec(id=_id(), endpoint="http://host:8080")
    pb.validate(spec)
    assert (
        _err(pb.ProcessSpec(id=_id("bad zone"), endpoint="http://a"))
        == "Id.Zone: not a valid token (bad zone)"
    )
    assert _err(pb.ProcessSpec(id=_id(), endpoint="invalid")) == "Endpoint: not absolute: invalid"
    assert _err(pb.ProcessSpec(id=_id(), endpoint="")) == "Endpoint: not absolute: "

    broker = pb.BrokerSpec(process_spec=spec, journal_limit=1 << 17)
    pb.validate(broker)
    broker.journal_limit = (1 << 17) + 1
    assert _err(broker) == "invalid JournalLimit (131073; expected 0 <= JournalLimit <= 131072)"
    broker.process_spec.endpoint = "http:///x"
    assert _err(broker) == "Endpoint: missing host: http:///x"  # No extra context, as Gazette.


# --------------------------------------------------------------------------- routes and headers


def test_route_rules() -> None:
    def swap(r: pb.Route) -> None:
        a, b = pb.ProcessSpec.ID(), pb.ProcessSpec.ID()
        a.CopyFrom(r.members[1])
        b.CopyFrom(r.members[2])
        r.members[1].CopyFrom(b)
        r.members[2].CopyFrom(a)

    def dup(r: pb.Route) -> None:
        r.members[1].CopyFrom(r.members[0])

    _run(
        _route,
        [
            (
                lambda r: setattr(r.members[0], "zone", "invalid zone"),
                "Members[0].Zone: not a valid token (invalid zone)",
            ),
            (
                swap,
                "Members not in unique, sorted order (index 2; {Zone:zone-b Suffix:member-2} <= {Zone:zone-a Suffix:member-3})",
            ),
            (
                dup,
                "Members not in unique, sorted order (index 1; {Zone:zone-a Suffix:member-1} <= {Zone:zone-a Suffix:member-1})",
            ),
            (
                lambda r: setattr(r, "primary", -2),
                "invalid Primary (-2; expected -1 <= Primary < 3)",
            ),
            (lambda r: setattr(r, "primary", 3), "invalid Primary (3; expected -1 <= Primary < 3)"),
            (lambda r: setattr(r, "primary", 2), None),
            (
                lambda r: r.endpoints.append("http://bing"),
                "len(Endpoints) != 0, and != len(Members) (4 vs 3)",
            ),
            (lambda r: r.endpoints.__delitem__(slice(None)), None),
            (
                lambda r: r.endpoints.__setitem__(2, "invalid"),
                "Endpoints[2]: not absolute: invalid",
            ),
            (lambda r: r.endpoints.__setitem__(2, ""), None),  # A missing member key.
        ],
    )
    pb.validate(pb.Route(primary=-1))
    assert _err(pb.Route()) == "invalid Primary (0; expected -1 <= Primary < 0)"


def test_route_equivalence() -> None:
    rt = _route()
    other = _route()
    del other.endpoints[:]
    assert pb.route_equivalent(rt, other) and pb.route_equivalent(other, rt)
    rt.primary = 1
    assert not pb.route_equivalent(rt, other) and not pb.route_equivalent(other, rt)
    other.primary = 1
    other.members[1].zone = "zone-aa"
    assert not pb.route_equivalent(rt, other)
    rt.members[1].zone = "zone-aa"
    assert pb.route_equivalent(rt, other)
    assert not pb.route_equivalent(rt, None)
    del other.members[2]
    assert not pb.route_equivalent(rt, other)


def test_header_rules() -> None:
    _run(
        _header,
        [
            (lambda h: h.process_id.Clear(), None),  # Empty ProcessId is allowed.
            (
                lambda h: setattr(h.process_id, "zone", "bad zone"),
                "ProcessId.Zone: not a valid token (bad zone)",
            ),
            (
                lambda h: setattr(h.route, "primary", 3),
                "Route: invalid Primary (3; expected -1 <= Primary < 3)",
            ),
            (lambda h: setattr(h.etcd, "cluster_id", 0), "Etcd: invalid ClusterId (expected != 0)"),
            (lambda h: setattr(h.etcd, "member_id", 0), "Etcd: invalid MemberId (expected != 0)"),
            (
                lambda h: setattr(h.etcd, "revision", 0),
                "Etcd: invalid Revision (0; expected 0 < revision)",
            ),
            (
                lambda h: setattr(h.etcd, "revision", -5),
                "Etcd: invalid Revision (-5; expected 0 < revision)",
            ),
            (lambda h: setattr(h.etcd, "raft_term", 0), "Etcd: invalid RaftTerm (expected != 0)"),
        ],
    )
    assert _err(pb.Header(route=pb.Route(primary=-1))) == "Etcd: invalid ClusterId (expected != 0)"


# --------------------------------------------------------------------------- Read


def test_read_request() -> None:
    _run(
        lambda: pb.ReadRequest(
            header=_header(), journal="a/journal;meta", offset=10, end_offset=20
        ),
        [
            (lambda m: m.ClearField("header"), None),
            (
                lambda m: setattr(m.header.etcd, "revision", 0),
                "Header.Etcd: invalid Revision (0; expected 0 < revision)",
            ),
            (lambda m: setattr(m, "journal", "/bad"), "Journal: cannot begin with '/' (/bad)"),
            (
                lambda m: setattr(m, "journal", "a/journal;"),
                "Journal.metadata path segment: invalid length (0; expected 1 <= length <= 512)",
            ),
            (lambda m: setattr(m, "offset", -1), None),
            (
                lambda m: setattr(m, "offset", -2),
                "invalid Offset (-2; expected -1 <= Offset <= MaxInt64)",
            ),
            (
                lambda m: setattr(m, "end_offset", -1),
                "invalid EndOffset (-1; expected 0 or Offset <= EndOffset)",
            ),
            (
                lambda m: setattr(m, "end_offset", 9),
                "invalid EndOffset (9; expected 0 or Offset <= EndOffset)",
            ),
            (lambda m: setattr(m, "end_offset", 10), None),
            (lambda m: setattr(m, "end_offset", 0), None),
        ],
    )


def test_read_response() -> None:
    def meta() -> pb.ReadResponse:
        return pb.ReadResponse(
            status=pb.OK, header=_header(), offset=150, write_head=250, fragment=_frag(),
            fragment_url="https://bucket/a/journal/frag?sig=1",
        )  # fmt: skip

    _run(
        meta,
        [
            (lambda m: setattr(m, "status", 99), "Status: invalid status (99)"),
            (lambda m: m.ClearField("header"), None),
            (
                lambda m: setattr(m.header.etcd, "cluster_id", 0),
                "Header.Etcd: invalid ClusterId (expected != 0)",
            ),
            (lambda m: setattr(m, "write_head", -1), "invalid WriteHead (-1; expected >= 0)"),
            (
                lambda m: setattr(m.fragment, "begin", 300),
                "Fragment: expected Begin <= End (have 300, 200)",
            ),
            (
                lambda m: setattr(m, "offset", 99),
                "invalid Offset (99; expected 100 <= offset < 200)",
            ),
            (
                lambda m: setattr(m, "offset", 200),
                "invalid Offset (200; expected 100 <= offset < 200)",
            ),
            (lambda m: setattr(m, "write_head", 199), "invalid WriteHead (199; expected >= 200)"),
            (
                lambda m: setattr(m, "fragment_url", "http://a b/"),
                'FragmentUrl: parse "http://a b/": invalid character " " in host name',
            ),
            (lambda m: setattr(m, "fragment_url", ""), None),
            # Without a fragment: an OK status carries offset 0, and no URL.
            (
                lambda m: (m.ClearField("fragment"), m.ClearField("fragment_url")),
                "unexpected Offset without Fragment or Content (150)",
            ),
            (
                lambda m: (
                    m.ClearField("fragment"),
                    m.ClearField("fragment_url"),
                    setattr(m, "offset", 0),
                ),
                None,
            ),
            (
                lambda m: (m.ClearField("fragment"), setattr(m, "offset", 0)),
                "unexpected FragmentUrl without Fragment (https://bucket/a/journal/frag?sig=1)",
            ),
            (
                lambda m: (
                    m.ClearField("fragment"),
                    m.ClearField("fragment_url"),
                    setattr(m, "status", pb.OFFSET_NOT_YET_AVAILABLE),
                ),
                None,
            ),
        ],
    )
    _run(
        lambda: pb.ReadResponse(status=pb.OK, offset=150, content=b"chunk"),
        [
            (
                lambda m: setattr(m, "status", pb.WRONG_ROUTE),
                "unexpected Status with Content (WRONG_ROUTE)",
            ),
            (lambda m: setattr(m, "write_head", 1), "unexpected WriteHead with Content (1)"),
            (lambda m: setattr(m, "fragment_url", "x"), "unexpected FragmentUrl with Content (x)"),
        ],
    )
    chunk = pb.ReadResponse(status=pb.OK, content=b"chunk", header=_header())
    assert _err(chunk).startswith("unexpected Header with Content (")
    chunk = pb.ReadResponse(status=pb.OK, content=b"chunk", fragment=_frag())
    assert _err(chunk).startswith("unexpected Fragment with Content (")


# --------------------------------------------------------------------------- Append


def test_append_request_first() -> None:
    _run(
        lambda: pb.AppendRequest(
            header=_header(),
            journal="a/journal;meta",
            offset=10,
            check_registers=pb.parse_selector("aa:prefix=x"),
            union_registers=pb.label_set([("aa", "1")]),
            subtract_registers=pb.label_set([("bb", "2")]),
            suspend=pb.AppendRequest.SUSPEND_NOW,
        ),
        [
            (
                lambda m: setattr(m.header.etcd, "raft_term", 0),
                "Header.Etcd: invalid RaftTerm (expected != 0)",
            ),
            (lambda m: setattr(m, "journal", "a//b"), "Journal: must be a clean path (a//b)"),
            (lambda m: setattr(m, "offset", -1), "invalid Offset (-1; expected >= 0)"),
            (lambda m: setattr(m, "content", b"x"), "unexpected Content"),
            (
                lambda m: setattr(m.check_registers.include.labels[0], "name", "bad name"),
                "CheckRegisters.Include.Labels[0].Name: not a valid token (bad name)",
            ),
            (
                lambda m: setattr(m.union_registers.labels[0], "prefix", True),
                "UnionRegisters.Labels[0]: Prefix may not be set outside of a LabelSelector",
            ),
            (
                lambda m: setattr(m.subtract_registers.labels[0], "value", "a b"),
                "SubtractRegisters.Labels[0].Value: not a valid token (a b)",
            ),
            (lambda m: setattr(m, "suspend", 99), "Suspend: invalid Suspend variant (99)"),
        ],
    )


def test_append_request_continuation() -> None:
    _run(
        lambda: pb.AppendRequest(content=b"more data"),
        [
            (lambda m: m.ClearField("content"), None),  # The commit marker.
            (lambda m: m.header.CopyFrom(_header()), "unexpected Header"),
            (lambda m: setattr(m, "do_not_proxy", True), "unexpected DoNotProxy"),
            (lambda m: setattr(m, "offset", 5), "unexpected Offset"),
            (lambda m: m.check_registers.SetInParent(), "unexpected CheckRegisters"),
            (lambda m: m.union_registers.SetInParent(), "unexpected UnionRegisters"),
            (lambda m: m.subtract_registers.SetInParent(), "unexpected SubtractRegisters"),
            (
                lambda m: setattr(m, "suspend", pb.AppendRequest.SUSPEND_KEEP),
                "unexpected Suspend (SUSPEND_KEEP; expected SUSPEND_RESUMED)",
            ),
        ],
    )


def test_append_response() -> None:
    _run(
        lambda: pb.AppendResponse(
            status=pb.OK, header=_header(), commit=_frag(), registers=pb.LabelSet()
        ),
        [
            (lambda m: setattr(m, "status", 16), "Status: invalid status (16)"),
            (
                lambda m: m.ClearField("header"),
                "Header.Route: invalid Primary (0; expected -1 <= Primary < 0)",
            ),
            (lambda m: m.ClearField("commit"), "expected Commit"),
            (lambda m: m.ClearField("registers"), "expected Registers"),
            (lambda m: (setattr(m, "status", pb.REGISTER_MISMATCH), m.ClearField("commit")), None),
            (
                lambda m: (setattr(m, "status", pb.REGISTER_MISMATCH), m.ClearField("registers")),
                "expected Registers",
            ),
            (
                lambda m: (
                    setattr(m, "status", pb.WRONG_APPEND_OFFSET),
                    m.ClearField("commit"),
                    m.ClearField("registers"),
                ),
                None,
            ),
            (
                lambda m: setattr(m.commit, "journal", "x"),
                "Commit.Journal: invalid length (1; expected 4 <= length <= 512)",
            ),
            (
                lambda m: m.registers.labels.add(name="x"),
                "Registers.Labels[0].Name: invalid length (1; expected 2 <= length <= 64)",
            ),
        ],
    )


# --------------------------------------------------------------------------- Replicate


def test_replicate_request_proposal() -> None:
    _run(
        lambda: pb.ReplicateRequest(
            header=_header(),
            proposal=_frag(),
            registers=pb.label_set([("aa", "1")]),
            acknowledge=True,
            deprecated_journal="a/journal",
        ),
        [
            (lambda m: m.ClearField("header"), None),
            (
                lambda m: setattr(m.header.etcd, "member_id", 0),
                "Header.Etcd: invalid MemberId (expected != 0)",
            ),
            (lambda m: setattr(m, "acknowledge", False), "expected Acknowledge with Header"),
            (
                lambda m: setattr(m.proposal, "end", 1),
                "Proposal: expected Begin <= End (have 100, 1)",
            ),
            (lambda m: m.ClearField("registers"), None),  # Read as empty, as Gazette's shim does.
            (
                lambda m: setattr(m.registers.labels[0], "name", "b b"),
                "Registers.Labels[0].Name: not a valid token (b b)",
            ),
            (lambda m: setattr(m, "content", b"abc"), "unexpected Content with Proposal (len 3)"),
            (lambda m: setattr(m, "content_delta", 5), "unexpected ContentDelta with Proposal (5)"),
            (lambda m: setattr(m, "deprecated_journal", ""), None),
            (
                lambda m: setattr(m, "deprecated_journal", "other/journal"),
                "DeprecatedJournal and Proposal.Journal mismatch (other/journal vs a/journal)",
            ),
        ],
    )


def test_replicate_request_content() -> None:
    _run(
        lambda: pb.ReplicateRequest(content=b"data", content_delta=10),
        [
            (lambda m: m.ClearField("content"), "expected Content or Proposal"),
            (lambda m: setattr(m, "content_delta", -1), "invalid ContentDelta (-1; expected >= 0)"),
            (lambda m: m.registers.SetInParent(), "unexpected Registers with Content ()"),
            (lambda m: setattr(m, "acknowledge", True), "unexpected Acknowledge with Content"),
            (
                lambda m: setattr(m, "deprecated_journal", "a/journal"),
                "unexpected DeprecatedJournal with Content",
            ),
        ],
    )
    msg = pb.ReplicateRequest(content=b"data", header=_header())
    # Go formats the Header with its compact text form (trailing space included).
    assert _err(msg).startswith("unexpected Header with Content (process_id:<zone:")
    assert _err(msg).endswith("raft_term:78 > )")


def test_replicate_response() -> None:
    _run(
        lambda: pb.ReplicateResponse(status=pb.OK),
        [
            (lambda m: setattr(m, "status", -1), "Status: invalid status (-1)"),
            (lambda m: setattr(m, "status", pb.WRONG_ROUTE), "expected Header"),
            (lambda m: (setattr(m, "status", pb.WRONG_ROUTE), m.header.CopyFrom(_header())), None),
            (
                lambda m: (setattr(m, "status", pb.WRONG_ROUTE), m.header.SetInParent()),
                "Header.Route: invalid Primary (0; expected -1 <= Primary < 0)",
            ),
            (lambda m: setattr(m, "status", pb.PROPOSAL_MISMATCH), "expected Fragment"),
            (
                lambda m: (
                    setattr(m, "status", pb.PROPOSAL_MISMATCH),
                    m.fragment.CopyFrom(_frag()),
                ),
                "expected Registers",
            ),
            (
                lambda m: (
                    setattr(m, "status", pb.PROPOSAL_MISMATCH),
                    m.fragment.CopyFrom(_frag()),
                    m.registers.SetInParent(),
                ),
                None,
            ),
            (
                lambda m: (setattr(m, "status", pb.PROPOSAL_MISMATCH), m.fragment.SetInParent()),
                "Fragment.Journal: invalid length (0; expected 4 <= length <= 512)",
            ),
            (
                lambda m: (
                    setattr(m, "status", pb.PROPOSAL_MISMATCH),
                    m.fragment.CopyFrom(_frag()),
                    m.registers.labels.add(name="b b"),
                ),
                "Registers.Labels[0].Name: not a valid token (b b)",
            ),
            (lambda m: m.registers.SetInParent(), "unexpected Registers ()"),
        ],
    )
    assert _err(pb.ReplicateResponse(status=pb.OK, header=_header())).startswith(
        "unexpected Header ("
    )
    assert _err(pb.ReplicateResponse(status=pb.OK, fragment=_frag())).startswith(
        "unexpected Fragment ("
    )


# --------------------------------------------------------------------------- List and Apply


def test_list_request() -> None:
    _run(
        lambda: pb.ListRequest(
            selector=pb.parse_selector("prefix=a/b/, prefix!=a/b/c/, topic=x"), watch=True
        ),
        [
            (
                lambda m: m.selector.include.labels.add(name="b b"),
                "Selector.Include.Labels[2].Name: not a valid token (b b)",
            ),
            (
                lambda m: setattr(m.selector.include.labels[0], "value", "a/b"),
                "Selector.Include.Labels[\"prefix\"]: expected trailing '/' (a/b)",
            ),
            (
                lambda m: m.selector.CopyFrom(pb.parse_selector("prefix!=a/b")),
                "Selector.Exclude.Labels[\"prefix\"]: expected trailing '/' (a/b)",
            ),
            # Gazette checks every value, so even `!prefix` (value "") is refused.
            (
                lambda m: m.selector.CopyFrom(pb.parse_selector("!prefix")),
                "Selector.Exclude.Labels[\"prefix\"]: expected trailing '/' ()",
            ),
        ],
    )


def test_list_response() -> None:
    def build() -> pb.ListResponse:
        resp = pb.ListResponse(status=pb.OK, header=_header())
        resp.journals.add(spec=_spec(), mod_revision=5, route=_route(), create_revision=3)
        return resp

    _run(
        build,
        [
            (lambda m: setattr(m, "status", 100), "Status: invalid status (100)"),
            (
                lambda m: setattr(m.header.etcd, "revision", 0),
                "Header.Etcd: invalid Revision (0; expected 0 < revision)",
            ),
            (
                lambda m: setattr(m.journals[0].spec, "replication", 0),
                "Journals[0].Spec: invalid Replication (0; expected 1 <= Replication <= 5)",
            ),
            (
                lambda m: setattr(m.journals[0], "mod_revision", 0),
                "Journals[0]: invalid ModRevision (0; expected > 0)",
            ),
            (
                lambda m: setattr(m.journals[0].route, "primary", 9),
                "Journals[0].Route: invalid Primary (9; expected -1 <= Primary < 3)",
            ),
        ],
    )


def test_apply_request() -> None:
    def build() -> pb.ApplyRequest:
        req = pb.ApplyRequest()
        req.changes.add(upsert=_spec(), expect_mod_revision=0)
        req.changes.add(delete="other/journal", expect_mod_revision=-1)
        return req

    _run(
        build,
        [
            (lambda m: setattr(m.changes[0], "expect_mod_revision", -1), None),
            (lambda m: setattr(m.changes[0], "expect_mod_revision", 12), None),
            (
                lambda m: setattr(m.changes[0], "expect_mod_revision", -2),
                "Changes[0]: invalid ExpectModRevision (-2; expected >= 0 or -1)",
            ),
            (
                lambda m: setattr(m.changes[0], "delete", "a/journal"),
                "Changes[0]: both Upsert and Delete are set (expected exactly one)",
            ),
            (
                lambda m: setattr(m.changes[0].upsert, "name", "a/journal;m"),
                "Changes[0].Upsert: Name cannot have a metadata path segment (;m; expected no segment)",
            ),
            (
                lambda m: setattr(m.changes[1], "expect_mod_revision", 0),
                "Changes[1]: invalid ExpectModRevision (0; expected > 0 or -1)",
            ),
            (lambda m: setattr(m.changes[1], "expect_mod_revision", 7), None),
            (
                lambda m: setattr(m.changes[1], "delete", "bad journal"),
                "Changes[1].Delete: not a valid token (bad journal)",
            ),
            # The Apply RPC validates with this: a journal whose fragments would land
            # outside a file:// store's root never reaches etcd.
            (
                lambda m: setattr(m.changes[0].upsert, "name", "../x"),
                "Changes[0].Upsert.Name: cannot have a '..' path segment (../x)",
            ),
            (
                lambda m: setattr(m.changes[0].upsert, "name", "/abs/x"),
                "Changes[0].Upsert.Name: cannot begin with '/' (/abs/x)",
            ),
            (
                lambda m: setattr(m.changes[1], "delete", "../x"),
                "Changes[1].Delete: cannot have a '..' path segment (../x)",
            ),
            (lambda m: setattr(m.changes[0].upsert, "name", "a.b/c"), None),
            (
                lambda m: m.changes.add(),
                "Changes[2]: neither Upsert nor Delete are set (expected exactly one)",
            ),
        ],
    )
    pb.validate(pb.ApplyRequest.Change(delete="a/journal", expect_mod_revision=1))


def test_status_header_responses() -> None:
    for cls in (pb.ApplyResponse, pb.FragmentStoreHealthResponse):
        pb.validate(cls(status=pb.ETCD_TRANSACTION_FAILED, header=_header()))
        assert _err(cls(status=42, header=_header())) == "Status: invalid status (42)"
        # A zero Header fails on its Route first (primary 0 of no members), as in Go.
        assert (
            _err(cls(status=pb.OK))
            == "Header.Route: invalid Primary (0; expected -1 <= Primary < 0)"
        )
    pb.validate(
        pb.FragmentStoreHealthResponse(
            status=pb.FRAGMENT_STORE_UNHEALTHY, header=_header(), store_health_error="boom"
        )
    )


# --------------------------------------------------------------------------- Fragments


def test_fragments_request() -> None:
    _run(
        lambda: pb.FragmentsRequest(
            header=_header(),
            journal="a/journal",
            begin_mod_time=10,
            end_mod_time=20,
            next_page_token=5,
            page_limit=100,
            signatureTTL=pb.duration_from_seconds(60),
        ),
        [
            (lambda m: m.ClearField("header"), None),
            (
                lambda m: setattr(m.header.route, "primary", -3),
                "Header.Route: invalid Primary (-3; expected -1 <= Primary < 3)",
            ),
            (
                lambda m: setattr(m, "journal", ""),
                "Journal: invalid length (0; expected 4 <= length <= 512)",
            ),
            (lambda m: setattr(m, "end_mod_time", 9), "invalid EndModTime (9 must be after 10)"),
            (lambda m: setattr(m, "end_mod_time", 0), None),
            (
                lambda m: setattr(m, "next_page_token", -1),
                "invalid NextPageToken (-1; must be >= 0)",
            ),
            (
                lambda m: setattr(m, "page_limit", -1),
                "invalid PageLimit (-1; must be >= 0 and <= 10000)",
            ),
            (
                lambda m: setattr(m, "page_limit", 10001),
                "invalid PageLimit (10001; must be >= 0 and <= 10000)",
            ),
            (lambda m: setattr(m, "page_limit", 10000), None),
            (lambda m: m.ClearField("signatureTTL"), None),
            (
                lambda m: m.signatureTTL.CopyFrom(pb.Duration()),
                "invalid SignatureTTL (0s; must be > 0s)",
            ),
            (
                lambda m: m.signatureTTL.CopyFrom(pb.duration_from_seconds(-1.5)),
                "invalid SignatureTTL (-1.5s; must be > 0s)",
            ),
        ],
    )


def test_fragments_response() -> None:
    def build() -> pb.FragmentsResponse:
        resp = pb.FragmentsResponse(status=pb.OK, header=_header(), next_page_token=7)
        resp.fragments.add(spec=_frag(), signed_url="https://example/a?b=c")
        resp.fragments.add(spec=_frag())
        return resp

    _run(
        build,
        [
            (lambda m: setattr(m, "status", 77), "Status: invalid status (77)"),
            (
                lambda m: m.ClearField("header"),
                "Header.Route: invalid Primary (0; expected -1 <= Primary < 0)",
            ),
            (
                lambda m: setattr(m.fragments[1].spec, "compression_codec", 0),
                "Fragments[1].Spec.CompressionCodec: invalid value (INVALID)",
            ),
            (
                lambda m: setattr(m.fragments[0], "signed_url", "%zz"),
                'Fragments[0].SignedUrl: parse "%zz": invalid URL escape "%zz"',
            ),
        ],
    )


def test_fragment_store_health_request() -> None:
    _run(
        lambda: pb.FragmentStoreHealthRequest(
            fragment_store="s3://bucket/root/",
            check_delete=True,
            check_delete_prefix="health/checks/",
        ),
        [
            (
                lambda m: setattr(m, "fragment_store", "s3://bucket"),
                "FragmentStore: path component doesn't end in '/' ()",
            ),
            (
                lambda m: setattr(m, "check_delete", False),
                "CheckDeletePrefix: cannot be set when CheckDelete is false",
            ),
            (lambda m: setattr(m, "check_delete_prefix", ""), None),
            (
                lambda m: setattr(m, "check_delete_prefix", "health"),
                "CheckDeletePrefix: must end in '/' (health)",
            ),
            (
                lambda m: setattr(m, "check_delete_prefix", "../"),
                "CheckDeletePrefix: cannot traverse outside the store (../)",
            ),
            (
                lambda m: setattr(m, "check_delete_prefix", "../x/"),
                "CheckDeletePrefix: cannot traverse outside the store (../x/)",
            ),
            (
                lambda m: setattr(m, "check_delete_prefix", "/abs/"),
                "CheckDeletePrefix: cannot begin with '/' (/abs)",
            ),
            (
                lambda m: setattr(m, "check_delete_prefix", "a//b/"),
                "CheckDeletePrefix: must be a clean path (a//b)",
            ),
            (
                lambda m: setattr(m, "check_delete_prefix", "/"),
                "CheckDeletePrefix: invalid length (0; expected 1 <= length <= 512)",
            ),
            (
                lambda m: setattr(m, "check_delete_prefix", "a b/"),
                "CheckDeletePrefix: not a valid token (a b)",
            ),
        ],
    )
    pb.validate(pb.FragmentStoreHealthRequest(fragment_store="file:///x/"))


# --------------------------------------------------------------------------- dispatch and exports


def test_validate_rejects_unknown_types() -> None:
    with pytest.raises(TypeError, match="no validation rules for SHA1Sum"):
        pb.validate(pb.SHA1Sum())


def test_every_message_and_enum_is_exported() -> None:
    desc = protocol_pb2.DESCRIPTOR
    for name in list(desc.message_types_by_name) + list(desc.enum_types_by_name):
        assert name in pb.__all__ and getattr(pb, name) is getattr(protocol_pb2, name)
    for enum in desc.enum_types_by_name.values():
        for value in enum.values:
            assert value.name in pb.__all__
            assert getattr(pb, value.name) == value.number
    for name in pb.__all__:
        assert hasattr(pb, name), name


def test_validation_error_shape() -> None:
    e = pb.ValidationError("bad thing (x)", ("Fragment", "Journal"))
    assert isinstance(e, ValueError)
    assert e.context == ("Fragment", "Journal") and e.reason == "bad thing (x)"
    assert str(e) == "Fragment.Journal: bad thing (x)"
    assert str(pb.ValidationError("no context")) == "no context"
    spec = _spec()
    spec.fragment.length = 0
    with pytest.raises(pb.ValidationError) as info:
        pb.validate(spec)
    assert info.value.context == ("Fragment",)
    assert info.value.reason == "invalid Length (0; expected 1024 <= length <= 17179869184)"
