"""Fuzzing: the token parser, and every broker RPC's request fields against a running broker.

(a) Tokens: random strings and bytes, and structurally plausible JWTs (wrong,
    ``none`` and unknown algorithms, bad base64, wrong signatures, huge
    claims, ``cap`` / ``sel`` / ``exp`` / ``iat`` of every wrong type) are
    refused with :class:`~gazette.broker.protocol.errors.AuthorizationError`
    and nothing else, each within a deadline; the keys of a
    :class:`~gazette.broker.protocol.auth.SwappableAuth` go through the same.

(b) RPCs: an in-process cluster of two brokers (``--broker.auth-keys``, every
    request carrying a token of ALL capabilities) runs on an event loop of
    its own thread; hypothesis sends it List, Apply, Read, Append, Replicate,
    ListFragments and FragmentStoreHealth requests of generated journal names,
    offsets, label selectors, headers, huge and negative numbers, and strings
    of invalid UTF-8 (spliced into the wire bytes, which protobuf's own
    encoder refuses to write). Every reply must be a valid response or a
    gRPC status with short details (no traceback, no Python repr, no
    "Exception calling application"), within a deadline, and no broker may
    log an unhandled exception. The broker must be healthy after: the last
    test appends to and reads back a journal no fuzzed request touched, and
    prints how each RPC was answered (run with ``-s`` to see it).

(c) The HTTP gateway, on both of a broker's ports: generated methods, paths,
    queries, headers (tokens, lengths that lie, chunked bodies that aren't) and
    bodies. Every answer is HTTP/1 with a status the gateway gives (or the
    connection closed), and never a traceback or a repr.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import pathlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterator
from typing import Any, TypeVar

import grpc
import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gazette.broker import protocol as pb
from gazette.broker import testing
from gazette.broker.protocol import auth
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import testing as server_testing
from gazette.keyspace import testing as ks_testing

T = TypeVar("T")

KEY_BYTES = b"fuzzing key: signs and verifies, 40 bytes"
KEY = base64.b64encode(KEY_BYTES).decode()
OTHER = base64.b64encode(b"a second key").decode()
KEYS = f"{KEY} {OTHER}"
SIGNER = auth.KeyedAuth(KEYS)
Cap = auth.Capability

#: Examples per RPC (the whole file stays well under two minutes).
EXAMPLES = 120
#: Seconds a reply may take (a broker under fuzz answers in milliseconds).
RPC_DEADLINE = 3.0

# -- (a) The token parser ----------------------------------------------------------------

TOKEN_COUNTS: collections.Counter[str] = collections.Counter()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
_json = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.sampled_from(["labels", "name", "value", "prefix", "include", "exclude", "x"]),
            children,
            max_size=4,
        ),
    ),
    max_leaves=12,
)
_label_json = st.fixed_dictionaries(
    {},
    optional={"name": _json | st.text(max_size=8), "value": _json, "prefix": _json},
)
_selector_json = st.one_of(
    _json,
    st.fixed_dictionaries(
        {},
        optional={
            "include": st.one_of(
                _json, st.fixed_dictionaries({"labels": st.lists(_label_json, max_size=4) | _json})
            ),
            "exclude": st.one_of(
                _json, st.fixed_dictionaries({"labels": st.lists(_label_json, max_size=4) | _json})
            ),
        },
    ),
)
_now = int(time.time())
_claims = st.fixed_dictionaries(
    {},
    optional={
        "cap": st.one_of(_json, st.integers(min_value=-1, max_value=2**33), st.just(int(Cap.ALL))),
        "sel": _selector_json,
        "exp": st.one_of(_json, st.integers(_now - 100, _now + 3600), st.just(2**63)),
        "iat": st.one_of(_json, st.integers(_now - 100, _now + 100)),
        "nbf": _json,
        "CAP": _json,
    },
)
_algorithms = st.one_of(
    st.sampled_from(["HS256", "HS384", "HS512", "none", "None", "RS256", "ES256", "", "hs256"]),
    _json,
)


@st.composite
def _jwts(draw: st.DrawFn) -> str:
    """A JWT with a drawn header, claims and signature (the right one, sometimes)."""
    header: Any = {"alg": draw(_algorithms), "typ": "JWT"}
    if draw(st.booleans()):
        header = draw(_json)
    claims: Any = draw(_claims) if draw(st.integers(0, 9)) else draw(_json)
    h = _b64(json.dumps(header, allow_nan=True).encode())
    p = _b64(json.dumps(claims, allow_nan=True).encode())
    signing = f"{h}.{p}".encode()
    kind = draw(st.sampled_from(["right", "right384", "wrong", "empty", "garbage", "padded"]))
    if kind == "right":
        sig = _b64(
            jwt.algorithms.HMACAlgorithm(jwt.algorithms.HMACAlgorithm.SHA256).sign(
                signing, KEY_BYTES
            )
        )
    elif kind == "right384":
        sig = _b64(
            jwt.algorithms.HMACAlgorithm(jwt.algorithms.HMACAlgorithm.SHA384).sign(
                signing, KEY_BYTES
            )
        )
    elif kind == "wrong":
        sig = _b64(draw(st.binary(min_size=32, max_size=32)))
    elif kind == "empty":
        sig = ""
    elif kind == "garbage":
        sig = draw(st.text(max_size=20))
    else:
        sig = base64.urlsafe_b64encode(draw(st.binary(max_size=40))).decode()
    return f"{h}.{p}.{sig}"


_tokens = st.one_of(
    _jwts(),
    st.text(max_size=80),
    st.binary(max_size=80).map(lambda b: b.decode("latin-1")),
    st.lists(st.text(alphabet="abcAZ09-_=+/.", max_size=30), max_size=5).map(".".join),
    st.builds(
        lambda a, b, c: f"{_b64(a)}.{_b64(b)}.{_b64(c)}",
        st.binary(max_size=30),
        st.binary(max_size=60),
        st.binary(max_size=40),
    ),
)


def _verify(header_value: str | bytes | None, via_holder: bool) -> None:
    verifier: auth.ServerAuth = auth.KeyedAuth(KEYS)
    if via_holder:
        verifier = auth.SwappableAuth(auth.KeyedAuth(KEYS))
    metadata = None if header_value is None else [("authorization", header_value)]
    try:
        claims = verifier.verify(metadata, Cap.LIST)
    except pb.AuthorizationError as e:
        assert str(e) and "\n" not in str(e)
        TOKEN_COUNTS["refused"] += 1
        return
    assert isinstance(claims, auth.Claims) and claims.capability & Cap.LIST
    TOKEN_COUNTS["accepted"] += 1


@settings(max_examples=600, deadline=1000, suppress_health_check=[HealthCheck.too_slow])
@given(_tokens, st.booleans(), st.sampled_from(["Bearer ", "bearer ", "", "Bearer  ", "Basic "]))
def test_fuzz_token_parser_refuses_with_its_own_error(
    token: str, via_holder: bool, scheme: str
) -> None:
    _verify(scheme + token, via_holder)
    _verify((scheme + token).encode("utf-8", "surrogatepass"), via_holder)


@settings(
    max_examples=20,
    deadline=3000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.integers(1000, 20000), st.sampled_from(["labels", "nested", "text"]))
def test_fuzz_huge_claims_are_parsed_or_refused_quickly(size: int, shape: str) -> None:
    now = int(time.time())
    payload: dict[str, Any] = {"cap": int(Cap.ALL), "exp": now + 60, "iat": now}
    if shape == "labels":
        labels = [{"name": f"n{i}", "value": f"v{i}"} for i in range(size)]
        payload["sel"] = {"include": {"labels": labels}, "exclude": {"labels": labels[:10]}}
    else:
        payload["pad"] = "x" * size * 50
    body = json.dumps(payload).encode()
    if shape == "nested":  # Deeper than json.dumps would write it.
        deep = b'{"labels":[' * size + b'"x"' + b"]}" * size
        body = body[:-1] + b',"sel":{"include":' + deep + b"}}"
    token = jwt.PyJWS().encode(body, KEY_BYTES, algorithm="HS256")
    started = time.monotonic()
    _verify("Bearer " + token, False)
    assert time.monotonic() - started < 2.0


# -- (b) RPCs of a running broker ---------------------------------------------------------

HEALTH = "fuzz/health"  # Never named by a fuzzed request: the final check's journal.
TARGET = "fuzz/target"  # Exists, and takes fuzzed requests.
ALL = SIGNER.authorize(auth.Claims(Cap.ALL), 3600)
UNHANDLED = (
    "Task exception was never retrieved",
    "Exception not handled",
    "Exception calling application",
    "Unexpected error",
)
RPC_COUNTS: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)


class _Errors(logging.Handler):
    """Collects what the brokers log at ERROR (from any thread)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


