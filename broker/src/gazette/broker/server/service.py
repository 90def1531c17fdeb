"""The broker Service: local replicas, resolution, and what the append FSM needs.

The Service is the runtime core of a broker process (Gazette
``broker/service.go``): it keeps a :class:`~gazette.broker.server.replica.Replica`
per locally assigned journal (a :class:`~gazette.broker.server.replica.ReplicaSet`
observing the KeySpace), resolves journals, dials peers, and implements the
collaborators of :class:`~gazette.broker.server.append_fsm.AppendFSM`
(:class:`~gazette.broker.server.append_state.Deps`): pipelines, the assignment
and suspension transactions, fragment rolls and store health. It is wiring:
the FSM runs its own loop (``AppendFSM.run``), for Append RPCs and for the
pulses of replicas.

The gRPC surface lives in :mod:`gazette.broker.server.api`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import aetcd
import grpc

from gazette import allocator
from gazette.allocator import keys as alloc_keys
from gazette.allocator import txn
from gazette.broker import protocol as pb
from gazette.broker.fragment import persister, spool, stores
from gazette.broker.protocol import auth, dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import (
    append_fsm,
    errors,
    flow_control,
    isolation,
    mend,
    pipeline,
    replica,
    resolver,
)
from gazette.broker.server import fences as fences_
from gazette.broker.server import (
    native as native_,
)

log = logging.getLogger(__name__)

# Pulses of non-primaries, deleted and suspended journals end at resolution.
_PULSE_EXPECTED_STATUSES = (
    pb.NOT_JOURNAL_PRIMARY_BROKER,
    pb.NO_JOURNAL_PRIMARY_BROKER,
    pb.JOURNAL_NOT_FOUND,
    pb.SUSPENDED,
)


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
    """Settings of the Service (from ``--broker.*`` flags)."""

    max_replication: int = 9
    flow_limits: flow_control.FlowLimits = dataclasses.field(
        default_factory=flow_control.FlowLimits
    )
    auto_suspend: bool = False
    spool: spool.SpoolConfig = dataclasses.field(default_factory=spool.SpoolConfig)
    pulse_interval: float = replica.PULSE_INTERVAL
    max_message_size: int = 4 << 20
    recovery_delay: float = replica.DEFAULT_RECOVERY_DELAY
    """Seconds a journal's spools must trail its persisted fragments before it resumes
    at their end (see Replica.head_recovery_ready); at least the member lease."""
    resume_head_gaps: bool = True
    """Whether such a journal resumes at all without `gazctl journals reset-head`."""
    peer_tls: dial.TLS = dataclasses.field(default_factory=dial.TLS)
    """Our side of TLS to peers with ``https://`` endpoints (``--broker.peer-*-file``)."""
    native: bool = False
    """Appends, replication and reads run in the native data plane
    (``--broker.native-appends``): replicas here only list the stores, into an index
    whose listings the plane's own index takes (see gazette.broker.server.native)."""


class Peers:
    """gRPC channels to other brokers, one per endpoint, dialed on first use."""

    def __init__(self, max_message_size: int = 4 << 20, tls: dial.TLS | None = None) -> None:
        # Replicate requests carry an append's chunks plus a few bytes of framing.
        self._dial = dial.DialConfig(
            max_message_size=max_message_size + (64 << 10), tls=tls or dial.TLS()
        )
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def stub(self, endpoint: str) -> pb2_grpc.JournalStub:
        if not endpoint:
            raise errors.PipelineError("peer has no endpoint (its BrokerSpec is missing)")
        ch = self._channels.get(endpoint)
        if ch is None:
            ch = dial.channel(endpoint, self._dial)
            self._channels[endpoint] = ch
        return pb2_grpc.JournalStub(ch)

    def forget(self, endpoint: str) -> None:
        """Dial ``endpoint`` afresh from now on (its connection went quiet: see
        gazette.broker.server.isolation). Calls under way on the old channel keep
        it for up to REPLICATION_TIMEOUT, then it closes."""
        ch = self._channels.pop(endpoint, None)
        if ch is not None:
            task = asyncio.get_running_loop().create_task(
                ch.close(grace=pipeline.REPLICATION_TIMEOUT), name=f"close channel {endpoint}"
            )
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            await ch.close()
        for task in list(self._closing):
            task.cancel()


