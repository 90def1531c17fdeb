"""A routed ``protocol.Journal`` client: channels, dispatch by route, call helpers.

Without a route cache every RPC goes to the configured broker address, which
resolves the journal and proxies the RPC to the right broker (Gazette `broker/client/route_cache.go`).
With one, RPCs of a journal go straight to one of its route members: the
primary for appends; for reads a member of our own zone when there is one.
Endpoints that failed a call recently are avoided, so a retry after a broker
died goes elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

import grpc

from gazette.broker import protocol as pb
from gazette.broker.client import config, route_cache
from gazette.broker.protocol import auth, dial
from gazette.broker.protocol import protocol_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from gazette import dataplane
    from gazette.broker.client import errors

__all__ = ["Dispatch", "JournalClient"]

log = logging.getLogger(__name__)


class Dispatch:
    """Where one RPC goes: the endpoint ("" for the default address), and its stub."""

    __slots__ = ("_client", "endpoint")

    def __init__(self, client: JournalClient, endpoint: str) -> None:
        self._client = client
        self.endpoint = endpoint

    @property
    def stub(self) -> pb_grpc.JournalStub:
        """The grpc.aio stub of the endpoint (its channel is dialed on first use)."""
        return self._client.stub(self.endpoint)


class JournalClient:
    """Routes and dispatches ``protocol.Journal`` RPCs. Use as an async context manager.

    Channels, one per endpoint, are dialed on first use through the dial seam
    (:mod:`gazette.broker.protocol.dial`), which owns transport security and
    credentials: every call carries :meth:`authorize`'s metadata for the
    claims it needs (Gazette's ``AuthJournalClient``). Appends and reads go through
    the native data plane's channels instead where it is installed
    (:meth:`native_append`, :meth:`native_read`; ``ClientConfig.native_appends``,
    ``native_reads``), dialed by the same seam.
    """

    def __init__(
        self,
        cfg: config.ClientConfig | None = None,
        *,
        clock: config.Clock | None = None,
    ) -> None:
        self.config = cfg or config.ClientConfig()
        self.clock: config.Clock = clock or config.SystemClock()
        self.routes: route_cache.RouteCache | None = (
            route_cache.RouteCache(self.config.cache_size, self.config.cache_ttl, self.clock)
            if self.config.cache_size > 0
            else None
        )
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._broken: dict[str, float] = {}
        self._stubs: dict[str, tuple[grpc.aio.Channel, pb_grpc.JournalStub]] = {}
        self._dial = dial.DialConfig(
            max_message_size=self.config.max_message_size,
            tls=dial.TLS(
                self.config.cert_file, self.config.cert_key_file, self.config.trusted_ca_file
            ),
        )
        #: Signs (keys) or holds (a static token) the bearer token of each call.
        self.credentials: auth.Authorizer = dial.credentials(
            self.config.auth_keys, self.config.auth_token
        )
        # Made on the first native call: a client that only lists never loads the
        # extension (gazctl's one-shot commands start faster).
        self._native: dial.NativeChannels | None = None
        self._native_made = False

    async def __aenter__(self) -> JournalClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._native is not None:
            self._native.close()
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            with contextlib.suppress(Exception):
                await channel.close()

    def authorize(
        self, claims: auth.Claims, lifetime: float = auth.LIFETIME
    ) -> tuple[tuple[str, str], ...] | None:
        """Call metadata authorizing ``claims`` (None when the client has no credentials)."""
        return self.credentials.authorize(claims, lifetime) or None

    # --- Channels -------------------------------------------------------------

    def channel(self, endpoint: str = "") -> grpc.aio.Channel:
        """The (shared, lazily dialed) channel of ``endpoint``; "" is the default address.

        Raises ``pb.TLSConfigError`` if an ``https://`` endpoint's TLS files don't load.
        """
        endpoint = endpoint or self.config.address
        channel = self._channels.get(endpoint)
        if channel is None:
            channel = dial.channel(endpoint, self._dial)
            self._channels[endpoint] = channel
        return channel

    def stub(self, endpoint: str = "") -> pb_grpc.JournalStub:
        # Kept per channel: a stub builds a callable for each RPC of the service.
        channel = self.channel(endpoint)
        cached = self._stubs.get(endpoint)
        if cached is None or cached[0] is not channel:
            cached = self._stubs[endpoint] = (channel, pb_grpc.JournalStub(channel))
        return cached[1]

    def native_append(
        self, endpoint: str, first: bytes, metadata: Sequence[tuple[str, str]] | None
    ) -> dataplane.AppendCall | None:
        """An Append RPC to ``endpoint`` ("" for the default address) through the native
        data plane, started with its serialized first message; None when appends of
        this client (or to this endpoint) go through grpc.aio."""
        native = self._native_channels() if self.config.native_appends else None
        if native is None:
            return None
        return native.append(endpoint or self.config.address, first, metadata)

    def native_read(
        self, endpoint: str, request: bytes, metadata: Sequence[tuple[str, str]] | None
    ) -> dataplane.ReadCall | None:
        """A Read RPC of a serialized ReadRequest to ``endpoint`` ("" for the default
        address) through the native data plane; None when reads of this client (or
        from this endpoint) go through grpc.aio."""
        native = self._native_channels() if self.config.native_reads else None
        if native is None:
            return None
        return native.read(endpoint or self.config.address, request, metadata)

    def _native_channels(self) -> dial.NativeChannels | None:
        if not self._native_made:
            self._native_made = True
            self._native = dial.native_channels(self._dial)
        return self._native

    def mark_broken(self, endpoint: str) -> None:
        """Note that a call to ``endpoint`` failed: prefer other members for a while."""
        if endpoint:
            self._broken[endpoint] = self.clock.now()

    def failed(
        self, endpoint: str, journal: str, err: errors.TransportError
    ) -> errors.TransportError:
        """``err`` of a call for ``journal`` to ``endpoint``, once a broker that is
        UNAVAILABLE is avoided for a while (and the journal's route asked afresh)."""
        if err.code == grpc.StatusCode.UNAVAILABLE:
            self.mark_broken(endpoint)
            self.forget_route(journal)
        return err

    def _is_broken(self, endpoint: str) -> bool:
        at = self._broken.get(endpoint)
        if at is None:
            return False
        if at + self.config.broken_endpoint_cooldown < self.clock.now():
            del self._broken[endpoint]
            return False
        return True

    # --- Routing --------------------------------------------------------------

    @property
    def is_noop_router(self) -> bool:
        """True when there's no route cache: brokers are left to proxy every RPC."""
        return self.routes is None

    def update_route(self, journal: str, route: pb.Route | None) -> None:
        if self.routes is not None:
            self.routes.update(pb.strip_meta(journal), route)

    def forget_route(self, journal: str) -> None:
        if self.routes is not None:
            self.routes.forget(pb.strip_meta(journal))

    def route(self, journal: str) -> pb.Route | None:
        if self.routes is None:
            return None
        return self.routes.route(pb.strip_meta(journal))

    def pick(self, route: pb.Route | None, *, primary: bool) -> str:
        """The endpoint to send an RPC of ``route`` to ("" for the default address)."""
        if self.routes is None or route is None or not route.endpoints:
            return ""
        endpoints: Sequence[str] = route.endpoints
        if primary:
            if route.primary < 0:
                return ""
            ep = endpoints[route.primary]
            return "" if self._is_broken(ep) else ep
        candidates = [
            (0 if m.zone == self.config.zone else 1, i)
            for i, m in enumerate(route.members)
            if endpoints[i] and not self._is_broken(endpoints[i])
        ]
        if not candidates:
            return ""
        return endpoints[min(candidates)[1]]

    def dispatch(self, journal: str, *, primary: bool, route: pb.Route | None = None) -> Dispatch:
        """Choose where an RPC of ``journal`` goes (``route`` overrides the cache)."""
        endpoint = self.pick(route if route is not None else self.route(journal), primary=primary)
        return Dispatch(self, endpoint)

    def default(self) -> Dispatch:
        return Dispatch(self, "")
