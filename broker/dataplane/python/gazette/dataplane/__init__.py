"""The broker's native data plane (Rust, in ``broker/dataplane``).

The Python broker is the control plane; this package owns the broker's listening
port. :class:`FrontDoor` serves it on its own threads and forwards whatever it does
not serve natively to the broker's gRPC server on a private Unix socket, unchanged.
Python calls in here only to start and stop it, and to publish into :class:`Topology`
what it reads of etcd (specs, routes, members), which the data plane resolves
journals against on its own threads: no request waits for the GIL.

Clients use it too, where it is installed: :class:`ClientChannels` carries the
Python client library's appends and reads (``gazette.broker.client``) over tonic
on a runtime thread of its own: an :class:`AppendCall` settles one asyncio future
with its outcome, a :class:`ReadCall` one with every response that has come.
"""

from gazette.dataplane._native import (
    AppendCall,
    ClientChannels,
    FrontDoor,
    Plane,
    ReadCall,
    SpoolHandle,
    Topology,
)

__all__ = [
    "AppendCall",
    "ClientChannels",
    "FrontDoor",
    "Plane",
    "ReadCall",
    "SpoolHandle",
    "Topology",
]
