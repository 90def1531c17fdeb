"""The data plane validates as the Python broker does: same verdicts, same words.

Messages of each type the data plane serves (Replicate, Append and Read requests and
responses, and what they hold: headers, routes, etcd headers, process IDs, fragments,
labels, label sets and selectors) are generated valid, or broken in one of each
rule's ways, or arbitrary. Each is judged by Python's ``pb.validate`` and, serialized,
by the data plane (``gazette.dataplane._native.validate``); the texts must be equal.
Most draws break at most one part, so that rules checked late in a message are
reached as often as early ones.

The data plane tables Unicode's letters and numbers (which tokens may hold) and
Python's printable characters (which quoted values show as is): every boundary of
both classes is checked against the Python running the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import regex
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gazette.broker import protocol as pb
from gazette.dataplane import _native

T = TypeVar("T")

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def python_text(msg: Message) -> str | None:
    try:
        pb.validate(msg)
    except pb.ValidationError as e:
        return str(e)
    return None


def assert_same(msg: Message) -> str | None:
    """Both verdicts on `msg` are the same text (None: valid); return it."""
    data = msg.SerializeToString()
    expected = python_text(msg)
    assert _native.validate(msg.DESCRIPTOR.full_name, data) == expected, msg
    return expected


def _keep(x: T) -> T:
    return x


def mostly(
    valid: st.SearchStrategy[T], broken: st.SearchStrategy[T], odds: int = 5
) -> st.SearchStrategy[T]:
    """`valid` `odds` draws in `odds + 1`, else `broken`.

    `one_of` picks a branch uniformly but drops repeats of one strategy, so each valid
    branch is a copy of its own.
    """
    return st.one_of(*(valid.map(_keep) for _ in range(odds)), broken)


def optional(s: st.SearchStrategy[T]) -> st.SearchStrategy[T | None]:
    return st.none() | s


def joined(pieces: list[str], max_size: int) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(pieces), max_size=max_size).map("".join)


def message(cls: Callable[..., T], **fields: Any) -> T:
    """A message with the fields that are not None (so absent submessages stay absent)."""
    return cls(**{k: v for k, v in fields.items() if v is not None})


# Characters in and out of every token alphabet: symbols of tokens and paths, the etcd
# separator '#', marks and symbols which are not letters, letters beyond ASCII,
# control and unprintable characters (which quoting escapes).
ODD = ["é", "名", "٣", "Ⓐ", "\u0301", "\u00a0", "\u200b", '"', "\\", "\n", "\x01", "\U000e0001"]
TOKEN_PIECES = ["a", "Z", "9", "-", "_", "+", "/", ".", "=", "%", ";", "#", " ", *ODD]

tokens = joined(TOKEN_PIECES, 6)

journals = mostly(
    st.sampled_from(
        ["a/journal", "abcd", "a/b/c=1/d%20", "名前/ジャーナル", "a/journal;meta", "j/x;m/n=1"]
    ),
    st.one_of(
        st.sampled_from(
            [
                "",
                "abc",
                "a" * 513,
                "a//b",
                "/a/b",
                "a/./b",
                "a/b/",
                "../a/b",
                "a/../b",
                "a b/c",
                "aaaa/Ⓐ",
                "a/journal;",
                "a/journal;x;y",
                "a/journal;/m",
                "abc;meta",
                "a/journal;" + "m" * 513,
            ]
        ),
        joined(["a", "bb", "/", "..", ".", ";", "=", "é", " ", "Ⓐ"], 8),
    ),
)

postfixes = mostly(
    st.sampled_from(["", "date=2024", "a/b", "x%3D"]),
    st.sampled_from(["/a", "a//b", "a/", ".", "..", "a;b", "x" * 513, "a b"]) | tokens,
)

valid_ids = st.builds(
    pb.ProcessSpec.ID,
    zone=st.sampled_from(["a", "b", "us-east-1", "z" * 32, "é"]),
    suffix=st.sampled_from(["abcd", "broker-1", "broker-2", "x" * 128, "名前です"]),
)
process_ids = mostly(
    valid_ids,
    st.builds(
        pb.ProcessSpec.ID,
        zone=mostly(
            st.sampled_from(["a", "us-east-1"]),
            st.sampled_from(["", "z" * 33, "a b", "a=b", "a#"]) | tokens,
            odds=1,
        ),
        suffix=mostly(
            st.sampled_from(["abcd", "broker-1"]),
            st.sampled_from(["", "abc", "x" * 129, "ab%d", "ab;cd"]) | tokens,
            odds=1,
        ),
    ),
)

URL_PIECES = [
    "a",
    "1",
    ":",
    "/",
    "//",
    "%",
    "%zz",
    "%41",
    "%C3%A9",
    "%25",
    "%e",
    "@",
    "[",
    "]",
    "?",
    "#",
    ".",
    "~",
    "!",
    "$",
    "&",
    "'",
    "(",
    "*",
    "+",
    ",",
    ";",
    "=",
    " ",
    "\t",
    "\x7f",
    "<",
    "{",
    "|",
    *ODD,
]
valid_endpoints = st.sampled_from(
    [
        "http://one:8080",
        "https://two/path",
        "unix://localhost/tmp/sock",
        "http://[::1]:80/",
        "http://u:p@h/",
        "http://h%C3%A9/",
    ]
)
endpoints = mostly(
    valid_endpoints,
    st.one_of(
        st.sampled_from(
            [
                "one:8080",
                "/path",
                "unix:///tmp/sock",
                "http://a b",
                "http://h:port",
                "http://[::1",
                "http://[::1]x",
                "http://a/%zz",
                "http://a%41",
                ":80",
                "1a:b",
                "http://us er@h",
                "http://h/#%zz",
                "*",
            ]
        ),
        st.builds(
            str.__add__,
            st.sampled_from(["http://", "HTTPS://", "unix://", "", "h:", "h:/", "1a:", ":", "//"]),
            joined(URL_PIECES, 8),
        ),
    ),
    odds=2,
)


def id_key(m: pb.ProcessSpec.ID) -> tuple[str, str]:
    return (m.zone, m.suffix)


@st.composite
def valid_routes(draw: st.DrawFn) -> pb.Route:
    members = draw(st.lists(valid_ids, max_size=4, unique_by=id_key))
    n = len(members)
    eps = draw(st.just([]) | st.lists(valid_endpoints | st.just(""), min_size=n, max_size=n))
    return pb.Route(
        members=sorted(members, key=id_key), primary=draw(st.integers(-1, n - 1)), endpoints=eps
    )


@st.composite
def broken_routes(draw: st.DrawFn) -> pb.Route:
    # Members unsorted, repeated or invalid; primaries out of range; endpoints invalid
    # or as many as the members.
    members = draw(st.lists(process_ids, max_size=3) | st.lists(valid_ids, min_size=2, max_size=3))
    n = len(members)
    primary = draw(mostly(st.integers(-1, n - 1), st.sampled_from([-2, n, 2**31 - 1, -(2**31)])))
    eps = draw(
        st.lists(endpoints | st.just(""), min_size=n, max_size=n) | st.lists(endpoints, max_size=3)
    )
    return pb.Route(members=members, primary=primary, endpoints=eps)


routes = mostly(valid_routes(), broken_routes(), odds=2)

valid_etcds = st.builds(
    pb.Header.Etcd,
    cluster_id=st.integers(1, 2**64 - 1),
    member_id=st.integers(1, 2**64 - 1),
    revision=st.integers(1, 2**63 - 1),
    raft_term=st.integers(1, 2**64 - 1),
)
etcds = mostly(
    valid_etcds,
    st.builds(
        pb.Header.Etcd,
        cluster_id=mostly(st.integers(1, 2**64 - 1), st.just(0)),
        member_id=mostly(st.integers(1, 2**64 - 1), st.just(0)),
        revision=mostly(st.integers(1, 2**63 - 1), st.integers(-(2**63), 0)),
        raft_term=mostly(st.integers(1, 2**64 - 1), st.just(0)),
    ),
    odds=1,
)

valid_headers = st.builds(
    lambda pid, route, etcd: message(pb.Header, process_id=pid, route=route, etcd=etcd),
    optional(st.just(pb.ProcessSpec.ID()) | valid_ids),
    valid_routes(),
    valid_etcds,
)
headers = mostly(
    valid_headers,
    st.builds(
        lambda pid, route, etcd: message(pb.Header, process_id=pid, route=route, etcd=etcd),
        optional(st.just(pb.ProcessSpec.ID()) | process_ids),
        mostly(routes, st.none()),
        mostly(etcds, st.none()),
    ),
    odds=3,
)

offsets = st.sampled_from([-(2**63), -2, -1, 0, 1, 10, 20, 2**63 - 1])
odd_text = joined(["a", "/", ":", '"', "\\", "\n", "\t", "\x01", "é", "\x7f"], 5)


@st.composite
def fragments(draw: st.DrawFn) -> pb.Fragment:
    begin, end = sorted(draw(st.lists(st.integers(0, 2**63 - 1), min_size=2, max_size=2)))
    if draw(mostly(st.just(False), st.just(True))):
        begin, end = end + 1 if end < 2**63 - 1 else end, begin
    return message(
        pb.Fragment,
        journal=draw(journals),
        begin=begin,
        end=end,
        sum=draw(
            optional(
                st.builds(
                    pb.SHA1Sum,
                    part1=st.sampled_from([0, 1, 2**64 - 1]),
                    part2=st.sampled_from([0, 2**63]),
                    part3=st.sampled_from([0, 7, 2**32 - 1]),
                )
            )
        ),
        compression_codec=draw(mostly(st.integers(1, 5), st.sampled_from([0, 6, -1, 100]))),
        backing_store=draw(st.sampled_from(["", "s3://bucket/"]) | odd_text),
        mod_time=draw(st.sampled_from([0, -1, 1700000000])),
        path_postfix=draw(postfixes),
    )


label_names = mostly(
    st.sampled_from(["aa", "bb", "name", "reg", "app.gazette.dev/tag", "n" * 64]),
    st.sampled_from(["", "a", "n" * 65, "a=b", "a b", "Ⓐb"]) | tokens,
)
label_values = mostly(
    st.sampled_from(["", "one", "two", "a/b=c%", "名前", "v" * 1024]),
    st.sampled_from(["a b", "v" * 1025, "a;b", "a#b"]) | tokens,
)


@st.composite
def valid_label_lists(draw: st.DrawFn, allow_prefix: bool) -> list[pb.Label]:
    names = draw(st.lists(st.sampled_from(["aa", "bb", "name", "reg"]), max_size=3, unique=True))
    out = []
    for name in sorted(names):
        values = draw(
            st.just([""])
            | st.lists(st.sampled_from(["one", "two", "a/b=c%", "é"]), min_size=1, unique=True)
        )
        for value in sorted(values):
            prefix = allow_prefix and draw(st.booleans())
            out.append(pb.Label(name=name, value=value, prefix=prefix))
    return out


def label_lists(allow_prefix: bool) -> st.SearchStrategy[list[pb.Label]]:
    # Lists of arbitrary labels: unsorted, repeated, empty beside non-empty values, or
    # with a label broken.
    arbitrary = st.lists(
        st.builds(
            pb.Label,
            name=mostly(st.sampled_from(["aa", "bb"]), label_names, odds=2),
            value=mostly(st.sampled_from(["", "x", "y"]), label_values, odds=2),
            prefix=st.booleans() if allow_prefix else mostly(st.just(False), st.just(True)),
        ),
        min_size=1,
        max_size=3,
    )
    return mostly(valid_label_lists(allow_prefix), arbitrary, odds=2)


labels = st.builds(
    pb.Label, name=label_names, value=label_values, prefix=mostly(st.just(False), st.just(True))
)
label_sets = label_lists(False).map(lambda ls: pb.LabelSet(labels=ls))
selector_sets = label_lists(True).map(lambda ls: pb.LabelSet(labels=ls))
selectors = st.builds(
    lambda inc, exc: message(pb.LabelSelector, include=inc, exclude=exc),
    optional(selector_sets),
    optional(selector_sets),
)
valid_label_sets = valid_label_lists(False).map(lambda ls: pb.LabelSet(labels=ls))

statuses = mostly(
    st.sampled_from(list(pb.Status.values())),
    st.sampled_from([16, -1, 2**31 - 1]),
)
contents = st.sampled_from([b"", b"x", b"some content"])


@st.composite
def replicate_requests(draw: st.DrawFn) -> pb.ReplicateRequest:
    if draw(st.booleans()):
        proposal = draw(fragments())
        header = draw(optional(headers))
        journal = draw(mostly(st.sampled_from(["", proposal.journal]), st.just("other/journal")))
        return message(
            pb.ReplicateRequest,
            header=header,
            proposal=proposal,
            registers=draw(optional(mostly(valid_label_sets, label_sets))),
            acknowledge=draw(mostly(st.just(header is not None), st.booleans())),
            deprecated_journal=journal,
            content=draw(mostly(st.just(b""), contents)),
            content_delta=draw(mostly(st.just(0), offsets)),
        )
    return message(
        pb.ReplicateRequest,
        header=draw(mostly(st.none(), headers)),
        registers=draw(mostly(st.none(), label_sets)),
        acknowledge=draw(mostly(st.just(False), st.just(True))),
        deprecated_journal=draw(mostly(st.just(""), journals)),
        content=draw(mostly(st.just(b"some content"), st.just(b""))),
        content_delta=draw(mostly(st.integers(0, 100), offsets)),
    )


@st.composite
def replicate_responses(draw: st.DrawFn) -> pb.ReplicateResponse:
    status = draw(mostly(st.sampled_from([pb.OK, pb.WRONG_ROUTE, pb.PROPOSAL_MISMATCH]), statuses))
    wrong_route = status == pb.WRONG_ROUTE
    mismatch = status == pb.PROPOSAL_MISMATCH
    return message(
        pb.ReplicateResponse,
        status=status,
        header=draw(mostly(headers if wrong_route else st.none(), optional(headers))),
        fragment=draw(mostly(fragments() if mismatch else st.none(), optional(fragments()))),
        registers=draw(mostly(valid_label_sets if mismatch else st.none(), optional(label_sets))),
    )


suspends = mostly(st.integers(0, 4), st.sampled_from([5, -1, 100]))


@st.composite
def append_requests(draw: st.DrawFn) -> pb.AppendRequest:
    if draw(st.booleans()):
        return message(
            pb.AppendRequest,
            header=draw(optional(headers)),
            journal=draw(journals.filter(bool)),
            do_not_proxy=draw(st.booleans()),
            offset=draw(mostly(st.sampled_from([0, 10, 2**63 - 1]), offsets)),
            content=draw(mostly(st.just(b""), contents)),
            check_registers=draw(optional(selectors)),
            union_registers=draw(optional(mostly(valid_label_sets, label_sets))),
            subtract_registers=draw(optional(mostly(valid_label_sets, label_sets))),
            suspend=draw(suspends),
            min_etcd_revision=draw(st.sampled_from([0, 5])),
        )
    empty = pb.LabelSet()
    return message(
        pb.AppendRequest,
        content=draw(contents),
        header=draw(mostly(st.none(), headers)),
        do_not_proxy=draw(mostly(st.just(False), st.just(True))),
        offset=draw(mostly(st.just(0), offsets)),
        check_registers=draw(mostly(st.none(), st.just(pb.LabelSelector()))),
        union_registers=draw(mostly(st.none(), st.just(empty))),
        subtract_registers=draw(mostly(st.none(), st.just(empty))),
        suspend=draw(mostly(st.just(0), suspends)),
    )


@st.composite
def append_responses(draw: st.DrawFn) -> pb.AppendResponse:
    status = draw(
        mostly(st.sampled_from([pb.OK, pb.REGISTER_MISMATCH, pb.WRONG_APPEND_OFFSET]), statuses)
    )
    registered = status in (pb.OK, pb.REGISTER_MISMATCH)
    return message(
        pb.AppendResponse,
        status=status,
        header=draw(mostly(headers, st.none())),
        commit=draw(mostly(fragments() if status == pb.OK else st.none(), optional(fragments()))),
        registers=draw(mostly(valid_label_sets if registered else st.none(), optional(label_sets))),
        total_chunks=draw(st.sampled_from([0, 3])),
        store_health_error=draw(st.sampled_from(["", "unhealthy"])),
    )


@st.composite
def read_requests(draw: st.DrawFn) -> pb.ReadRequest:
    return message(
        pb.ReadRequest,
        header=draw(optional(headers)),
        journal=draw(journals),
        offset=draw(mostly(st.sampled_from([-1, 0, 10]), offsets)),
        end_offset=draw(mostly(st.sampled_from([0, 10, 20]), offsets)),
        block=draw(st.booleans()),
        do_not_proxy=draw(st.booleans()),
        metadata_only=draw(st.booleans()),
        begin_mod_time=draw(st.sampled_from([0, 100])),
    )


STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "ReplicateRequest": replicate_requests(),
    "ReplicateResponse": replicate_responses(),
    "AppendRequest": append_requests(),
    "AppendResponse": append_responses(),
    "ReadRequest": read_requests(),
    "Header": headers,
    "Header.Etcd": etcds,
    "Route": routes,
    "ProcessSpec.ID": process_ids,
    "Fragment": fragments(),
    "LabelSet": label_sets,
    "Label": labels,
    "LabelSelector": selectors,
}


@pytest.mark.parametrize("type_name", list(STRATEGIES))
def test_generated_messages_get_the_same_verdict(type_name: str) -> None:
    verdicts: set[str | None] = set()

    @SETTINGS
    @given(msg=STRATEGIES[type_name])
    def check(msg: Message) -> None:
        assert msg.DESCRIPTOR.full_name == f"protocol.{type_name}"
        verdicts.add(assert_same(msg))

    check()
    # Both valid messages and a variety of broken ones were judged.
    assert None in verdicts
    assert len(verdicts) >= 5


def _id(zone: str = "a", suffix: str = "abcd") -> pb.ProcessSpec.ID:
    return pb.ProcessSpec.ID(zone=zone, suffix=suffix)


def _header(**route: Any) -> pb.Header:
    r = {"members": [_id()], "primary": 0, "endpoints": ["http://h"], **route}
    return pb.Header(
        route=pb.Route(**r),
        etcd=pb.Header.Etcd(cluster_id=1, member_id=2, revision=3, raft_term=4),
    )


def _frag(**fields: Any) -> pb.Fragment:
    f = {"journal": "a/journal", "begin": 1, "end": 2, "compression_codec": pb.GZIP, **fields}
    return pb.Fragment(**f)


# One message per rule of the requests and responses, each broken in its way.
BROKEN = [
    pb.ReplicateRequest(proposal=_frag(journal="a//b"), header=_header(), acknowledge=True),
    pb.ReplicateRequest(proposal=_frag(), header=_header(primary=1), acknowledge=True),
    pb.ReplicateRequest(proposal=_frag(), header=_header()),
    pb.ReplicateRequest(proposal=_frag(begin=3)),
    pb.ReplicateRequest(proposal=_frag(compression_codec=0)),
    pb.ReplicateRequest(proposal=_frag(path_postfix="/p")),
    pb.ReplicateRequest(proposal=_frag(), registers=pb.LabelSet(labels=[pb.Label(name="x")])),
    pb.ReplicateRequest(proposal=_frag(), content=b"abc"),
    pb.ReplicateRequest(proposal=_frag(), content_delta=-4),
    pb.ReplicateRequest(proposal=_frag(), deprecated_journal="other/journal"),
    pb.ReplicateRequest(),
    pb.ReplicateRequest(content=b"x", content_delta=-1),
    pb.ReplicateRequest(content=b"x", header=_header(endpoints=["\x00"])),
    pb.ReplicateRequest(content=b"x", registers=pb.LabelSet(labels=[pb.Label(name="é\n")])),
    pb.ReplicateRequest(content=b"x", acknowledge=True),
    pb.ReplicateRequest(content=b"x", deprecated_journal="a/journal"),
    pb.ReplicateResponse(status=99),
    pb.ReplicateResponse(status=pb.WRONG_ROUTE),
    pb.ReplicateResponse(status=pb.WRONG_ROUTE, header=_header(members=[_id("a b")])),
    pb.ReplicateResponse(header=_header()),
    pb.ReplicateResponse(status=pb.PROPOSAL_MISMATCH),
    pb.ReplicateResponse(status=pb.PROPOSAL_MISMATCH, fragment=_frag(journal="x")),
    pb.ReplicateResponse(status=pb.PROPOSAL_MISMATCH, fragment=_frag()),
    pb.ReplicateResponse(
        status=pb.PROPOSAL_MISMATCH,
        fragment=_frag(),
        registers=pb.LabelSet(labels=[pb.Label(name="bb"), pb.Label(name="aa")]),
    ),
    pb.ReplicateResponse(fragment=_frag(sum=pb.SHA1Sum(part1=2**64 - 1, part3=9))),
    pb.ReplicateResponse(registers=pb.LabelSet()),
    pb.AppendRequest(journal="a/journal", header=_header(members=[_id(), _id()])),
    pb.AppendRequest(journal="a/journal;x;y"),
    pb.AppendRequest(journal="a/journal", offset=-1),
    pb.AppendRequest(journal="a/journal", content=b"x"),
    pb.AppendRequest(
        journal="a/journal",
        check_registers=pb.LabelSelector(exclude=pb.LabelSet(labels=[pb.Label(name="a")])),
    ),
    pb.AppendRequest(
        journal="a/journal",
        union_registers=pb.LabelSet(labels=[pb.Label(name="aa", value="x", prefix=True)]),
    ),
    pb.AppendRequest(
        journal="a/journal",
        subtract_registers=pb.LabelSet(
            labels=[pb.Label(name="aa"), pb.Label(name="aa", value="x")]
        ),
    ),
    pb.AppendRequest(journal="a/journal", suspend=5),  # type: ignore[arg-type]
    pb.AppendRequest(header=_header()),
    pb.AppendRequest(do_not_proxy=True),
    pb.AppendRequest(offset=1),
    pb.AppendRequest(check_registers=pb.LabelSelector()),
    pb.AppendRequest(union_registers=pb.LabelSet()),
    pb.AppendRequest(subtract_registers=pb.LabelSet()),
    pb.AppendRequest(suspend=pb.AppendRequest.SUSPEND_NOW),
    pb.AppendResponse(status=-1, header=_header()),
    pb.AppendResponse(status=pb.OK),
    pb.AppendResponse(status=pb.OK, header=_header()),
    pb.AppendResponse(status=pb.REGISTER_MISMATCH, header=_header()),
    pb.AppendResponse(status=pb.OK, header=_header(), commit=_frag(end=0), registers=pb.LabelSet()),
    pb.AppendResponse(
        status=pb.OK,
        header=_header(),
        commit=_frag(),
        registers=pb.LabelSet(labels=[pb.Label(name="a=")]),
    ),
    pb.ReadRequest(journal="a/journal", header=pb.Header()),
    pb.ReadRequest(journal="../journal"),
    pb.ReadRequest(journal="a/journal", offset=-2),
    pb.ReadRequest(journal="a/journal", end_offset=-1),
    pb.ReadRequest(journal="a/journal", offset=10, end_offset=5),
]


@pytest.mark.parametrize("msg", BROKEN, ids=lambda m: f"{type(m).__name__}")
def test_each_rule_is_broken_alike(msg: Message) -> None:
    assert assert_same(msg) is not None


def test_type_names_with_or_without_the_package() -> None:
    msg = pb.Route(primary=3)
    text = "invalid Primary (3; expected -1 <= Primary < 0)"
    assert _native.validate("Route", msg.SerializeToString()) == text
    assert _native.validate("protocol.Route", msg.SerializeToString()) == text
    assert _native.validate("ProcessSpec.ID", _id().SerializeToString()) is None


def test_unknown_types_and_undecodable_bytes_are_value_errors() -> None:
    with pytest.raises(ValueError, match="no native validation of JournalSpec"):
        _native.validate("JournalSpec", b"")
    with pytest.raises(ValueError, match="ReadRequest"):
        _native.validate("ReadRequest", b"\x12\x02\xff\xfe")  # journal: not UTF-8
    with pytest.raises(ValueError, match="Fragment"):
        _native.validate("Fragment", b"\x0a\x05ab")  # truncated


def _boundaries(inside: Callable[[str], bool]) -> list[int]:
    """Code points where `inside` changes (surrogates, which no message holds, skipped)."""
    out, was = [], False
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        now = inside(chr(cp))
        if now != was:
            out.append(cp)
            was = now
    return out


def _around(bounds: list[int]) -> list[str]:
    cps = {c for b in bounds for c in (b - 1, b)}
    return [chr(c) for c in sorted(cps) if 0 <= c < 0x110000 and not 0xD800 <= c <= 0xDFFF]


def test_letters_and_numbers_agree_at_every_boundary() -> None:
    ln = regex.compile(r"[\p{L}\p{N}]")
    chars = _around(_boundaries(lambda c: ln.fullmatch(c) is not None))
    assert len(chars) > 2000
    for c in chars:
        assert_same(pb.Label(name="ab", value=c))


def test_printable_characters_agree_at_every_boundary() -> None:
    chars = _around(_boundaries(str.isprintable))
    assert len(chars) > 2000
    for c in chars:
        # An endpoint Go can't parse is quoted whole in the error: `parse "...": ...`.
        route = pb.Route(members=[_id()], primary=0, endpoints=[f"http://%zz{c}"])
        assert assert_same(route) is not None
