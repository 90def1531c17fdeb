"""Fragments: how journal content is spooled, indexed, compressed and persisted.

This is the storage half of a broker's data path (broker.md §4, §5). A journal
replica owns a :class:`Spool` (the fragment being written, in an unlinked
local file, with a running SHA-1) and an :class:`Index` (every fragment known
for the journal, local and in stores). Replication requests drive the spool
(:meth:`Spool.apply`): commits land in the index, completed fragments go to
the :class:`Persister`, which compresses them with the journal's codec and
uploads them to the first store of the journal's spec under Gazette's file
names. Store listings (:func:`walk_all_stores`) refresh the index; reads query
it (:meth:`Index.query`) and stream from the spool file or from the store
(:func:`read_fragment`).

Modules: ``cover_set`` (CoverSet), ``index``, ``spool`` (+ ``maybe_roll``),
``persister``, ``codecs``, ``reader``, ``files`` (spool files), ``stores``
(file:// and s3:// stores, registry, health checks), ``errors``, and
``testing`` (a real S3 server for tests).

Usage::

    from gazette.broker import fragment
    from gazette.broker import protocol as pb

    async with fragment.StoreRegistry(fragment.StoresConfig(file_root="/data")) as registry:
        index = fragment.Index(signer=registry.sign_get_url)
        persister = fragment.Persister(registry, lookup_spec=specs.get)  # run persister.serve()
        # The observer forwards spool_commit to the index, spool_complete to the persister.
        spool = fragment.Spool("a/journal", observer=MyObserver(index, persister))

        await spool.apply(pb.ReplicateRequest(content=b"hello\\n", content_delta=0))
        await spool.apply(pb.ReplicateRequest(proposal=spool.next(), registers=spool.registers))
        resp, local_file = await index.query(pb.ReadRequest(journal="a/journal", offset=0))
"""

from gazette.broker.fragment import errors, stores
from gazette.broker.fragment.cover_set import CoverSet, Fragment, difference
from gazette.broker.fragment.files import BytesReaderAt, ReaderAt, SpoolFile
from gazette.broker.fragment.index import (
    OFFSET_JUMP_AGE_THRESHOLD,
    READ_URL_TTL,
    Index,
    walk_all_stores,
)
from gazette.broker.fragment.persister import Persister, PersisterConfig, persist
from gazette.broker.fragment.reader import read_fragment
from gazette.broker.fragment.spool import (
    Spool,
    SpoolConfig,
    SpoolObserver,
    fragments_equal,
    label_sets_equal,
    maybe_roll,
)
from gazette.broker.fragment.stores import StoreRegistry, StoresConfig

__all__ = [
    "OFFSET_JUMP_AGE_THRESHOLD",
    "READ_URL_TTL",
    "BytesReaderAt",
    "CoverSet",
    "Fragment",
    "Index",
    "Persister",
    "PersisterConfig",
    "ReaderAt",
    "Spool",
    "SpoolConfig",
    "SpoolFile",
    "SpoolObserver",
    "StoreRegistry",
    "StoresConfig",
    "difference",
    "errors",
    "fragments_equal",
    "label_sets_equal",
    "maybe_roll",
    "persist",
    "read_fragment",
    "stores",
    "walk_all_stores",
]
