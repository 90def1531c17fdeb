"""Fragment stores: where persisted fragment files live (Gazette `broker/stores`).

A FragmentStore URL (``file:///data/``, ``s3://bucket/prefix/?endpoint=...``)
names a blob store root. :class:`StoreRegistry` turns URLs into cached
:class:`ActiveStore` objects (instrumented, health-checked, swept hourly when
unused); each wraps a scheme's :class:`Store`:

- ``file://`` :class:`FileStore` (rooted at ``--broker.file-root``),
- ``s3://`` :class:`S3Store` (boto3, with Gazette's query arguments),
- ``gs://`` ``gcs.GCSStore`` (extra ``gcs``) and ``azure://`` / ``azure-ad://``
  ``azure.AzureStore`` (extra ``azure``): modules imported when first used, so
  that their client libraries load only where such a store is configured.

Paths given to a store are fragment content paths relative to its root.
Blocking client calls run in worker threads.

Usage::

    from gazette.broker.fragment import stores

    config = stores.StoresConfig(file_root="/var/lib/gazette")
    async with stores.StoreRegistry(config) as registry:   # runs health checks
        store = registry.get("file:///fragments/")
        await store.put("a/journal/name.raw", files.BytesReaderAt(b"hi"), 2)
        async for rel_path, mtime in store.list("a/journal/"):
            ...
        next_check, err = store.health_status()
"""

from gazette.broker.fragment.stores.active import (
    FIRST_HEALTH_CHECK,
    LAST_HEALTH_CHECK,
    ActiveStore,
    next_check_delay,
)
from gazette.broker.fragment.stores.base import (
    UNCONFIGURED_FILE_ROOT,
    Rewriter,
    Store,
    StoreReader,
    StoresConfig,
    parse_query_args,
)
from gazette.broker.fragment.stores.fs import FileStore
from gazette.broker.fragment.stores.registry import DEFAULT_PROVIDERS, Constructor, StoreRegistry
from gazette.broker.fragment.stores.s3 import S3Store

__all__ = [
    "DEFAULT_PROVIDERS",
    "FIRST_HEALTH_CHECK",
    "LAST_HEALTH_CHECK",
    "UNCONFIGURED_FILE_ROOT",
    "ActiveStore",
    "Constructor",
    "FileStore",
    "Rewriter",
    "S3Store",
    "Store",
    "StoreReader",
    "StoreRegistry",
    "StoresConfig",
    "next_check_delay",
    "parse_query_args",
]