class Brokers:
    """An in-process cluster served by an event loop on a thread of its own.

    Hypothesis drives synchronous tests; each example's RPC runs on the
    brokers' loop through :meth:`run`, bounded by a timeout.
    """

    def __init__(self, etcd_endpoint: str, work_dir: pathlib.Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop_errors: list[str] = []
        self.loop.set_exception_handler(lambda _l, ctx: self.loop_errors.append(str(ctx)))
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzzed brokers")
        self.thread.start()
        self.cluster = server_testing.InProcessCluster(
            etcd_endpoint, work_dir=work_dir, brokers=2, extra_args=["--broker.auth-keys", KEYS]
        )
        self.channels: list[grpc.aio.Channel] = []
        self.stubs: list[pb2_grpc.JournalAsyncStub] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = RPC_DEADLINE + 5) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise AssertionError(f"no reply within {timeout}s") from None

    async def start(self) -> None:
        await self.cluster.start()
        for i in range(len(self.cluster)):
            ch = self.cluster.channel(i)
            self.channels.append(ch)
            self.stubs.append(pb2_grpc.JournalStub(ch))  # type: ignore[arg-type]
        stub = self.stubs[0]
        for name in (HEALTH, TARGET):
            spec = testing.journal_spec(name, stores=[self.cluster.store_url], replication=2)
            assert (await testing.apply_specs(stub, spec, metadata=ALL)).status == pb.OK
            await testing.wait_writable(stub, name, metadata=ALL)

    async def stop(self) -> None:
        for ch in self.channels:
            await ch.close()
        await self.cluster.close()

    def close(self) -> None:
        try:
            self.run(self.stop(), timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)
            self.loop.close()


