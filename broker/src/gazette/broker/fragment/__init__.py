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

# The submodules that reach the stores (and so boto3, ~1 s to import) load on
# first use of one of their names, so that importing a light submodule (say
# ``fragment.codecs``) doesn't pay for S3.
import importlib
from typing import TYPE_CHECKING, Any

from gazette.broker.fragment import errors
from gazette.broker.fragment.cover_set import CoverSet, Fragment, difference
from gazette.broker.fragment.files import BytesReaderAt, ReaderAt, SpoolFile

if TYPE_CHECKING:
    from gazette.broker.fragment import stores
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

# Lazily loaded name -> (submodule, attribute; None for the submodule itself).
_LAZY: dict[str, tuple[str, str | None]] = {
    "stores": ("stores", None),
    "OFFSET_JUMP_AGE_THRESHOLD": ("index", "OFFSET_JUMP_AGE_THRESHOLD"),
    "READ_URL_TTL": ("index", "READ_URL_TTL"),
    "Index": ("index", "Index"),
    "walk_all_stores": ("index", "walk_all_stores"),
    "Persister": ("persister", "Persister"),
    "PersisterConfig": ("persister", "PersisterConfig"),
    "persist": ("persister", "persist"),
    "read_fragment": ("reader", "read_fragment"),
    "Spool": ("spool", "Spool"),
    "SpoolConfig": ("spool", "SpoolConfig"),
    "SpoolObserver": ("spool", "SpoolObserver"),
    "fragments_equal": ("spool", "fragments_equal"),
    "label_sets_equal": ("spool", "label_sets_equal"),
    "maybe_roll": ("spool", "maybe_roll"),
    "StoreRegistry": ("stores", "StoreRegistry"),
    "StoresConfig": ("stores", "StoresConfig"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value: Any = importlib.import_module(f"{__name__}.{module}")
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
