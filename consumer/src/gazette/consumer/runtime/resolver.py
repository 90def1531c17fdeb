"""Resolver: which process is a shard's primary, and its store when that is this process.

Gazette's ``consumer/resolver.go`` (``Resolve``). An application's own RPCs
(registered through :class:`~gazette.consumer.runtime.interfaces.ServiceRegistrar`)
resolve the shard a request is for, then either serve it from the local
primary's store or forward it to the primary's endpoint with a header naming
that primary; a request that arrives with such a header and finds the shard
is not primary here gets ``NOT_SHARD_PRIMARY`` rather than a second hop (the
route changed under the sender, which retries).

Resolving under a caller's claims (``--consumer.auth-keys``), a shard that
their selector doesn't select is answered as one that doesn't exist, route
and all (Gazette's resolver does the same). An application's RPC gets those
claims from :meth:`Resolver.verify` (its bearer token, which must grant the
capability the RPC needs), and forwards to a primary with the metadata of
:meth:`Resolver.authorize` (a token of this process's keys for that shard), as
the Shard API does; Gazette's applications use its service's Verifier and
Authorizer alike::

    async def Query(self, request, context):
        claims = await self.resolver.verify(context, auth.Capability.READ)
        res = self.resolver.resolve(request.shard, proxied_header, claims)
        if res.endpoint:
            return await Stub(self.resolver.channel(res.endpoint)).Query(
                forwarded,
                metadata=self.resolver.authorize(auth.Capability.READ, request.shard),
            )
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc

from gazette import allocator
from gazette.broker import protocol as pb
from gazette.broker.client import JournalClient
from gazette.broker.protocol import auth, dial
from gazette.consumer import protocol as pc
from gazette.consumer.runtime import interfaces

__all__ = ["Resolution", "Resolver"]


@dataclasses.dataclass
class Resolution:
    """Where a shard is served.

    ``status`` OK with ``store`` set: the shard is primary here and its store
    is open. OK with ``endpoint`` set: forward to that process, with
    ``header`` (its ``process_id`` names the primary) on the request.
    """

    status: pc.Status.ValueType
    header: pb.Header
    shard: interfaces.Shard | None = None
    store: interfaces.Store | None = None
    endpoint: str = ""


class Resolver:
    """Resolves shards against a process's view of etcd and its local replicas."""

    def __init__(
        self,
        svc: Any,
        journal_client: JournalClient,
        peer_tls: dial.TLS | None = None,
        authorization: auth.ServerAuth | None = None,
    ) -> None:
        self.svc = svc
        self.journal_client = journal_client
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: Our side of TLS to peers with ``https://`` endpoints (``--consumer.peer-*-file``).
        self._dial = dial.DialConfig(tls=peer_tls or dial.TLS())
        #: The process's keys (``--consumer.auth-keys``), consulted per call: a
        #: :class:`~auth.SwappableAuth` rotates them under a serving process.
        #: Without keys, every call is allowed and forwards carry no token.
        self.auth: auth.ServerAuth = authorization or auth.NoopAuth()

    async def verify(
        self, context: grpc.aio.ServicerContext[Any, Any], capability: int
    ) -> auth.Claims:
        """The claims of the call's bearer token, which must grant ``capability``.

        Otherwise the call is aborted ``UNAUTHENTICATED`` with the reason (this
        raises, as ``context.abort`` does).
        """
        try:
            return self.auth.verify(context.invocation_metadata(), capability)
        except pb.AuthorizationError as e:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
            raise  # Not reached: abort raises.

    def authorize(self, capability: int, shard_id: str) -> auth.Metadata | None:
        """Call metadata forwarding a request about ``shard_id`` to its primary.

        A short-lived token of this process's keys, granting ``capability`` over
        that one shard (None without keys).
        """
        sel = pb.LabelSelector()
        sel.include.labels.add(name="id", value=shard_id)
        return self.auth.authorize(auth.Claims(capability, sel)) or None

    def header(self) -> pb.Header:
        """A header of this process at the current etcd revision (no route)."""
        hdr = pb.Header()
        local = self.svc.observed.state.local_member
        if local is not None:
            hdr.process_id.zone, hdr.process_id.suffix = local.zone, local.suffix
        hdr.route.primary = -1
        hdr.etcd.CopyFrom(self.svc.observed.ks.header)
        return hdr

    def resolve(
        self,
        shard_id: str,
        proxy_header: pb.Header | None = None,
        claims: auth.Claims | None = None,
    ) -> Resolution:
        """Resolve ``shard_id``; ``proxy_header`` is the header a forwarded request carried.

        With ``claims``, a shard outside their selector is SHARD_NOT_FOUND.
        """
        state: allocator.State = self.svc.observed.state
        hdr = self.header()
        index = state.find_item(shard_id)
        if index == -1:
            return Resolution(pc.Status.SHARD_NOT_FOUND, hdr)
        if claims is not None and not pb.matches(
            claims.selector, pc.label_set_ext(state.items[index].decoded.spec)
        ):
            return Resolution(pc.Status.SHARD_NOT_FOUND, hdr)
        route = allocator.route_of(state.assignments_of(index))
        allocator.attach_endpoints(route, state)
        hdr.route.CopyFrom(route)
        if route.primary == -1:
            return Resolution(pc.Status.NO_SHARD_PRIMARY, hdr)
        primary = route.members[route.primary]
        local = state.local_member
        if local is None or (primary.zone, primary.suffix) != (local.zone, local.suffix):
            if proxy_header is not None and proxy_header.process_id.suffix:
                return Resolution(pc.Status.NOT_SHARD_PRIMARY, hdr)
            hdr.process_id.CopyFrom(primary)
            return Resolution(pc.Status.OK, hdr, endpoint=route.endpoints[route.primary])
        replica = self.svc.replicas.get(shard_id)
        if replica is None or replica.store is None or not replica.store_ready.is_set():
            # Assigned here but not yet serving (playing its log back, or stopping).
            return Resolution(pc.Status.SHARD_STOPPED, hdr)
        return Resolution(pc.Status.OK, hdr, shard=replica, store=replica.store)

    def channel(self, endpoint: str) -> grpc.aio.Channel:
        """A channel to a peer process (one per endpoint, kept)."""
        ch = self._channels.get(endpoint)
        if ch is None:
            ch = self._channels[endpoint] = dial.channel(endpoint, self._dial)
        return ch

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            await ch.close()
