"""The broker client: append to and read from journals of a Gazette broker cluster.

This is what applications, ``gazctl`` and the consumer framework use to talk
to brokers over ``protocol.Journal`` (grpc.aio). It sits above the protocol
and below every application (ARCHITECTURE.md), and mirrors Gazette's Go
``broker/client`` package:

- :class:`JournalClient` — channels and *routing*: without a route cache every
  RPC goes to ``--broker.address`` and brokers proxy it; with one
  (``cache_size > 0``) RPCs go straight to a route member — the primary for
  appends, a same-zone member for reads — avoiding brokers that just failed.
- :class:`Appender` / :func:`append` — one atomic append of any size, streamed
  from bytes, a file or an iterator, retried on ``UNAVAILABLE`` and routing
  statuses as Gazette's `client.Append` does. Where the broker's native data
  plane (:mod:`gazette.dataplane`) is installed, the RPC runs on its tonic
  runtime thread and wakes the event loop once per append.
- :class:`AppendService` / :class:`AsyncAppend` — many small writes batched
  into per-journal, strictly ordered, pipelined appends; optional dependencies
  between appends; terminal failures stick to their journal.
- :class:`Reader` — one Read RPC (natively too, where installed: responses are
  read ahead and taken in batches); reads fragments straight from their store
  when handed a signed URL (``file://`` under a file root, ``http(s)://`` such
  as S3 presigned URLs), with Gazette's gzip rules; :func:`write_head` reads
  where a journal's next append goes (a metadata-only read).
- :class:`RetryReader` — a read that follows the journal across broker
  failures and route changes, resuming at the exact offset reached.
- :class:`RouteCache`, and helpers :func:`list_journals`, :func:`get_journal`,
  :func:`apply_journals`, :func:`list_all_fragments`,
  :func:`fragment_store_health`, :class:`WatchedList`.
- :mod:`sync` — a blocking facade for scripts; :mod:`errors` — the error
  hierarchy (a class per ``pb.Status``, with structured fields).

Authorization (brokers run with ``--broker.auth-keys``): give
:class:`ClientConfig` the same ``auth_keys`` and every RPC carries a token
signed for just what it does (APPEND to its journal, READ of its journal,
LIST with its selector, APPLY), as Gazette's clients sign them; or give it a
token minted for you (``auth_token``), sent with every RPC. A refused token
surfaces as ``errors.TransportError`` with code ``UNAUTHENTICATED`` and the
broker's reason, and is never retried.

Usage::

    from gazette.broker import client, protocol as pb

    async with client.JournalClient(client.ClientConfig(address="http://localhost:8080")) as jc:
        await client.append(jc, "examples/foo", b"hello\\n")
        async with client.AppendService(jc) as svc:
            for i in range(1000):
                svc.append("examples/foo", b"record %d\\n" % i)   # batched, in order
        async with client.RetryReader(jc, pb.ReadRequest(journal="examples/foo")) as rr:
            async for chunk in rr:                               # up to the write head
                print(chunk)
"""

from gazette.broker.client import errors, sync
from gazette.broker.client.append_service import (
    AppendService,
    AppendServiceConfig,
    AsyncAppend,
    AsyncOperation,
)
from gazette.broker.client.appender import Appender, Content, append
from gazette.broker.client.config import Backoff, ClientConfig, Clock, SystemClock
from gazette.broker.client.journal_client import JournalClient
from gazette.broker.client.listing import (
    WatchedList,
    apply_journals,
    fragment_store_health,
    get_journal,
    list_all_fragments,
    list_journals,
)
from gazette.broker.client.reader import FragmentReader, Reader, open_fragment_url, write_head
from gazette.broker.client.retry_reader import RetryReader
from gazette.broker.client.route_cache import RouteCache

__all__ = [
    "AppendService",
    "AppendServiceConfig",
    "Appender",
    "AsyncAppend",
    "AsyncOperation",
    "Backoff",
    "ClientConfig",
    "Clock",
    "Content",
    "FragmentReader",
    "JournalClient",
    "Reader",
    "RetryReader",
    "RouteCache",
    "SystemClock",
    "WatchedList",
    "append",
    "apply_journals",
    "errors",
    "fragment_store_health",
    "get_journal",
    "list_all_fragments",
    "list_journals",
    "open_fragment_url",
    "sync",
    "write_head",
]
