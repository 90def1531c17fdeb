"""Errors become short gRPC outcomes in one place, and no task's failure goes unretrieved."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from gazette import keyspace, task
from gazette.broker import protocol as pb
from gazette.broker.fragment import errors as frag_errors
from gazette.broker.protocol import auth
from gazette.broker.server import api, errors, metrics


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        code,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details=details,
        debug_error_string=f'UNKNOWN:Error received from peer {{grpc_message:"{details}"}}',
    )


REFUSED = rpc_error(grpc.StatusCode.UNAVAILABLE, "connection refused")


def test_describe_renders_grpc_errors_as_code_and_details() -> None:
    assert errors.describe(REFUSED) == "UNAVAILABLE: connection refused"
    assert errors.describe(ValueError("plain")) == "plain"
    assert errors.describe(ValueError()) == "ValueError"


def test_a_status_grpc_lost_is_said_so_not_relayed_as_an_internal_error() -> None:
    lost = errors.describe(rpc_error(grpc.StatusCode.INTERNAL, "Internal error from Core"))
    assert lost.startswith("INTERNAL: the stream broke") and "#36066" in lost, lost
    other = rpc_error(grpc.StatusCode.INTERNAL, "something else")
    assert errors.describe(other) == "INTERNAL: something else"


def test_a_failed_spool_write_is_unavailable() -> None:
    # A stalled or full disk: the client retries (elsewhere, once the route moves).
    e = frag_errors.SpoolWriteError("writing spool content of a/b: spool directory /s is stalled")
    assert errors.grpc_status_of(e) == (grpc.StatusCode.UNAVAILABLE, str(e))


def test_peer_failure_is_unavailable_and_names_the_peer() -> None:
    # What pipeline.py builds today (f"send: {e}"): the repr is rewritten.
    e = errors.PipelineError(f"send: {REFUSED}", peer="zone-a/broker-01")
    assert "<AioRpcError" in str(e)
    code, details = errors.grpc_status_of(e)
    assert code == grpc.StatusCode.UNAVAILABLE
    assert (
        details == "replication peer zone-a/broker-01 failed: send: UNAVAILABLE: connection refused"
    )
    # And what it builds with describe().
    e = errors.PipelineError(f"recv: {errors.describe(REFUSED)}", peer="zone-a/broker-01")
    assert errors.grpc_status_of(e)[1] == details.replace("send:", "recv:")


@pytest.mark.parametrize(
    ("exc", "code", "details"),
    [
        (asyncio.CancelledError(), grpc.StatusCode.CANCELLED, "context canceled"),
        (errors.Cancelled(), grpc.StatusCode.CANCELLED, "context canceled"),
        (TimeoutError(), grpc.StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded"),
        (
            errors.MessageTooLarge("AppendRequest", 5, 4),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "AppendRequest of 5 bytes is larger than --broker.max-grpc-recv-size (4 bytes)",
        ),
        (
            keyspace.errors.EtcdError("an Apply of 2000 changes ...", code="INVALID_ARGUMENT"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "an Apply of 2000 changes ...",
        ),
        (
            keyspace.errors.EtcdError("etcd down", code="UNAVAILABLE"),
            grpc.StatusCode.UNKNOWN,
            "etcd down",
        ),
        (REFUSED, grpc.StatusCode.UNAVAILABLE, "connection refused"),
        # A broker stopping, or a replica stopped under the RPC: clients retry elsewhere.
        (
            errors.ResolverStopped(),
            grpc.StatusCode.UNAVAILABLE,
            "resolver has stopped serving local replicas",
        ),
        (errors.ReplicaStopped("a/b"), grpc.StatusCode.UNAVAILABLE, "replica of a/b was stopped"),
        (
            errors.ResolutionError("ClusterId doesn't match"),
            grpc.StatusCode.UNKNOWN,
            "ClusterId doesn't match",
        ),
        # grpc-core's word for a call cut off with its connection.
        (
            grpc.aio.AioRpcError(
                grpc.StatusCode.INTERNAL,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                "Internal error from Core",
            ),
            grpc.StatusCode.UNAVAILABLE,
            "Internal error from Core",
        ),
        (pb.ValidationError("bad"), grpc.StatusCode.UNKNOWN, "bad"),
        (
            pb.AuthorizationError("authorization is missing required READ capability"),
            grpc.StatusCode.UNAUTHENTICATED,
            "authorization is missing required READ capability",
        ),
        (
            RuntimeError(f"wrapped {REFUSED} twice {REFUSED}"),
            grpc.StatusCode.UNKNOWN,
            "wrapped UNAVAILABLE: connection refused twice UNAVAILABLE: connection refused",
        ),
    ],
)
def test_grpc_status_of(exc: BaseException, code: grpc.StatusCode, details: str) -> None:
    assert errors.grpc_status_of(exc) == (code, details)


class FakeContext:
    def __init__(self, cancelled: bool = False) -> None:
        self._cancelled = cancelled
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def cancelled(self) -> bool:
        return self._cancelled

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise grpc.aio.AbortError()


def _fails(e: BaseException) -> Callable[[auth.Claims, Any], Awaitable[None]]:
    async def run(_claims: auth.Claims, _context: Any) -> None:
        raise e

    return run


def _servicer() -> api.JournalServicer:
    # The edge only needs the service's verifier (no keys: everything is allowed).
    return api.JournalServicer(svc=types.SimpleNamespace(auth=auth.NoopAuth()))  # type: ignore[arg-type]


async def test_edge_ends_unexpected_errors_itself() -> None:
    servicer = _servicer()
    ctx = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        await servicer._edge("Replicate", ctx, 0, _fails(KeyError("x")), metrics.Outcome())  # type: ignore[arg-type]
    assert ctx.aborted == (grpc.StatusCode.UNKNOWN, "'x'")
    ctx = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        await servicer._edge(
            "Append",
            ctx,  # type: ignore[arg-type]
            0,
            _fails(errors.PipelineError(f"send: {REFUSED}", peer="z/p")),
            metrics.Outcome(),
        )
    assert ctx.aborted == (
        grpc.StatusCode.UNAVAILABLE,
        "replication peer z/p failed: send: UNAVAILABLE: connection refused",
    )


async def test_edge_of_a_cancelled_rpc_raises_cancelled_not_the_error() -> None:
    # Left to grpc, the error of a stream whose peer hung up is logged as
    # "Exception not handled by _handle_exceptions" while grpc answers it.
    servicer = _servicer()
    ctx = FakeContext(cancelled=True)
    with pytest.raises(asyncio.CancelledError):
        await servicer._edge("Replicate", ctx, 0, _fails(RuntimeError("batch")), metrics.Outcome())  # type: ignore[arg-type]
    assert ctx.aborted is None


async def test_race_gives_back_what_it_got_when_cancelled() -> None:
    slot: asyncio.Queue[str] = asyncio.Queue(1)
    signal = asyncio.Event()
    race = asyncio.ensure_future(task.race(slot.get(), signal, give_back=slot.put_nowait))
    await asyncio.sleep(0)  # The race waits on the slot.
    slot.put_nowait("spool")
    await asyncio.sleep(0)  # The get completes ...
    race.cancel()  # ... just as the stream's client goes away.
    with pytest.raises(asyncio.CancelledError):
        await race
    assert slot.get_nowait() == "spool"


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    ("peer", "relayed"),
    [
        # The broker proxied to was stopping: our client, who did not cancel, retries.
        ((grpc.StatusCode.CANCELLED, "CANCELLED"), (grpc.StatusCode.UNAVAILABLE, "CANCELLED")),
        (
            (grpc.StatusCode.INTERNAL, "Internal error from Core"),
            (grpc.StatusCode.UNAVAILABLE, "Internal error from Core"),
        ),
        ((grpc.StatusCode.NOT_FOUND, "nope"), (grpc.StatusCode.NOT_FOUND, "nope")),
    ],
)
async def test_edge_relays_a_proxied_failure_as_a_client_should_act_on_it(
    peer: tuple[grpc.StatusCode, str], relayed: tuple[grpc.StatusCode, str]
) -> None:
    ctx = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        await _servicer()._edge("Append", ctx, 0, _fails(_rpc_error(*peer)), metrics.Outcome())  # type: ignore[arg-type]
    assert ctx.aborted == relayed
