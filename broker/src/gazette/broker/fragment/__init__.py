"""Fragments: how journal content is spooled, indexed, compressed and persisted.

This is the storage half of a broker's data path (Gazette's `broker/fragment`
and `broker/stores`). A journal replica owns a ``spool.Spool`` (the fragment being written, in an
unlinked local file, with a running SHA-1) and an ``index.Index`` (every
fragment known for the journal, local and in stores). Replication requests
drive the spool (``Spool.apply``): commits land in the index, completed
fragments go to the ``persister.Persister``, which compresses them with the
journal's codec and uploads them to the first store of the journal's spec
under Gazette's file names. Store listings (``index.walk_all_stores``) refresh
the index; reads query it (``Index.query``) and stream from the spool file or
from the store (``reader.read_fragment``).

The package itself exports only the light, store-free names (fragments,
cover sets, spool files, errors). The submodules that reach the stores, and
so boto3 (about a second to import), are imported by name where they are
used, as our convention imports modules anyway.

Modules: ``cover_set`` (CoverSet), ``index``, ``spool`` (+ ``maybe_roll``),
``persister``, ``tails`` (confirmed parts and quarantined tails of spools),
``recovery`` (spools found on disk after a crash), ``codecs``, ``reader``,
``files`` (spool files and their records), ``stores``
(file:// and s3:// stores, registry, health checks), ``errors``, and
``testing`` (a real S3 server for tests).

Usage::

    from gazette.broker import protocol as pb
    from gazette.broker.fragment import index, persister, spool, stores

    async with stores.StoreRegistry(stores.StoresConfig(file_root="/data")) as registry:
        idx = index.Index(signer=registry.sign_get_url)
        pers = persister.Persister(registry, lookup_spec=specs.get)  # run pers.serve()
        # The observer forwards spool_commit to the index, spool_complete to the persister.
        sp = spool.Spool("a/journal", observer=MyObserver(idx, pers))

        await sp.apply(pb.ReplicateRequest(content=b"hello\\n", content_delta=0))
        await sp.apply(pb.ReplicateRequest(proposal=sp.next(), registers=sp.registers))
        resp, local_file = await idx.query(pb.ReadRequest(journal="a/journal", offset=0))
"""

from gazette.broker.fragment import errors
from gazette.broker.fragment.cover_set import CoverSet, Fragment, difference
from gazette.broker.fragment.files import BytesReaderAt, ReaderAt, SpoolFile

__all__ = [
    "BytesReaderAt",
    "CoverSet",
    "Fragment",
    "ReaderAt",
    "SpoolFile",
    "difference",
    "errors",
]