@pytest.fixture(scope="module")
def brokers(
    etcd_server: ks_testing.EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Brokers]:
    errors = _Errors()
    logging.getLogger().addHandler(errors)
    b = Brokers(etcd_server.endpoint, tmp_path_factory.mktemp("fuzzed-brokers"))
    try:
        b.run(b.start(), timeout=90)
        yield b
    finally:
        b.close()
        logging.getLogger().removeHandler(errors)
    unhandled = [r for r in errors.records if any(u in r for u in UNHANDLED)]
    assert not unhandled, unhandled
    assert not b.loop_errors, b.loop_errors


def _waits_for_revision(header: pb.Header | None) -> bool:
    """A header (a List's resume point, a proxied request's) of an etcd revision to come.

    The broker then waits until it has read that revision, as Gazette's does: such
    a request may rightly run out its deadline.
    """
    return header is not None and header.etcd.revision > 0


def _check_status(rpc: str, e: grpc.aio.AioRpcError, may_wait: bool = False) -> None:
    code, details = e.code(), e.details() or ""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and not may_wait:
        raise AssertionError(f"{rpc}: no answer within {RPC_DEADLINE}s")
    assert code not in (grpc.StatusCode.OK, grpc.StatusCode.UNAUTHENTICATED), (rpc, code, details)
    for bad in ("Traceback", "object at 0x", "StatusCode.", "Exception calling application"):
        assert bad not in details, (rpc, details)
    assert details and len(details) < 2000, (rpc, details)
    if code == grpc.StatusCode.INTERNAL and details == "Internal error from Core":
        # grpc.aio's client replaces the status of a client-streaming RPC that the
        # server ended while requests were still being written (grpc/grpc#36066);
        # the broker's own answer (seen with the sync client) is UNKNOWN and clear.
        assert rpc in ("Append", "Replicate"), (rpc, details)
        RPC_COUNTS[rpc]["INTERNAL (aio client, grpc#36066)"] += 1
        return
    RPC_COUNTS[rpc][code.name] += 1


