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

Subpackages, from the bottom up (arrows point down only; see ARCHITECTURE.md):

- :mod:`protocol` (alias ``pb``) — messages and enums, validation, labels and
  selectors, fragment names; imports nothing else of ours.
- :mod:`fragment` — codecs, fragment stores, spools and the fragment index:
  the storage half of a broker's data path.
- :mod:`server` — the broker process: etcd membership and allocation,
  replicas, the append state machine and replication pipelines, and the gRPC
  servicer (``python -m gazette.broker``).
- :mod:`http_gateway` — journal reads and appends over plain HTTP, and the
  ``/debug/ready`` and ``/debug/metrics`` routes of a broker's HTTP port.
- :mod:`client` — what applications use: append, read, list and apply, with
  routing and retries (``gazctl`` and the consumer build on it).
- :mod:`journalspace` — the YAML hierarchy of journal specs of
  ``gazctl journals apply``.
- :mod:`testing` — an in-process broker cluster on a real etcd, for tests.

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
