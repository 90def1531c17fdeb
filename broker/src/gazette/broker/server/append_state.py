"""The vocabulary of the append state machine: its states, settings and collaborators.

:mod:`gazette.broker.server.append_fsm` runs the machine; this module holds
what it and its content phase (:mod:`gazette.broker.server.append_content`)
share: the :class:`State` enum, Gazette's constants, and :class:`Deps`, what
the machine needs of its broker (the Service implements it; unit tests fake it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Protocol

from gazette.broker.fragment import spool as spool_
from gazette.broker.protocol import protocol_pb2 as pb2
from gazette.broker.server import flow_control, resolver
from gazette.broker.server import pipeline as pipeline_

Status = pb2.Status
STORE_HEALTH_CHECK_RETRIES = 5  # Awaits up to 6 health-check completions, as Gazette.
DEFAULT_FLUSH_INTERVAL_S = 24 * 3600
# Client content chunks are coalesced into Replicate content messages of about this
# many bytes: gRPC's cost is mostly per message, so fewer, larger ones replicate
# faster. Kept well below the 4 MiB default message limit of brokers (ours and
# Gazette's), and a client chunk larger than this is forwarded alone.
REPLICATE_CONTENT_BYTES = 256 * 1024
# How long an append whose client went away (or a pulse out of time) may take to
# finish on its own before its pipeline is torn down.
ABORT_GRACE = 30.0


def copy_labels(labels: pb2.LabelSet) -> pb2.LabelSet:
    out = pb2.LabelSet()
    out.CopyFrom(labels)
    return out


class State(enum.IntEnum):
    RESOLVE = 0
    ACQUIRE_PIPELINE = 1
    START_PIPELINE = 2
    SEND_PIPELINE_SYNC = 3
    RECV_PIPELINE_SYNC = 4
    UPDATE_ASSIGNMENTS = 5
    AWAIT_DESIRED_REPLICAS = 6
    VALIDATE_PRECONDITIONS = 7
    UPDATE_SUSPEND = 8
    STREAM_CONTENT = 9  # Semi-terminal: needs client input.
    READ_ACKNOWLEDGEMENTS = 10
    ERROR = 11  # Terminal.
    PROXY = 12  # Terminal.
    FINISHED = 13  # Terminal.


TERMINAL = frozenset({State.ERROR, State.PROXY, State.FINISHED})

# Suspend modes of an append that may not carry content (looked up once: enum
# attributes of generated protobuf classes resolve through Python code).
_SUSPEND_WITHOUT_CONTENT = frozenset(
    {
        pb2.AppendRequest.SUSPEND_IF_FLUSHED,
        pb2.AppendRequest.SUSPEND_NOW,
        pb2.AppendRequest.SUSPEND_KEEP,
    }
)


class Deps(Protocol):
    """What the FSM needs of its broker (the Service implements it; tests fake it)."""

    @property
    def flow_limits(self) -> flow_control.FlowLimits: ...

    async def resolve(
        self,
        journal: str,
        *,
        may_proxy: bool,
        require_primary: bool,
        min_etcd_revision: int = 0,
        proxy_header: pb2.Header | None = None,
        authorized: Callable[[pb2.JournalSpec], bool] | None = None,
    ) -> resolver.Resolution: ...

    def new_pipeline(
        self, resolution: resolver.Resolution, spool: spool_.Spool
    ) -> pipeline_.Pipeline: ...
    async def update_assignments(self, resolution: resolver.Resolution) -> int: ...
    async def update_journal_spec(
        self, resolution: resolver.Resolution, spec: pb2.JournalSpec
    ) -> int: ...
    def maybe_roll(
        self, spool: spool_.Spool, roll_to_offset: int, spec: pb2.JournalSpec
    ) -> pb2.Fragment: ...
    async def await_store_health(self, resolution: resolver.Resolution) -> str | None: ...
    def store_healthy(self, resolution: resolver.Resolution) -> bool:
        """Whether the journal has no store, or its primary store is healthy now (no wait)."""
        ...

    def desired_replication(self, spec: pb2.JournalSpec) -> int: ...
    async def head_resumes_at(self, journal: str, index_end: int) -> int | None:
        """Where a journal whose spools trail its persisted fragments goes on (None: refuse)."""
        ...