def _count(rpc: str, status: int) -> None:
    RPC_COUNTS[rpc][pb.Status.Name(status)] += 1  # type: ignore[arg-type]


async def _outcome(rpc: str, aw: Awaitable[Any], *, may_wait: bool = False) -> Any:
    try:
        return await aw
    except grpc.aio.AioRpcError as e:
        _check_status(rpc, e, may_wait)
        return None


async def _raw_unary(
    channel: grpc.aio.Channel,
    rpc: str,
    wire: bytes,
    response: Any,
    *,
    may_wait: bool = False,
) -> None:
    """Call unary ``rpc`` of protocol.Journal with the serialized request ``wire`` as it is
    (possibly invalid on the wire), and count the reply's status."""
    method = channel.unary_unary(
        f"/protocol.Journal/{rpc}",
        request_serializer=lambda b: b,
        response_deserializer=response.FromString,
    )
    resp = await _outcome(rpc, method(wire, metadata=ALL, timeout=RPC_DEADLINE), may_wait=may_wait)
    if resp is not None:
        _count(rpc, resp.status)


def _with_bad_utf8(message: bytes, field: int, raw: bytes) -> bytes:
    """``message`` with string field ``field`` (a later value wins) set to raw bytes."""
    assert len(raw) < 128
    return message + bytes([(field << 3) | 2, len(raw)]) + raw


_bad_utf8_values = st.sampled_from(
    [b"\xff", b"a/\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"ok/\x80"]
)
#: Mostly none: a request with invalid UTF-8 never gets past parsing.
_bad_utf8 = st.one_of(st.none(), st.none(), st.none(), _bad_utf8_values)
_int64 = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([-1, 0, 1, 2**31, 2**63 - 1, -(2**63)]),
)
_int32 = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([-1, 0, 1, 2**31 - 1]))
_uint64 = st.integers(0, 2**64 - 1)
_text = st.text(max_size=40)
_names = st.one_of(
    st.just(TARGET),
    st.sampled_from(
        ["", "a", "fuzz/missing", "fuzz/target;meta", "fuzz//x", "../x", "/abs", "x" * 600]
    ),
    st.from_regex(r"[a-z]{1,6}(/[a-z0-9._=%-]{1,8}){0,3}", fullmatch=True),
    _text,
).filter(lambda n: not n.startswith(HEALTH))
_labels = st.lists(
    st.builds(
        pb.Label,
        name=st.one_of(
            st.sampled_from(["name", "prefix", "topic", "app.gazette.dev/x", ""]),
            st.from_regex(r"[a-z][a-z0-9._/-]{1,10}", fullmatch=True),
            _text,
        ),
        value=st.one_of(
            st.sampled_from([TARGET, "fuzz/", ""]),
            st.from_regex(r"[a-z0-9][a-z0-9._/=%-]{0,10}", fullmatch=True),
            _text,
        ),
        prefix=st.booleans(),
    ),
    max_size=4,
)
_label_set = st.one_of(st.just(pb.LabelSet()), st.builds(pb.LabelSet, labels=_labels))
_selectors = st.builds(pb.LabelSelector, include=_label_set, exclude=_label_set)
_ids = st.builds(pb.ProcessSpec.ID, zone=_text, suffix=_text)
_headers = st.one_of(
    st.none(),
    st.none(),
    st.none(),
    st.builds(
        pb.Header,
        process_id=_ids,
        route=st.builds(
            pb.Route,
            members=st.lists(_ids, max_size=3),
            primary=_int32,
            endpoints=st.lists(
                st.sampled_from(["", "http://127.0.0.1:1", "bogus"]) | _text, max_size=3
            ),
        ),
        etcd=st.builds(
            pb.Header.Etcd,
            cluster_id=_uint64,
            member_id=_uint64,
            revision=_int64,
            raft_term=_uint64,
        ),
    ),
)
_fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,  # Each RPC has a deadline of its own.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@_fuzz
@given(selector=_selectors, watch=st.booleans(), resume=_headers)
def test_fuzz_list(brokers: Brokers, selector: pb.LabelSelector, watch: bool, resume: Any) -> None:
    req = pb.ListRequest(selector=selector, watch=watch)
    if resume is not None:
        req.watch_resume.CopyFrom(resume)

    may_wait = watch or _waits_for_revision(resume)

    async def call() -> None:
        got = 0
        try:
            async with asyncio.timeout(1.0 if may_wait else RPC_DEADLINE):
                async for resp in brokers.stubs[0].List(req, metadata=ALL):
                    pb.validate(resp)
                    got += 1
                    if watch:
                        break  # A watch answers at once, then waits: one is enough.
        except grpc.aio.AioRpcError as e:
            _check_status("List", e)
            return
        except TimeoutError:
            assert may_wait, "a List that isn't a watch must end"
            RPC_COUNTS["List"]["waiting"] += 1
            return
        RPC_COUNTS["List"]["ok"] += 1

    brokers.run(call())


