"""``azure://<container>/<prefix>/`` fragment stores through azure-storage-blob (Gazette
`broker/stores/azure/account.go`).

The storage account is ``AZURE_ACCOUNT_NAME`` with the shared key
``AZURE_ACCOUNT_KEY``, as Gazette reads them; blobs live at
``https://<account>.blob.core.windows.net/<container>/<prefix><path>`` and GETs
are signed with a read-only SAS. Query arguments: ``find`` and ``replace``.
``AZURE_BLOB_ENDPOINT`` (ours, not Gazette's) replaces the account's endpoint,
e.g. ``http://127.0.0.1:10000/devstoreaccount1`` for Azurite.

``azure-ad://`` (Azure AD service principals, user-delegation SAS) is not
supported yet: such a store fails construction with a clear error.

The client blocks, so every call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

from azure.core import exceptions as aexc
from azure.storage.blob import (
    BlobSasPermissions,
    BlobServiceClient,
    ContentSettings,
    generate_blob_sas,
)

from gazette.broker.fragment import errors, files
from gazette.broker.fragment.stores import base

log = logging.getLogger(__name__)

_OPTIONS = ("find", "replace")
ENDPOINT_ENV = "AZURE_BLOB_ENDPOINT"


class AzureStore(base.Store):
    def __init__(self, url: str, config: base.StoresConfig) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "azure":
            raise errors.StoreConfigError(
                f"{parts.scheme}:// stores are not supported (only azure:// with a shared key)",
                store=url,
                op="construct",
            )
        args = base.parse_query_args(parts, _OPTIONS)
        self._url = url
        self._container_name = parts.netloc
        self._prefix = parts.path[1:]
        self._rewriter = base.Rewriter(args.get("find", ""), args.get("replace", ""))
        account = os.environ.get("AZURE_ACCOUNT_NAME", "")
        key = os.environ.get("AZURE_ACCOUNT_KEY", "")
        if not account or not key:
            raise errors.StoreConfigError(
                "azure:// stores need AZURE_ACCOUNT_NAME and AZURE_ACCOUNT_KEY in the environment",
                store=url,
                op="construct",
            )
        self._account, self._key_secret = account, key
        self._endpoint = (
            os.environ.get(ENDPOINT_ENV) or f"https://{account}.blob.core.windows.net"
        ).rstrip("/")
        service = BlobServiceClient(
            account_url=self._endpoint,
            credential={"account_name": account, "account_key": key},
        )
        self._container: Any = service.get_container_client(self._container_name)
        log.info("constructed Azure blob client for %s (endpoint %s)", url, self._endpoint)

    def _blob_name(self, path: str) -> str:
        return self._rewriter.rewrite(self._prefix, path)

    def _err(self, op: str, path: str, e: BaseException) -> errors.StoreError:
        return errors.StoreError(f"Azure {op} {path}: {e}", store=self._url, op=op, path=path)

    def sign_get(self, path: str, ttl: float) -> str:
        name = self._blob_name(path)
        sas = generate_blob_sas(
            account_name=self._account,
            container_name=self._container_name,
            blob_name=name,
            account_key=self._key_secret,
            permission=BlobSasPermissions(read=True),
            expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=ttl),
        )
        quoted = urllib.parse.quote(name)
        return f"{self._endpoint}/{self._container_name}/{quoted}?{sas}"

    async def exists(self, path: str) -> bool:
        blob = self._container.get_blob_client(self._blob_name(path))
        try:
            return bool(await asyncio.to_thread(blob.exists))
        except aexc.AzureError as e:
            raise self._err("exists", path, e) from e

    async def get(self, path: str) -> base.StoreReader:
        blob = self._container.get_blob_client(self._blob_name(path))

        def fetch() -> tuple[bytes, str]:
            # Raw bytes: the reader decodes a Content-Encoding itself (gzip offload).
            downloader = blob.download_blob(decompress=False)
            encoding = downloader.properties.content_settings.content_encoding or ""
            return downloader.readall(), encoding

        try:
            data, encoding = await asyncio.to_thread(fetch)
        except aexc.AzureError as e:
            raise self._err("get", path, e) from e
        return base.BytesReader(data, encoding)

    async def put(
        self, path: str, content: files.ReaderAt, length: int, content_encoding: str = ""
    ) -> None:
        blob = self._container.get_blob_client(self._blob_name(path))
        settings = ContentSettings(content_encoding=content_encoding or None)
        try:
            await asyncio.to_thread(
                blob.upload_blob,
                base.SectionReader(content, length),
                length=length,
                overwrite=True,
                content_settings=settings,
            )
        except aexc.AzureError as e:
            raise self._err("put", path, e) from e

    async def list(self, prefix: str) -> AsyncIterator[tuple[str, float]]:
        full = self._blob_name(prefix)
        pages = iter(self._container.list_blobs(name_starts_with=full).by_page())
        while True:
            try:
                page = await asyncio.to_thread(next, pages, None)
                items = await asyncio.to_thread(list, page) if page is not None else None
            except aexc.AzureError as e:
                raise self._err("list", prefix, e) from e
            if items is None:
                return
            for item in items:
                name: str = item.name
                if name.endswith("/"):
                    continue
                rel = name[len(full) :] if name.startswith(full) else name
                yield rel, item.last_modified.timestamp()

    async def remove(self, path: str) -> None:
        blob = self._container.get_blob_client(self._blob_name(path))
        try:
            await asyncio.to_thread(blob.delete_blob)
        except aexc.AzureError as e:
            raise self._err("remove", path, e) from e

    def is_auth_error(self, err: BaseException) -> bool:
        e: BaseException | None = err
        while e is not None:
            if isinstance(e, aexc.ClientAuthenticationError):
                return True
            if isinstance(e, aexc.HttpResponseError) and (
                e.status_code == 403 or getattr(e, "error_code", "") == "ContainerNotFound"
            ):
                return True
            e = e.__cause__
        return False
