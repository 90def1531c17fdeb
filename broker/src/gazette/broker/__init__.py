"""Gazette brokers: journals served, replicated and persisted.

A *journal* is an append-only byte stream with a name (``examples/logs/one``),
labels and a spec in etcd. A cluster of brokers serves journals over gRPC
(``protocol.Journal``): each journal is assigned to *replication* brokers, one
of them the primary, which sequences appends and replicates them to its peers
in a transaction before acknowledging. Written content collects in
*fragments* — contiguous spans of the journal — that are persisted as plain,
optionally compressed files to a blob store (``file://``, ``s3://``), where
readers (and Spark) can read them directly. The layout, wire protocol and
etcd keyspace are Gazette's, so Gazette's Go tools and ours interoperate.

Subpackages, from the bottom up (arrows point down only; the import-linter
contracts of the root ``pyproject.toml`` keep them so):

- :mod:`protocol` (alias ``pb``) — messages and enums, validation, labels and
  selectors, fragment names, and the dial seam (``protocol.dial``: every gRPC
  channel and server port); imports nothing else of ours. Beside it,
  ``gazette.task`` (task groups, races).
- ``gazette.keyspace`` and ``gazette.allocator`` (same distribution) — the etcd
  mirror and the generic allocator (items, members, assignments).
- :mod:`journals` — what makes journals the allocator's items: the keyspace
  decoder and the consistency gate.
- :mod:`fragment` — codecs, fragment stores, spools, the persister and the
  fragment index: the storage half of a broker's data path.
- :mod:`client` — what applications use: append, read, list and apply, with
  routing and retries (``gazctl`` and the consumer build on it). Beside it,
  :mod:`http_gateway` (journal reads and appends over plain HTTP, and the
  ``/debug/`` routes) and :mod:`journalspace` (the YAML hierarchy of specs of
  ``gazctl journals apply``).
- :mod:`server` — the broker process: membership, replicas, the append state
  machine and replication pipelines, the gRPC servicer (``python -m
  gazette.broker``), and ``server.testing``, brokers in one event loop for tests.
- :mod:`testing` — a cluster of broker processes on a real etcd, for tests.

Usage::

    $ python -m gazette.broker --etcd.address http://127.0.0.1:2379 --broker.port 8080

    from gazette.broker import client
    from gazette.broker import protocol as pb

    async with client.JournalClient(client.ClientConfig(address="http://localhost:8080")) as jc:
        await client.append(jc, "examples/logs/one", b"hello\\n")
        request = pb.ReadRequest(journal="examples/logs/one")
        async with client.RetryReader(jc, request) as reader:
            async for chunk in reader:
                ...
"""