@st.composite
def _journal_specs(draw: st.DrawFn) -> pb.JournalSpec:
    spec = pb.JournalSpec(
        name=draw(_names),
        replication=draw(_int32),
        labels=draw(_label_set),
        flags=draw(st.integers(0, 2**32 - 1)),
        max_append_rate=draw(_int64),
    )
    spec.fragment.length = draw(_int64)
    spec.fragment.compression_codec = draw(st.integers(0, 6))  # type: ignore[assignment]
    spec.fragment.stores.extend(
        draw(st.lists(st.sampled_from(["file:///", "file:///x/", "s3://"]) | _text, max_size=2))
    )
    spec.fragment.refresh_interval.seconds = draw(st.integers(-(10**6), 10**12))
    spec.fragment.flush_interval.seconds = draw(st.integers(-(10**6), 10**12))
    spec.fragment.path_postfix_template = draw(
        st.sampled_from(["", "{{.Spool.FirstAppendTime}}", "{{"]) | _text
    )
    if draw(st.booleans()):
        spec.suspend.level = draw(st.integers(0, 3))  # type: ignore[assignment]
        spec.suspend.offset = draw(_int64)
    return spec


@_fuzz
@given(
    changes=st.lists(
        st.tuples(st.one_of(_journal_specs(), _names), _int64),
        max_size=4,
    )
)
def test_fuzz_apply(brokers: Brokers, changes: list[tuple[Any, int]]) -> None:
    req = pb.ApplyRequest()
    for target, revision in changes:
        change = req.changes.add(expect_mod_revision=revision)
        if isinstance(target, pb.JournalSpec):
            change.upsert.CopyFrom(target)
        else:
            change.delete = target

    async def call() -> None:
        resp = await _outcome(
            "Apply", brokers.stubs[1].Apply(req, metadata=ALL, timeout=RPC_DEADLINE)
        )
        if resp is not None:
            pb.validate(resp)
            _count("Apply", resp.status)

    brokers.run(call())