async def _fresh_listing(rep: replica.Replica) -> None:
    """Return once a store listing started now was applied to ``rep``'s index."""
    asked = rep.clock()
    rep.refresh_now()
    while rep.listed_at < asked:  # A store outage keeps the answer back.
        await rep.index.next_listing()
        if rep.stopping:
            raise errors.BrokerServerError(f"replica of {rep.journal} stopped")


def pick_member(
    res: resolver.Resolution, *, require_primary: bool
) -> tuple[pb.ProcessSpec.ID, str]:
    """The (member, endpoint) a request resolved to ``res`` is proxied to.

    The primary when required; else the resolved process if any; else a member,
    preferring our own zone (Gazette's dispatcher prefers same-zone peers).
    """
    rt = res.header.route
    endpoints = list(rt.endpoints) + [""] * (len(rt.members) - len(rt.endpoints))
    if require_primary or (res.header.HasField("process_id") and res.header.process_id.suffix):
        want = rt.members[rt.primary] if require_primary else res.header.process_id
        for m, ep in zip(rt.members, endpoints, strict=True):
            if m == want:
                return m, ep
        raise errors.PipelineError(f"resolved process {want} is not a route member")
    candidates = [(m, ep) for m, ep in zip(rt.members, endpoints, strict=True) if ep]
    if not candidates:
        raise errors.PipelineError("no route member has an endpoint")
    same_zone = [c for c in candidates if c[0].zone == res.local_id.zone]
    return (same_zone or candidates)[0]


