"""Configuration of the broker client: frozen dataclasses of documented defaults.

Transport security follows the endpoint: ``https://`` brokers (the address, and
the endpoints routes name) are dialed with TLS using :class:`ClientConfig`'s
certificate files, through the dial seam (:mod:`gazette.broker.protocol.dial`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Protocol

__all__ = ["DEFAULT_BROKER_ADDRESS", "Backoff", "ClientConfig", "Clock", "SystemClock"]

#: Gazette's default ``--broker.address``.
DEFAULT_BROKER_ADDRESS = "http://localhost:8080"


class Clock(Protocol):
    """Time as the client sees it; tests inject one that doesn't really wait."""

    def now(self) -> float:
        """Monotonic seconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry ``attempt`` (0-based), as Gazette's client backs off.

    Attempt ``-1`` means "retry at once" (a broker closed a read stream cleanly).
    """

    delays: tuple[float, ...] = (0.05, 0.05, 0.1, 0.1, 1.0, 1.0, 5.0)

    def delay(self, attempt: int) -> float:
        if attempt < 0:
            return 0.0
        return self.delays[min(attempt, len(self.delays) - 1)]


@dataclasses.dataclass(frozen=True, slots=True)
class ClientConfig:
    """How to reach brokers (``gazctl``'s ``--broker.*`` flags).

    ``cache_size`` 0 sends every RPC to ``address`` and lets brokers proxy it;
    a positive size keeps journals' routes and sends RPCs straight to a route
    member (the primary for appends), preferring members of ``zone``.
    """

    address: str = DEFAULT_BROKER_ADDRESS
    zone: str = "local"
    cache_size: int = 0
    cache_ttl: float = 60.0
    #: Static bearer token sent as ``authorization`` metadata ("" for none).
    auth_token: str = dataclasses.field(default="", repr=False)
    #: Base64 keys (``--broker.auth-keys``): the first signs a token per RPC, scoped to
    #: its capability and journal, as Gazette's clients do. Wins over ``auth_token``.
    auth_keys: str = dataclasses.field(default="", repr=False)
    #: Largest gRPC message accepted or sent (bytes).
    max_message_size: int = 8 << 20
    #: TLS of ``https://`` brokers (Gazette's ``--broker.cert-file``,
    #: ``--broker.cert-key-file``, ``--broker.trusted-ca-file``): a client certificate
    #: and its key to present (brokers with ``--broker.server-ca-file`` require one),
    #: and the CA of the brokers' certificates ("": the default root pool).
    cert_file: str = ""
    cert_key_file: str = ""
    trusted_ca_file: str = ""
    #: How long an endpoint that failed a call is avoided when choosing route members.
    broken_endpoint_cooldown: float = 5.0
    #: List / Apply / ListFragments / FragmentStoreHealth wait for a broker to be
    #: reachable (True), or fail at once with UNAVAILABLE (False, as a CLI wants).
    wait_for_ready: bool = True
    #: Directory that ``file://`` fragment URLs are relative to ("" to refuse them).
    file_root: str = ""
    #: Appends go through the native data plane (:mod:`gazette.dataplane`, tonic on a
    #: thread of its own) where it is installed: one wake-up of the event loop per
    #: append, where grpc.aio costs one per message and one per answer. False:
    #: always grpc.aio.
    native_appends: bool = True
    #: Reads likewise: the native runtime reads ahead, and the event loop takes every
    #: response that has come at once. False: always grpc.aio.
    native_reads: bool = True
    backoff: Backoff = dataclasses.field(default_factory=Backoff)