@_fuzz
@given(
    journal=_names,
    offset=_int64,
    end_offset=_int64,
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    begin_mod_time=_int64,
    header=_headers,
    bad_utf8=_bad_utf8,
    broker=st.integers(0, 1),
)
def test_fuzz_read(
    brokers: Brokers,
    journal: str,
    offset: int,
    end_offset: int,
    flags: tuple[bool, bool, bool],
    begin_mod_time: int,
    header: Any,
    bad_utf8: bytes | None,
    broker: int,
) -> None:
    block, do_not_proxy, metadata_only = flags
    req = pb.ReadRequest(
        journal=journal,
        offset=offset,
        end_offset=end_offset,
        block=block,
        do_not_proxy=do_not_proxy,
        metadata_only=metadata_only,
        begin_mod_time=begin_mod_time,
    )
    if header is not None:
        req.header.CopyFrom(header)
    wire = req.SerializeToString()
    if bad_utf8 is not None:
        wire = _with_bad_utf8(wire, 2, bad_utf8)

    async def call() -> None:
        # A blocking read of a live journal waits for more: it may run out the deadline.
        method = brokers.channels[broker].unary_stream(
            "/protocol.Journal/Read",
            request_serializer=lambda b: b,
            response_deserializer=pb.ReadResponse.FromString,
        )
        try:
            async with asyncio.timeout(
                1.0 if block or _waits_for_revision(header) else RPC_DEADLINE
            ):
                async for resp in method(wire, metadata=ALL):
                    if resp.status != pb.OK or resp.content:
                        _count("Read", resp.status)
                    if resp.status != pb.OK:
                        break
        except grpc.aio.AioRpcError as e:
            _check_status("Read", e)
            return
        except TimeoutError:
            assert block or _waits_for_revision(header), "a non-blocking Read must end"
            RPC_COUNTS["Read"]["blocked"] += 1
            return
        RPC_COUNTS["Read"]["ok"] += 1

    brokers.run(call())


@_fuzz
@given(
    journal=_names,
    offset=st.one_of(st.just(0), st.just(0), _int64),
    check=_selectors,
    union=_label_set,
    subtract=_label_set,
    suspend=st.integers(0, 4),
    content=st.lists(st.binary(max_size=64), max_size=3),
    commit=st.booleans(),
    bad_utf8=_bad_utf8,
    broker=st.integers(0, 1),
)
def test_fuzz_append(
    brokers: Brokers,
    journal: str,
    offset: int,
    check: pb.LabelSelector,
    union: pb.LabelSet,
    subtract: pb.LabelSet,
    suspend: int,
    content: list[bytes],
    commit: bool,
    bad_utf8: bytes | None,
    broker: int,
) -> None:
    first = pb.AppendRequest(
        journal=journal,
        offset=offset,
        check_registers=check,
        union_registers=union,
        subtract_registers=subtract,
        suspend=suspend,  # type: ignore[arg-type]
    )
    wire = first.SerializeToString()
    if bad_utf8 is not None:
        wire = _with_bad_utf8(wire, 2, bad_utf8)
    chunks = [wire] + [pb.AppendRequest(content=c).SerializeToString() for c in content]
    if commit:
        chunks.append(b"")  # The empty chunk that commits.

    async def call() -> None:
        method = brokers.channels[broker].stream_unary(
            "/protocol.Journal/Append",
            request_serializer=lambda b: b,
            response_deserializer=pb.AppendResponse.FromString,
        )

        async def requests() -> AsyncIterator[bytes]:
            for c in chunks:
                yield c

        resp = await _outcome("Append", method(requests(), metadata=ALL, timeout=RPC_DEADLINE))
        if resp is not None:
            _count("Append", resp.status)

    brokers.run(call())


@_fuzz
@given(
    header=_headers,
    journal=_names,
    begin=_int64,
    end=_int64,
    registers=_label_set,
    acknowledge=st.booleans(),
    more=st.lists(st.tuples(st.binary(max_size=32), _int64), max_size=3),
    broker=st.integers(0, 1),
)
def test_fuzz_replicate(
    brokers: Brokers,
    header: Any,
    journal: str,
    begin: int,
    end: int,
    registers: pb.LabelSet,
    acknowledge: bool,
    more: list[tuple[bytes, int]],
    broker: int,
) -> None:
    first = pb.ReplicateRequest(
        proposal=pb.Fragment(journal=journal, begin=begin, end=end),
        registers=registers,
        acknowledge=acknowledge,
    )
    if header is not None:
        first.header.CopyFrom(header)
    reqs = [first] + [pb.ReplicateRequest(content=c, content_delta=d) for c, d in more]

    async def call() -> None:
        async def requests() -> AsyncIterator[pb.ReplicateRequest]:
            # Given as an iterator, grpc stops writing once the broker has answered
            # (writing ourselves after that fails on the client's side, not the broker's).
            for r in reqs:
                yield r

        stream = brokers.stubs[broker].Replicate(requests(), metadata=ALL, timeout=RPC_DEADLINE)
        try:
            async for resp in stream:
                _count("Replicate", resp.status)
        except grpc.aio.AioRpcError as e:
            _check_status("Replicate", e, may_wait=_waits_for_revision(header))
            return
        RPC_COUNTS["Replicate"]["ended"] += 1

    brokers.run(call())


