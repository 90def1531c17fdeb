"""The dial seam: every gRPC channel and every gRPC server port of the brokers is made here.

Clients (:class:`gazette.broker.client.JournalClient`), a broker's channels to
its peers and to itself (the HTTP gateway), test seams and the broker's own
listening port all come through these functions, so that transport security
and credentials are decided in one place. Today channels are plaintext
(``http://`` endpoints, as Gazette's default); TLS belongs in
:class:`DialConfig` and :class:`ListenConfig` and nowhere else.

Per-call credentials are bearer tokens (:mod:`gazette.broker.protocol.auth`):
:func:`credentials` turns a client's ``--broker.auth-keys`` or
``--broker.auth-token`` into the authorizer whose metadata goes with each of
its calls, as Gazette's clients choose it (keys sign a token per call, scoped
to that call's journal and capability; else the static token; else nothing).

Usage::

    from gazette.broker.protocol import dial

    channel = dial.channel("http://broker-0:8080", dial.DialConfig(max_message_size=8 << 20))
    server = dial.server(dial.ListenConfig(max_receive_message_size=4 << 20))
    port = dial.listen(server, "127.0.0.1", 0)

etcd is dialed by its own client library (``gazette.keyspace.connect``): it is
not a broker endpoint and has its own settings.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc

from gazette.broker.protocol import auth, fragments

__all__ = ["DialConfig", "ListenConfig", "channel", "credentials", "listen", "server"]


@dataclasses.dataclass(frozen=True)
class DialConfig:
    """How channels to broker endpoints are made."""

    max_message_size: int | None = None
    """Largest message sent or received (None: gRPC's defaults)."""
    fast_reconnect: bool = True
    """Reconnect promptly when a broker comes back (gRPC backs off to 2 min by default)."""


@dataclasses.dataclass(frozen=True)
class ListenConfig:
    """How a broker's gRPC server takes connections."""

    max_receive_message_size: int = 4 << 20
    """Largest inbound message gRPC itself accepts."""
    reuse_port: bool = False
    """SO_REUSEPORT: off, so that two brokers never share (and steal) a port."""


def channel(endpoint: str, config: DialConfig = DialConfig()) -> grpc.aio.Channel:
    """A channel to a broker ``endpoint`` (``http://host:port``, ``unix:///path``)."""
    options: list[tuple[str, Any]] = []
    if config.max_message_size is not None:
        options += [
            ("grpc.max_receive_message_length", config.max_message_size),
            ("grpc.max_send_message_length", config.max_message_size),
        ]
    if config.fast_reconnect:
        options += [
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ]
    return grpc.aio.insecure_channel(fragments.endpoint_grpc_addr(endpoint), options=options)


def credentials(auth_keys: str = "", auth_token: str = "") -> auth.Authorizer:
    """The authorizer of a client's calls: keys if given, else a static token, else none.

    Raises ``pb.AuthorizationError`` if ``auth_keys`` don't decode.
    """
    return auth.new_authorizer(auth_keys, auth_token)


def server(config: ListenConfig = ListenConfig()) -> grpc.aio.Server:
    """A gRPC server, before any port is added (see :func:`listen`)."""
    return grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", config.max_receive_message_size),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 1 if config.reuse_port else 0),
        ]
    )


def listen(srv: grpc.aio.Server, host: str, port: int) -> int:
    """Add a listening port of ``host`` (``[::]`` for all) to ``srv``; the bound port, 0 if none."""
    return int(srv.add_insecure_port(f"{host}:{port}"))
