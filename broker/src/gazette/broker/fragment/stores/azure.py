"""Azure Blob Storage fragment stores through azure-storage-blob (Gazette
`broker/stores/azure/`).

Two URL forms, as Gazette parses them:

``azure://<container>/<prefix>/``
    The storage account is ``AZURE_ACCOUNT_NAME``, authenticated by its shared key
    ``AZURE_ACCOUNT_KEY``. Signed GETs carry a read-only service SAS signed with
    that key.

``azure-ad://<tenant-id>/<account>/<container>/<prefix>/``
    An Azure AD service principal of the tenant (``AZURE_CLIENT_ID``,
    ``AZURE_CLIENT_SECRET``; azure-identity) authenticates every request.
    Signed GETs carry a read-only user-delegation SAS; the delegation key is
    fetched for two hours and reused while at least one hour of it remains.

Blobs live at ``https://<account>.blob.core.windows.net/<container>/<prefix><path>``.
``AZURE_BLOB_ENDPOINT`` (ours, not Gazette's) replaces that account endpoint,
e.g. ``http://127.0.0.1:10000/devstoreaccount1`` for Azurite. Query arguments:
``find`` and ``replace`` (unknown keys fail construction). SAS URLs are
https-only, as Gazette signs them, unless the endpoint itself is plain http
(an emulator).

The client blocks, so every call runs in a worker thread. Objects are read back
raw, with their Content-Encoding (gzip offload) reported to the reader.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
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
#: Audience of Azure Storage's OAuth tokens; an azure-ad:// service principal asks for
#: tokens of scope ``STORAGE_SCOPE``, as Gazette does.
STORAGE_AUDIENCE = "https://storage.azure.com"
STORAGE_SCOPE = STORAGE_AUDIENCE + "/.default"
#: Lifetime of a fetched user-delegation key; it is replaced once less than half remains.
DELEGATION_KEY_TTL = 2 * 3600.0

# Service error codes that mean "this principal may not use this container" rather
# than a failure of one request (Gazette classes the same ones as authorization errors).
_AUTH_ERROR_CODES = frozenset({"ContainerNotFound", "ContainerDisabled", "AccountIsDisabled"})
# The one "not found" that means the blob is absent; any other (ContainerNotFound, say)
# is an error of the store, which Gazette's Exists returns rather than reporting false.
_BLOB_NOT_FOUND = "BlobNotFound"


def _config_error(url: str, message: str) -> errors.StoreConfigError:
    return errors.StoreConfigError(message, store=url, op="construct")


class AzureStore(base.Store):
    """An ``azure://`` or ``azure-ad://`` store; see the module docstring.

    ``credential`` (``azure-ad://`` only) is the Azure AD token credential to use
    instead of a client-secret credential built from the environment (tests
    pass one that mints tokens for Azurite). ``clock`` returns Unix seconds; it
    times the user-delegation key (its start, expiry and reuse), while SAS expiry
    stays on the wall clock that readers' requests are checked against.
    """

    def __init__(
        self,
        url: str,
        config: base.StoresConfig,
        *,
        credential: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        args = base.parse_query_args(parts, _OPTIONS)
        self._url = url
        self._clock = clock
        self._rewriter = base.Rewriter(args.get("find", ""), args.get("replace", ""))
        self._ad = parts.scheme == "azure-ad"
        self._key_secret = ""
        self._tenant = ""
        client_options: dict[str, Any] = {}
        if parts.scheme == "azure":
            self._container_name, self._prefix = parts.netloc, parts.path[1:]
            if not self._container_name:
                raise _config_error(url, f"azure:// store URL has no container ({url})")
            account = os.environ.get("AZURE_ACCOUNT_NAME", "")
            self._key_secret = os.environ.get("AZURE_ACCOUNT_KEY", "")
            if not account or not self._key_secret:
                raise _config_error(
                    url, "AZURE_ACCOUNT_NAME and AZURE_ACCOUNT_KEY must be set for azure:// URLs"
                )
            cred: Any = {"account_name": account, "account_key": self._key_secret}
        elif self._ad:
            # azure-ad://<tenant>/<account>/<container>/<prefix...>
            self._tenant = parts.netloc
            segments = parts.path[1:].split("/")
            if not self._tenant:
                raise _config_error(url, f"azure-ad:// store URL has no tenant ID ({url})")
            if len(segments) < 2 or not segments[0] or not segments[1]:
                raise _config_error(
                    url,
                    "azure-ad:// URL must include storage account and container: "
                    f"azure-ad://tenant-id/storage-account/container/prefix/ (got {url})",
                )
            account, self._container_name = segments[0], segments[1]
            self._prefix = "/".join(segments[2:])
            cred = credential if credential is not None else self._client_secret_credential()
            client_options["audience"] = STORAGE_AUDIENCE
        else:
            raise _config_error(url, f"not an Azure store URL scheme: {parts.scheme}")
        self._account = account
        self._endpoint = (
            os.environ.get(ENDPOINT_ENV) or f"https://{account}.blob.core.windows.net"
        ).rstrip("/")
        # Gazette signs https-only SAS; an emulator served over plain http needs both.
        self._sas_protocol = "https" if self._endpoint.startswith("https:") else "https,http"
        try:
            self._service: Any = BlobServiceClient(
                account_url=self._endpoint, credential=cred, **client_options
            )
        except (ValueError, aexc.AzureError) as e:
            raise _config_error(url, f"constructing Azure blob client: {e}") from e
        self._container: Any = self._service.get_container_client(self._container_name)
        # The cached user-delegation key (azure-ad://) and when it expires (Unix seconds).
        # Refreshed from worker threads and read by sign_get on the event loop.
        self._udk_lock = threading.Lock()
        self._udk: Any = None
        self._udk_expiry = 0.0
        log.info(
            "constructed Azure blob client for %s (account %s, container %s, %s, endpoint %s)",
            url,
            account,
            self._container_name,
            f"AD tenant {self._tenant}" if self._ad else "shared key",
            self._endpoint,
        )

    def _client_secret_credential(self) -> Any:
        client_id = os.environ.get("AZURE_CLIENT_ID", "")
        secret = os.environ.get("AZURE_CLIENT_SECRET", "")
        if not client_id or not secret:
            raise _config_error(
                self._url,
                "AZURE_CLIENT_ID and AZURE_CLIENT_SECRET must be set for azure-ad:// URLs",
            )
        try:
            from azure import identity
        except ImportError as e:
            raise _config_error(
                self._url, f"azure-ad:// stores need azure-identity installed ({e})"
            ) from e
        # No instance discovery, as Gazette: the tenant's authority is taken as given.
        return identity.ClientSecretCredential(
            self._tenant, client_id, secret, disable_instance_discovery=True
        )

    def _blob_name(self, path: str) -> str:
        return self._rewriter.rewrite(self._prefix, path)

    def _err(self, op: str, path: str, e: BaseException) -> errors.StoreError:
        return errors.StoreError(f"Azure {op} {path}: {e}", store=self._url, op=op, path=path)

    # -- Signing ------------------------------------------------------------------------

    def _delegation_key(self) -> Any:
        """The user-delegation key, fetched anew when less than half its life remains.

        Blocks on a request when it fetches: ``_refresh_delegation_key`` runs it in a
        worker thread ahead of need, so sign_get (on the event loop) rarely does.
        """
        with self._udk_lock:
            now = self._clock()
            if self._udk is not None and self._udk_expiry > now + DELEGATION_KEY_TTL / 2:
                return self._udk
            start = datetime.datetime.fromtimestamp(now, datetime.UTC)
            expiry = start + datetime.timedelta(seconds=DELEGATION_KEY_TTL)
            self._udk = self._service.get_user_delegation_key(start, expiry)
            self._udk_expiry = now + DELEGATION_KEY_TTL
            log.info(
                "refreshed Azure user-delegation key of %s (tenant %s, expires %s)",
                self._account,
                self._tenant,
                expiry.isoformat(),
            )
            return self._udk

    async def _refresh_delegation_key(self) -> None:
        """Best effort: a failure here is left for sign_get to raise, where it belongs
        (a principal that may write blobs but not sign must still persist fragments)."""
        if not self._ad or self._udk_expiry > self._clock() + DELEGATION_KEY_TTL / 2:
            return
        try:
            await asyncio.to_thread(self._delegation_key)
        except aexc.AzureError as e:
            log.warning("fetching the user-delegation key of %s failed: %s", self._url, e)

    def sign_get(self, path: str, ttl: float) -> str:
        name = self._blob_name(path)
        signing: dict[str, Any]
        try:
            if self._ad:
                signing = {"user_delegation_key": self._delegation_key()}
            else:
                signing = {"account_key": self._key_secret}
            sas = generate_blob_sas(
                account_name=self._account,
                container_name=self._container_name,
                blob_name=name,
                permission=BlobSasPermissions(read=True),
                expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=ttl),
                protocol=self._sas_protocol,
                **signing,
            )
        except (aexc.AzureError, ValueError) as e:
            raise self._err("signget", path, e) from e
        quoted = urllib.parse.quote(name)
        return f"{self._endpoint}/{self._container_name}/{quoted}?{sas}"

    # -- Operations ---------------------------------------------------------------------

    async def exists(self, path: str) -> bool:
        blob = self._container.get_blob_client(self._blob_name(path))

        def probe() -> bool:
            # Not BlobClient.exists: it reports a missing container as a missing blob,
            # which would hide a misconfigured store from the persister and health check.
            try:
                blob.get_blob_properties()
            except aexc.ResourceNotFoundError as e:
                if getattr(e, "error_code", None) == _BLOB_NOT_FOUND:
                    return False
                raise
            return True

        try:
            return await asyncio.to_thread(probe)
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
        await self._refresh_delegation_key()

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
                break
            for item in items:
                name: str = item.name
                if name.endswith("/"):
                    continue
                rel = name[len(full) :] if name.startswith(full) else name
                yield rel, item.last_modified.timestamp()
        # Listings run every refresh interval: keep the delegation key fresh ahead of
        # the signing of the fragments just listed.
        await self._refresh_delegation_key()

    async def remove(self, path: str) -> None:
        blob = self._container.get_blob_client(self._blob_name(path))
        try:
            await asyncio.to_thread(blob.delete_blob)
        except aexc.AzureError as e:
            raise self._err("remove", path, e) from e

    def is_auth_error(self, err: BaseException) -> bool:
        # As Gazette: refusals by the service (403, or a container or account that
        # this principal cannot use). A 401 or a failure to get a token is not one:
        # the credentials themselves are wrong, and another store won't fix that.
        e: BaseException | None = err
        while e is not None:
            if isinstance(e, aexc.HttpResponseError) and (
                e.status_code == 403 or getattr(e, "error_code", None) in _AUTH_ERROR_CODES
            ):
                return True
            e = e.__cause__
        return False