@_fuzz
@given(
    journal=_names,
    begin=_int64,
    end=_int64,
    token=_int64,
    limit=_int32,
    ttl=st.one_of(st.none(), st.integers(-(10**10), 10**10)),
    header=_headers,
    do_not_proxy=st.booleans(),
    bad_utf8=_bad_utf8,
)
def test_fuzz_list_fragments(
    brokers: Brokers,
    journal: str,
    begin: int,
    end: int,
    token: int,
    limit: int,
    ttl: int | None,
    header: Any,
    do_not_proxy: bool,
    bad_utf8: bytes | None,
) -> None:
    req = pb.FragmentsRequest(
        journal=journal,
        begin_mod_time=begin,
        end_mod_time=end,
        next_page_token=token,
        page_limit=limit,
        do_not_proxy=do_not_proxy,
    )
    if ttl is not None:
        req.signatureTTL.seconds = ttl
    if header is not None:
        req.header.CopyFrom(header)
    wire = req.SerializeToString()
    if bad_utf8 is not None:
        wire = _with_bad_utf8(wire, 2, bad_utf8)

    brokers.run(
        _raw_unary(
            brokers.channels[1],
            "ListFragments",
            wire,
            pb.FragmentsResponse,
            may_wait=_waits_for_revision(header),
        )
    )


@_fuzz
@given(
    store=st.one_of(
        st.sampled_from(["file:///", "file:///fuzz/", "file://host/x/", "", "file:", "http://x/"]),
        _text.filter(lambda t: "://" not in t or t.startswith("file://")),
    ),
    check_delete=st.booleans(),
    prefix=_text,
    bad_utf8=_bad_utf8,
)
def test_fuzz_fragment_store_health(
    brokers: Brokers, store: str, check_delete: bool, prefix: str, bad_utf8: bytes | None
) -> None:
    req = pb.FragmentStoreHealthRequest(
        fragment_store=store, check_delete=check_delete, check_delete_prefix=prefix
    )
    wire = req.SerializeToString()
    if bad_utf8 is not None:
        wire = _with_bad_utf8(wire, 1, bad_utf8)

    brokers.run(
        _raw_unary(brokers.channels[0], "FragmentStoreHealth", wire, pb.FragmentStoreHealthResponse)
    )


# -- The HTTP gateway (both ports) --------------------------------------------------------

#: What the gateway may answer a fuzzed request with (never 5xx other than Gazette's 500
#: for a refused append, and 503 while a broker isn't ready).
HTTP_ANSWERS = {200, 204, 206, 400, 401, 404, 405, 408, 411, 413, 416, 431, 500, 501, 503, 505}