class Service:
    """See the module docstring. Call :meth:`run` in a task to serve replicas."""

    def __init__(
        self,
        etcd: aetcd.Client,
        observed: allocator.ObservedState,
        registry: stores.StoreRegistry,
        persister_: persister.Persister,
        config: ServiceConfig = ServiceConfig(),
        *,
        clock: Callable[[], float] = time.time,
        lease_valid: Callable[[], bool] = lambda: True,
        lease_remaining: Callable[[], float | None] = lambda: None,
        authorization: auth.ServerAuth | None = None,
        fences: fences_.Fences | None = None,
    ) -> None:
        self.etcd = etcd
        #: Acknowledgement fences in etcd (see gazette.broker.server.fences).
        self.fences = fences or fences_.Fences(etcd, observed.ks.root, config.spool.directory)
        #: Verifies the tokens of RPCs, and signs those of our calls to peers
        #: (``--broker.auth-keys``; without keys, everything is allowed). Consulted
        #: per call: a :class:`~auth.SwappableAuth` rotates keys under a serving broker.
        self.auth: auth.ServerAuth = authorization or auth.NoopAuth()
        self.lease_valid = lease_valid
        #: Seconds our lease is surely valid from now (None: in doubt, or unknown).
        self.lease_remaining = lease_remaining
        self.observed = observed
        self.registry = registry
        self.persister = persister_
        self.config = config
        self.clock = clock
        self.replicas = replica.ReplicaSet(observed, self._new_replica)
        self.resolver = resolver.Resolver(observed, self.replicas)
        self.peers = Peers(config.max_message_size, config.peer_tls)
        self.stop_proxy_reads = asyncio.Event()
        #: Why no other broker answers us, while that lasts (see isolation): we hold no
        #: lease, and calls proxied to a peer would hang.
        self._cut_off: str | None = None
        #: The native data plane, when it serves appends (set by the broker process).
        self.native: native_.NativeHost | None = None

    @property
    def cut_off(self) -> str | None:
        return self._cut_off

    @cut_off.setter
    def cut_off(self, why: str | None) -> None:
        self._cut_off = why
        self.publish_lease()

    def publish_lease(self) -> None:
        """Tell the native data plane how long our lease is surely valid (and whether
        we are cut off): it refuses writes past that without asking us."""
        if self.native is None:
            return
        valid_for = self.lease_remaining()
        self.native.publish_lease(valid_for, self._cut_off)

    def _new_replica(self, journal: str, primary: bool, create_revision: int) -> replica.Replica:
        return replica.Replica(
            journal,
            self,
            primary=primary,
            create_revision=create_revision,
            spool_config=self.config.spool,
            pulse_interval=self.config.pulse_interval,
            recovery_delay=self.config.recovery_delay,
            resume_head_gaps=self.config.resume_head_gaps,
            native=self.native is not None,
        )

    async def run(self) -> None:
        """Serve local replicas until :meth:`stop_replicas` (then they have shut down).

        With a spool directory, quarantined tails are looked at meanwhile (see mend).
        """
        directory = self.config.spool.directory
        if not directory:
            await self.replicas.run()
            return
        mender = asyncio.get_running_loop().create_task(
            mend.run(directory, self, self.config.spool), name="quarantined tails"
        )
        try:
            await self.replicas.run()
        finally:
            mender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mender

    def local_replica(self, journal: str) -> replica.Replica | None:
        return self.replicas.get(journal)

    def stop_replicas(self) -> None:
        """Shutdown: stop all local replicas; later resolutions to us fail."""
        self.stop_proxy_reads.set()
        self.resolver.stop_serving_local_replicas()
        self.replicas.stop_all()

    def local_id(self) -> pb.ProcessSpec.ID:
        return self.resolver.local_id()

    def persist_all_now(self) -> None:
        """Store everything this broker holds without delay (its lease is in doubt).

        Every local replica rolls its spool once no pipeline holds it, and
        completed replica copies upload at once rather than after their delay.
        """
        self.persister.hurry()
        if self.native is not None:
            self.native.plane.flush_all()
        for rep in self.replicas.all():
            rep.request_flush()

    async def probe_peer(self, endpoint: str) -> None:
        """A trivial List of the peer at ``endpoint`` (see isolation): raises unless it answers."""
        req = pb.ListRequest(
            selector=pb.LabelSelector(
                include=pb.LabelSet(labels=[pb.Label(name="name", value=isolation.PROBE_JOURNAL)])
            )
        )
        call = self.peers.stub(endpoint).List(
            req, metadata=self.peer_metadata(auth.Capability.LIST, isolation.PROBE_JOURNAL)
        )
        try:
            await call.read()  # List streams (it can watch): its first response will do.
        finally:
            call.cancel()

    def other_brokers(self) -> list[isolation.Peer]:
        """(name, endpoint) of every other member, as the KeySpace has them now."""
        state = self.observed.state
        out = []
        for i, kv in enumerate(state.members):
            if i == state.local_member_index:
                continue
            m = kv.decoded
            out.append((f"{m.zone}#{m.suffix}", m.spec.process_spec.endpoint))
        return out

    def check_lease(self) -> None:
        """Raise LeaseInDoubt unless our lease is surely valid (writes need it)."""
        if not self.lease_valid():
            raise errors.LeaseInDoubt() if self.cut_off is None else errors.CutOff(self.cut_off)

    def check_reachable(self) -> None:
        """Raise CutOff if no peer answers us (before proxying a call to one)."""
        if self.cut_off is not None:
            raise errors.CutOff(self.cut_off)

    def unrouted_header(self) -> pb.Header:
        return resolver.unrouted_header(self.observed, self.local_id())

    def peer_metadata(self, capability: int, journal: str) -> auth.Metadata:
        """The token of a call we make to a peer on a client's behalf, or for replication.

        Narrowed to what the call needs, as Gazette's brokers sign theirs:
        ``capability`` over ``journal`` alone (a proxied Append has APPEND, a
        forwarded Read or ListFragments READ, a pipeline REPLICATE).
        """
        return self.auth.authorize(auth.journal_claims(capability, journal), auth.LIFETIME)

    # -- ReplicaHost --------------------------------------------------------------------

    def lookup_spec(self, journal: str) -> pb.JournalSpec | None:
        state = self.observed.state
        i = state.find_item(journal)
        if i == -1:
            return None
        spec: pb.JournalSpec = state.item(i).spec
        return spec

    def store_named(self, url: str) -> bool:
        """Whether some journal spec names fragment store ``url``."""
        state = self.observed.state
        return any(url in kv.decoded.spec.fragment.stores for kv in state.items)

    def spool_complete(self, sp: spool.Spool, primary: bool, *, held: bool = False) -> None:
        self.persister.spool_complete(sp, primary, held=held)

    async def pulse(self, rep: replica.Replica, stable_ticks: int) -> asyncio.Event | None:
        suspend = pb.AppendRequest.SUSPEND_NO_RESUME
        if self.config.auto_suspend and stable_ticks >= replica.AUTO_SUSPEND_STABLE_TICKS:
            suspend = pb.AppendRequest.SUSPEND_IF_FLUSHED
        fsm = append_fsm.AppendFSM(
            self,
            pb.AppendRequest(journal=rep.journal, do_not_proxy=True, suspend=suspend),
            clock=self.clock,
        )
        await fsm.run(None, give_up_after=self.config.pulse_interval)
        res = fsm.resolved
        expected = res is not None and res.status in _PULSE_EXPECTED_STATUSES
        expected = expected or isinstance(fsm.err, errors.Cancelled | errors.ResolutionError)
        if fsm.state != append_fsm.State.FINISHED and not expected:
            log.warning(
                "journal pulse of %s failed (will retry): status %s, %s",
                rep.journal,
                pb.enum_text(pb.Status, res.status) if res is not None else "-",
                fsm.err,
            )
        return res.invalidated if res is not None else None

    # -- append_fsm.Deps ----------------------------------------------------------------

    @property
    def flow_limits(self) -> flow_control.FlowLimits:
        return self.config.flow_limits

    async def resolve(
        self,
        journal: str,
        *,
        may_proxy: bool,
        require_primary: bool,
        min_etcd_revision: int = 0,
        proxy_header: pb.Header | None = None,
        authorized: Callable[[pb.JournalSpec], bool] | None = None,
    ) -> resolver.Resolution:
        if require_primary:
            self.check_lease()  # Appends: an earlier primary must not fork the journal.
        return await self.resolver.resolve(
            journal,
            may_proxy=may_proxy,
            require_primary=require_primary,
            min_etcd_revision=min_etcd_revision,
            proxy_header=proxy_header,
            authorized=authorized,
        )

    def new_pipeline(self, resolution: resolver.Resolution, spool_: object) -> pipeline.Pipeline:
        rep = resolution.replica
        assert rep is not None
        header = pb.Header()
        header.CopyFrom(resolution.header)
        rep.pipeline = pipeline.Pipeline(
            header,
            spool_,
            rep.spool_slot.put_nowait,
            lambda _member, endpoint: self.peers.stub(endpoint),
            self.peer_metadata(auth.Capability.REPLICATE, rep.journal),
        )
        return rep.pipeline

    def new_fence(self, journal: str) -> fences_.JournalFence:
        local = self.local_id()
        return fences_.JournalFence(self.fences, journal, f"{local.zone}/{local.suffix}")

    async def head_resumes_at(self, journal: str, index_end: int) -> int | None:
        """Where a journal whose spools trail its persisted end goes on (Fences.resume_past)."""
        resumed = await self.fences.resume_past(journal, index_end)
        if resumed is None:
            return None
        offset, skipped = resumed
        rep = self.replicas.get(journal)
        if skipped and rep is not None:
            rep.learn_skipped(skipped)
        return offset

    async def skipped_ranges(self, journal: str) -> tuple[tuple[int, int], ...]:
        return await self.fences.skipped(journal)

    async def update_assignments(self, resolution: resolver.Resolution) -> int:
        assert isinstance(resolution, resolver.Resolution)
        return await self._write_route(resolution.assignments)

    async def _write_route(self, assignments: Sequence[alloc_keys.KeyValue]) -> int:
        """Write the route of ``assignments`` into each of their values."""
        rt = allocator.route_of(assignments)
        value = rt.SerializeToString()
        cmps, ops = [], []
        for kv in assignments:
            if not pb.route_equivalent(rt, kv.decoded.value):
                # Keep the assignment's lease: it is the assigned member's, not ours.
                ops.append(txn.put(kv.key, value, ignore_lease=True))
            cmps.append(txn.mod_revision_is(kv.key, kv.mod_revision))
        if not ops:
            return 0
        return await self._checked_txn(cmps, ops, "updating assignments")

    async def update_journal_spec(
        self, resolution: resolver.Resolution, spec: pb.JournalSpec
    ) -> int:
        assert isinstance(resolution, resolver.Resolution) and resolution.item is not None
        item = resolution.item
        cmps = [txn.mod_revision_is(item.key, item.mod_revision)]
        cmps.extend(txn.mod_revision_is(kv.key, kv.mod_revision) for kv in resolution.assignments)
        ops = [txn.put(item.key, spec.SerializeToString())]
        return await self._checked_txn(cmps, ops, "updating JournalSpec")

    async def checkpoint_head(self, rep: replica.Replica, offset: int) -> None:
        await self.checkpoint_journal_head(rep.journal, offset)

    async def checkpoint_journal_head(self, journal: str, offset: int) -> None:
        """Record in the JournalSpec that ``rep``'s journal goes on at ``offset``.

        A stopping primary calls it with the end of everything it held (which its
        persister stores before the broker exits). Had another broker taken the
        journal over, its synchronised spools reach ``offset`` and this is moot;
        if none did (the whole cluster stops), the next primary's spool starts
        empty, behind the stored fragments, and would refuse appends (see
        Replica.head_recovery_ready): the offset of ``suspend``, which Gazette's
        brokers roll a pipeline forward to as ours do, lets it go on there. The
        txn holds only while our primary assignment (under our live lease) does.
        """
        state = self.observed.state
        i = state.find_item(journal)
        if i == -1 or not self.lease_valid():
            return
        item = state.items[i]
        spec: pb.JournalSpec = item.decoded.spec
        if spec.suspend.offset >= offset:
            return
        assignments = state.assignments_of(i)
        local = self.local_id()
        ours = [
            kv
            for kv in assignments
            if kv.decoded.slot == 0
            and kv.decoded.member_zone == local.zone
            and kv.decoded.member_suffix == local.suffix
        ]
        if not ours:
            return
        update = pb.JournalSpec()
        update.CopyFrom(spec)
        update.suspend.offset = offset
        cmps = [txn.mod_revision_is(item.key, item.mod_revision)]
        cmps.extend(txn.mod_revision_is(kv.key, kv.mod_revision) for kv in ours)
        ops = [txn.put(item.key, update.SerializeToString())]
        if await self._checked_txn(cmps, ops, "recording the journal head"):
            log.info("journal %s: head recorded at %d for whoever serves it next", journal, offset)

    async def _checked_txn(self, cmps: list[object], ops: list[object], what: str) -> int:
        """Run a guarded txn; the revision to read through (0 if it lost its race)."""
        try:
            resp = await txn.commit(self.etcd, cmps, ops)
        except allocator.errors.EtcdError as e:
            raise errors.BrokerServerError(f"{what}: {e}") from e
        if resp.succeeded:
            return int(resp.header.revision)
        # Lost a race with another writer of these keys (usually the allocator). Its
        # write is under our root, so the next KeySpace update brings it; the
        # caller then re-resolves and converges with another attempt.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await self.observed.ks.wait_for_update()
        return 0

    def maybe_roll(self, spool_: object, roll_to_offset: int, spec: pb.JournalSpec) -> pb.Fragment:
        assert isinstance(spool_, spool.Spool)
        return spool.maybe_roll(spool_, roll_to_offset, spec.fragment, self.clock())

    def store_healthy(self, resolution: resolver.Resolution) -> bool:
        spec = resolution.journal_spec
        assert spec is not None
        if not spec.fragment.stores:
            return True
        _, err = self.registry.get(spec.fragment.stores[0]).health_status()
        return err is None

    async def await_store_health(self, resolution: resolver.Resolution) -> str | None:
        spec = resolution.journal_spec
        assert spec is not None and spec.fragment.stores
        return await self._await_health_of(spec.fragment.stores[0])

    async def _await_health_of(self, url: str) -> str | None:
        active = self.registry.get(url)
        for attempt in range(append_fsm.STORE_HEALTH_CHECK_RETRIES + 1):
            next_check, err = active.health_status()
            if err is None:
                return None
            if attempt == append_fsm.STORE_HEALTH_CHECK_RETRIES:
                return f"fragment store {url} unhealthy: {err}"
            await next_check.wait()
        return None  # Not reached.

    def desired_replication(self, spec: pb.JournalSpec) -> int:
        return pb.desired_replication(spec, self.config.max_replication)

    # -- native.Host --------------------------------------------------------------------

    def served_stores(self) -> set[str]:
        urls: set[str] = set()
        for rep in self.replicas.all():
            spec = self.lookup_spec(rep.journal)
            if spec is not None:
                urls.update(spec.fragment.stores[:1])
        return urls

    def index_changed(self, rep: replica.Replica) -> None:
        """A store listing was applied to the replica's index: the data plane's index
        of the journal (which reads, appends and ListFragments use) takes it."""
        if self.native is not None:
            self.native.publish_listing(rep.journal, rep.index)

    def list_now(self, journal: str) -> None:
        """A read served by the data plane found a hole below the write head (it
        backs off itself): list the journal's stores now."""
        rep = self.replicas.get(journal)
        if rep is not None:
            rep.list_for_hole()

    async def answer_ask(
        self, kind: str, journal: str, a: int, b: int, extra: Any
    ) -> int | str | None:
        """Answers an ask of the native data plane (see the crate's ``bridge.Ask``)."""
        if kind == "sign_url":
            # A read's metadata response: the URL of a stored fragment, for ``a`` seconds.
            return self.registry.sign_get_url(pb.Fragment.FromString(bytes(extra)), float(a))
        if kind in ("update_assignments", "update_journal_spec"):
            # As read through the revision the append resolved at, or later.
            await self.observed.ks.wait_for_revision(a)
            state = self.observed.state
            i = state.find_item(journal)
            if i == -1:
                return 0
            assignments = state.assignments_of(i)
            if kind == "update_assignments":
                return await self._write_route(assignments)
            item = state.items[i]
            if max([item.mod_revision, *(kv.mod_revision for kv in assignments)]) > a:
                return 0  # Changed since the append read it: it resolves again.
            cmps = [txn.mod_revision_is(item.key, item.mod_revision)]
            cmps.extend(txn.mod_revision_is(kv.key, kv.mod_revision) for kv in assignments)
            ops = [txn.put(item.key, bytes(extra))]
            return await self._checked_txn(cmps, ops, "updating JournalSpec")
        if kind == "checkpoint_head":
            await self.checkpoint_journal_head(journal, a)
            return None
        if kind == "head_resumes_at":
            return await self.head_resumes_at(journal, a)
        if kind == "await_store_health":
            failure = await self._await_health_of(str(extra))
            if failure is not None:
                raise errors.BrokerServerError(failure)
            return None
        rep = self.replicas.get(journal)
        if rep is None:
            raise errors.BrokerServerError(f"{journal} is not served here")
        if kind == "refresh_listing":
            await _fresh_listing(rep)
            return None
        if kind == "listing_covers":
            await _fresh_listing(rep)
            return int(rep.index.stored_covers(a, b))
        if kind == "cover_fence":
            fence = rep.fence
            if fence is None:
                raise errors.BrokerServerError(f"{journal}: not its primary here")
            await fence.cover(a)
            return fence.covered
        raise errors.BrokerServerError(f"unknown ask {kind!r} of the data plane")
