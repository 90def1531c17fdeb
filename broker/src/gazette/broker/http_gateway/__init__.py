"""The journal HTTP gateway of a broker's HTTP port (Gazette `broker/http_gateway`).

``curl`` speaks to journals through it: ``GET /<journal>?offset=&block=``
streams a journal's content with Gazette's response headers (and an
``X-Close-Error`` trailer), ``HEAD`` returns just the headers, and
``PUT /<journal>`` appends the request body as one atomic append. Each
request is one ``protocol.Journal`` RPC to a broker, so it is routed and
proxied like any client's.

Key types:

- :class:`Gateway` — maps requests to Read / Append RPCs over a grpc.aio channel.
- :class:`ServerConfig` — its settings (``body_timeout``: how long a request
  body may send nothing before it is answered 408, 30 s by default).
- :class:`Server` — an HTTP/1.1 server (h11 on asyncio streams) of the gateway
  plus ``/debug/ready`` and ``/debug/metrics``: a broker process serves it
  on its HTTP port (``--broker.http-port``).
- ``python -m gazette.broker.http_gateway`` — the same server as a process of
  its own, in front of any broker.

Usage::

    from gazette.broker import http_gateway

    http = http_gateway.Server(lambda: ready, grpc_endpoint="http://127.0.0.1:8080")
    port = await http.start("127.0.0.1", 8081)
    # curl -X PUT --data-binary @file http://127.0.0.1:8081/examples/journal
    # curl "http://127.0.0.1:8081/examples/journal?offset=0"
    await http.close()

It imports no client code (the broker server mounts it, and the client layer
sits above the server), only the protocol and its gRPC stubs.
"""

from gazette.broker.http_gateway.gateway import (
    CLOSE_ERROR_HEADER,
    Gateway,
    HttpError,
    Reply,
    parse_append_request,
    parse_read_request,
)
from gazette.broker.http_gateway.server import Server, ServerConfig

__all__ = [
    "CLOSE_ERROR_HEADER",
    "Gateway",
    "HttpError",
    "Reply",
    "Server",
    "ServerConfig",
    "parse_append_request",
    "parse_read_request",
]