_methods = st.one_of(
    st.sampled_from(["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "get", "PRI"]),
    st.from_regex(r"[A-Z]{1,12}", fullmatch=True),
)
_paths = st.one_of(
    st.sampled_from(
        [
            f"/{TARGET}",
            f"/{HEALTH}",
            "/",
            "//x",
            "/../etc/passwd",
            "/%00",
            "/debug/ready",
            "/debug/metrics",
            "/debug/",
            "*",
            "/a;meta",
            f"/{TARGET}/../{HEALTH}",
        ]
    ),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60).map(
        lambda t: "/" + t
    ),
)
_queries = st.one_of(
    st.just(""),
    st.sampled_from(
        [
            "?offset=0",
            "?offset=-1",
            "?offset=x",
            "?offset=99999999999999999999",
            "?block=false",
            "?offset=0&offset=1",
            "?%zz",
            "?",
        ]
    ),
)
_headers = st.lists(
    st.one_of(
        st.sampled_from(
            [
                ("Authorization", "Bearer " + SIGNER.sign(auth.Claims(Cap.ALL), 3600)),
                ("Authorization", "Bearer garbage"),
                ("Authorization", "Basic Zm9vOmJhcg=="),
                ("Content-Length", "5"),
                ("Content-Length", "-1"),
                ("Content-Length", "99999999999999999999"),
                ("Transfer-Encoding", "chunked"),
                ("Transfer-Encoding", "gzip"),
                ("Expect", "100-continue"),
                ("Connection", "keep-alive"),
                ("Host", ""),
            ]
        ),
        st.tuples(
            st.from_regex(r"[A-Za-z-]{1,20}", fullmatch=True),
            st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80),
        ),
    ),
    max_size=6,
)
HTTP_COUNTS: collections.Counter[str] = collections.Counter()


async def _http_exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        writer.write_eof()
        return await asyncio.wait_for(reader.read(), RPC_DEADLINE + 12)
    except ConnectionError:
        return b""  # Refused at once (a reset), which is an answer too.
    finally:
        writer.close()


@_fuzz
@given(
    method=_methods,
    path=_paths,
    query=_queries,
    headers=_headers,
    body=st.binary(max_size=64),
    version=st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9"]),
    port=st.sampled_from(["grpc", "http"]),
)
def test_fuzz_http_gateway(
    brokers: Brokers,
    method: str,
    path: str,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    version: str,
    port: str,
) -> None:
    if "block=true" in query.lower():
        return  # A blocking read waits for content: not an answer to wait for here.
    head = f"{method} {path}{query} {version}\r\nHost: x\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers)
    request = head.encode() + b"\r\n" + body
    broker = brokers.cluster[0]
    assert broker.serving is not None
    number = int(broker.endpoint.rsplit(":", 1)[1]) if port == "grpc" else broker.serving.http_port
    answer = brokers.run(_http_exchange(number, request), timeout=RPC_DEADLINE + 20)
    if not answer:
        HTTP_COUNTS["closed"] += 1
        return
    while answer.startswith(b"HTTP/1.1 100 "):  # Expect: 100-continue, then the answer.
        answer = answer.split(b"\r\n\r\n", 1)[1]
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), answer[:200]
    code = int(status_line.split()[1])
    assert code in HTTP_ANSWERS, answer[:300]
    for bad in (b"Traceback", b"object at 0x", b"Exception"):
        assert bad not in answer, answer[:500]
    HTTP_COUNTS[str(code)] += 1


def test_the_brokers_are_healthy_after_the_fuzzing(brokers: Brokers) -> None:
    async def check() -> None:
        for i, stub in enumerate(brokers.stubs):  # Appends proxied or not, replicated.
            resp = await testing.append(
                stub, HEALTH, [f"still healthy {i}\n".encode()], metadata=ALL
            )
            assert resp.status == pb.OK, resp
        for stub in brokers.stubs:
            content, _ = await testing.read(stub, HEALTH, metadata=ALL)
            assert content == b"still healthy 0\nstill healthy 1\n"
        names: list[str] = []
        async for resp in brokers.stubs[1].List(pb.ListRequest(), metadata=ALL):
            names += [j.spec.name for j in resp.journals]
        assert HEALTH in names

    brokers.run(check(), timeout=60)
    print(f"\nfuzzed token parser: {dict(TOKEN_COUNTS)}")
    for rpc in sorted(RPC_COUNTS):
        print(f"fuzzed {rpc}: {sum(RPC_COUNTS[rpc].values())} requests, {dict(RPC_COUNTS[rpc])}")
    print(f"fuzzed the HTTP gateway: {sum(HTTP_COUNTS.values())} requests, {dict(HTTP_COUNTS)}")
