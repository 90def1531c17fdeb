"""Fragments: how journal content is spooled, indexed, compressed and persisted.

This is the storage half of a broker's data path (Gazette's `broker/fragment`
and `broker/stores`). A journal replica owns a :class:`Spool` (the fragment being written, in an unlinked
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
#
# The imports below are the one table of this package's public names: each is
# written ``X as X`` (an explicit re-export, which is what mypy reads). Those
# under ``TYPE_CHECKING`` load lazily: at run time `_exports` reads them back
# from this file's source (they never execute), and ``__all__`` and the lazy
# map derive from that.
import ast
import importlib
import pathlib
from typing import TYPE_CHECKING, Any

from gazette.broker.fragment import errors as errors
from gazette.broker.fragment.cover_set import CoverSet as CoverSet
from gazette.broker.fragment.cover_set import Fragment as Fragment
from gazette.broker.fragment.cover_set import difference as difference
from gazette.broker.fragment.files import BytesReaderAt as BytesReaderAt
from gazette.broker.fragment.files import ReaderAt as ReaderAt
from gazette.broker.fragment.files import SpoolFile as SpoolFile

if TYPE_CHECKING:
    from gazette.broker.fragment import stores as stores
    from gazette.broker.fragment.index import OFFSET_JUMP_AGE_THRESHOLD as OFFSET_JUMP_AGE_THRESHOLD
    from gazette.broker.fragment.index import READ_URL_TTL as READ_URL_TTL
    from gazette.broker.fragment.index import Index as Index
    from gazette.broker.fragment.index import walk_all_stores as walk_all_stores
    from gazette.broker.fragment.persister import Persister as Persister
    from gazette.broker.fragment.persister import PersisterConfig as PersisterConfig
    from gazette.broker.fragment.persister import persist as persist
    from gazette.broker.fragment.reader import read_fragment as read_fragment
    from gazette.broker.fragment.spool import Spool as Spool
    from gazette.broker.fragment.spool import SpoolConfig as SpoolConfig
    from gazette.broker.fragment.spool import SpoolObserver as SpoolObserver
    from gazette.broker.fragment.spool import fragments_equal as fragments_equal
    from gazette.broker.fragment.spool import label_sets_equal as label_sets_equal
    from gazette.broker.fragment.spool import maybe_roll as maybe_roll
    from gazette.broker.fragment.stores import StoreRegistry as StoreRegistry
    from gazette.broker.fragment.stores import StoresConfig as StoresConfig


def _exports() -> tuple[list[str], dict[str, tuple[str, str | None]]]:
    """This file's ``X as X`` imports: the public names, and the lazy ones' (submodule, attr).

    ``attr`` is None where the name is the submodule itself (``stores``).
    """
    public: list[str] = []
    lazy: dict[str, tuple[str, str | None]] = {}
    for node in ast.parse(pathlib.Path(__file__).read_text(encoding="utf-8")).body:
        deferred = isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for stmt in node.body if isinstance(node, ast.If) and deferred else [node]:
            if not isinstance(stmt, ast.ImportFrom) or stmt.module is None:
                continue
            for alias in stmt.names:
                if alias.asname != alias.name:
                    continue
                public.append(alias.name)
                if not deferred:
                    continue
                if stmt.module == __name__:
                    lazy[alias.name] = (alias.name, None)
                else:
                    lazy[alias.name] = (stmt.module.removeprefix(__name__ + "."), alias.name)
    return sorted(public), lazy


__all__, _LAZY = _exports()


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
