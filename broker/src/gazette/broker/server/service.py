"""The broker Service: the control plane's side of local replicas.

The Service is the Python core of a broker process (Gazette
``broker/service.go``): it keeps a :class:`~gazette.broker.server.replica.Replica`
per locally assigned journal (a :class:`~gazette.broker.server.replica.ReplicaSet`
observing the KeySpace) for the fragment index its reads and listings use,
resolves journals for the RPCs served in Python, dials peers for the calls it
proxies, and answers what the native data plane asks of the control plane
(:meth:`Service.answer_ask`: etcd transactions, store listings, fences, store
health). Appends, replication, spools and pulses run in the data plane
(:mod:`gazette.broker.server.native`).

The gRPC surface lives in :mod:`gazette.broker.server.api`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
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
    errors,
    isolation,
    mend,
    metrics,
    replica,
    resolver,
)
from gazette.broker.server import fences as fences_
from gazette.broker.server import (
    native as native_,
)

log = logging.getLogger(__name__)

# How long calls under way on a forgotten peer channel keep it (see Peers.forget).
FORGOTTEN_CHANNEL_GRACE = 10.0
# How many more health checks of an unhealthy store an append waits for before it
# is refused FRAGMENT_STORE_UNHEALTHY (6 completions in all, as Gazette's ``broker/append_fsm.go``).
STORE_HEALTH_CHECK_RETRIES = 5


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
    """Settings of the Service (from ``--broker.*`` flags)."""

    spool: spool.SpoolConfig = dataclasses.field(default_factory=spool.SpoolConfig)
    max_message_size: int = 4 << 20
    peer_tls: dial.TLS = dataclasses.field(default_factory=dial.TLS)
    """Our side of TLS to peers with ``https://`` endpoints (``--broker.peer-*-file``)."""


class Peers:
    """gRPC channels to other brokers, one per endpoint, dialed on first use."""

    def __init__(self, max_message_size: int = 4 << 20, tls: dial.TLS | None = None) -> None:
        # Proxied reads carry content chunks plus a few bytes of framing.
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
        it for up to :data:`FORGOTTEN_CHANNEL_GRACE`, then it closes."""
        ch = self._channels.pop(endpoint, None)
        if ch is not None:
            task = asyncio.get_running_loop().create_task(
                ch.close(grace=FORGOTTEN_CHANNEL_GRACE), name=f"close channel {endpoint}"
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
        self.replicas = replica.ReplicaSet(observed, self._new_replica)
        self.resolver = resolver.Resolver(observed, self.replicas)
        self.peers = Peers(config.max_message_size, config.peer_tls)
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
        self.resolver.stop_serving_local_replicas()
        self.replicas.stop_all()

    def local_id(self) -> pb.ProcessSpec.ID:
        return self.resolver.local_id()

    def persist_all_now(self) -> None:
        """Store everything this broker holds without delay (its lease is in doubt).

        Every local replica of the data plane rolls its spool once no append
        holds it, and completed replica copies upload at once rather than after
        their delay.
        """
        self.persister.hurry()
        if self.native is not None:
            self.native.plane.flush_all()

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

    def forget_peer(self, endpoint: str) -> None:
        """The peer at ``endpoint`` stopped answering (see isolation): our calls to it
        and the data plane's (pipelines, proxied appends) dial it afresh from now on."""
        self.peers.forget(endpoint)
        if self.native is not None:
            self.native.plane.forget_peer(endpoint)

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

    # -- Resolution ---------------------------------------------------------------------

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
        return await self.resolver.resolve(
            journal,
            may_proxy=may_proxy,
            require_primary=require_primary,
            min_etcd_revision=min_etcd_revision,
            proxy_header=proxy_header,
            authorized=authorized,
        )

    def new_fence(self, journal: str) -> fences_.JournalFence:
        local = self.local_id()
        return fences_.JournalFence(self.fences, journal, f"{local.zone}/{local.suffix}")

    async def head_resumes_at(self, journal: str, index_end: int) -> int | None:
        """Where a journal whose spools trail its persisted end goes on (Fences.resume_past).

        The data plane asks once a head gap has waited out its delay: an answer is a
        recovery (``gazette_journal_head_recoveries``)."""
        resumed = await self.fences.resume_past(journal, index_end)
        if resumed is None:
            return None
        metrics.JOURNAL_HEAD_RECOVERIES.inc()
        offset, skipped = resumed
        rep = self.replicas.get(journal)
        if skipped and rep is not None:
            rep.learn_skipped(skipped)
        return offset

    async def skipped_ranges(self, journal: str) -> tuple[tuple[int, int], ...]:
        return await self.fences.skipped(journal)

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

    async def checkpoint_journal_head(self, journal: str, offset: int) -> None:
        """Record in the JournalSpec that ``journal`` goes on at ``offset``.

        A stopping primary calls it with the end of everything it held (which its
        persister stores before the broker exits). Had another broker taken the
        journal over, its synchronised spools reach ``offset`` and this is moot;
        if none did (the whole cluster stops), the next primary's spool starts
        empty, behind the stored fragments, and would refuse appends (see
        the data plane's ``replica/head_gap.rs``): the offset of ``suspend``, which Gazette's
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

    async def _await_health_of(self, url: str) -> str | None:
        active = self.registry.get(url)
        for attempt in range(STORE_HEALTH_CHECK_RETRIES + 1):
            next_check, err = active.health_status()
            if err is None:
                return None
            if attempt == STORE_HEALTH_CHECK_RETRIES:
                return f"fragment store {url} unhealthy: {err}"
            await next_check.wait()
        return None  # Not reached.

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
