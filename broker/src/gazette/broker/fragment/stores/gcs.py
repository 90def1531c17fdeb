"""``gs://<bucket>/<prefix>/`` fragment stores through google-cloud-storage (Gazette
`broker/stores/gcs/store.go`).

Credentials are Google's application defaults, and as in Gazette they must be
a service-account key (``GOOGLE_APPLICATION_CREDENTIALS``): signed GET URLs are
made with it (V4; V2 past V4's one-week limit), and readers need them, so a
store without one fails construction. Query arguments: ``find`` and
``replace`` only (unknown keys fail construction), as Gazette's.

``STORAGE_EMULATOR_HOST`` (Google's own variable, e.g. ``http://127.0.0.1:4443``)
points the store at an emulator such as fake-gcs-server, with anonymous
credentials; a key file named by ``GOOGLE_APPLICATION_CREDENTIALS`` then only
signs URLs (which name the emulator too), and without one sign_get fails.

The client blocks, so every call runs in a worker thread. Objects written with
a Content-Encoding (gzip offload) are read back raw: GCS would otherwise
decompress them on the way out.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import google.auth
from google.api_core import exceptions as gexc
from google.auth import credentials as gcredentials
from google.auth import exceptions as gauth_exceptions
from google.cloud import storage
from google.oauth2 import service_account

from gazette.broker.fragment import errors, files
from gazette.broker.fragment.stores import base

log = logging.getLogger(__name__)

_OPTIONS = ("find", "replace")
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
_SCOPE_FULL_CONTROL = "https://www.googleapis.com/auth/devstorage.full_control"


# V4 signatures may not outlive a week; Gazette signs V2 (no such limit), which
# longer ListFragments signatureTTLs still get.
_V4_MAX_TTL = 7 * 24 * 3600


class GCSStore(base.Store):
    """A ``gs://<bucket>/<prefix>/`` store; see the module docstring."""

    def __init__(self, url: str, config: base.StoresConfig) -> None:
        parts = urllib.parse.urlsplit(url)
        args = base.parse_query_args(parts, _OPTIONS)
        self._url = url
        self._bucket_name = parts.netloc
        if not self._bucket_name:
            raise errors.StoreConfigError(
                f"gs:// store URL has no bucket ({url})", store=url, op="construct"
            )
        # Omit the leading slash: FragmentStore validation ensures the path ends in '/'.
        self._prefix = parts.path[1:]
        self._rewriter = base.Rewriter(args.get("find", ""), args.get("replace", ""))
        self._emulator = os.environ.get(EMULATOR_ENV, "")
        # The service-account key that signs GET URLs (None: sign_get fails).
        self._signer: service_account.Credentials | None = None
        try:
            if self._emulator:
                client = storage.Client(
                    project="gazette-emulated",
                    credentials=gcredentials.AnonymousCredentials(),  # type: ignore[no-untyped-call]
                    client_options={"api_endpoint": self._emulator},
                )
                key_file = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
                if key_file:
                    self._signer = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                        key_file
                    )
            else:
                creds, project = google.auth.default(scopes=[_SCOPE_FULL_CONTROL])
                # As Gazette: without a key no URL can be signed, and readers need them.
                if not isinstance(creds, service_account.Credentials):
                    raise ValueError(
                        "use of GCS requires application default credentials that are "
                        f"a service-account private key (found {type(creds).__name__})"
                    )
                self._signer = creds
                client = storage.Client(project=project, credentials=creds)
        except (gauth_exceptions.GoogleAuthError, OSError, ValueError) as e:
            raise errors.StoreConfigError(
                f"constructing GCS client: {e}", store=url, op="construct"
            ) from e
        self._client: Any = client
        self._bucket: Any = client.bucket(self._bucket_name)
        log.info(
            "constructed GCS client for %s (signer %s, emulator %s)",
            url,
            getattr(self._signer, "service_account_email", None),
            self._emulator or "none",
        )

    def _key(self, path: str) -> str:
        return self._rewriter.rewrite(self._prefix, path)

    def _err(self, op: str, path: str, e: BaseException) -> errors.StoreError:
        return errors.StoreError(f"GCS {op} {path}: {e}", store=self._url, op=op, path=path)

    def sign_get(self, path: str, ttl: float) -> str:
        if self._signer is None:
            raise self._err(
                "signget", path, RuntimeError("no service-account key to sign URLs with")
            )
        kwargs: dict[str, Any] = {}
        if self._emulator:
            kwargs["api_access_endpoint"] = self._emulator
        seconds = max(1, int(ttl))
        try:
            url: str = self._bucket.blob(self._key(path)).generate_signed_url(
                version="v4" if seconds <= _V4_MAX_TTL else "v2",
                expiration=datetime.timedelta(seconds=seconds),
                method="GET",
                credentials=self._signer,
                **kwargs,
            )
        except (gexc.GoogleAPIError, ValueError) as e:
            raise self._err("signget", path, e) from e
        return url

    async def exists(self, path: str) -> bool:
        try:
            return bool(await asyncio.to_thread(self._bucket.blob(self._key(path)).exists))
        except gexc.GoogleAPIError as e:
            raise self._err("exists", path, e) from e

    async def get(self, path: str) -> base.StoreReader:
        def fetch() -> tuple[bytes, str]:
            blob = self._bucket.get_blob(self._key(path))
            if blob is None:
                raise gexc.NotFound(f"no object {self._key(path)}")  # type: ignore[no-untyped-call]
            data: bytes = blob.download_as_bytes(raw_download=True)
            return data, blob.content_encoding or ""

        try:
            data, encoding = await asyncio.to_thread(fetch)
        except gexc.GoogleAPIError as e:
            raise self._err("get", path, e) from e
        return base.BytesReader(data, encoding)

    async def put(
        self, path: str, content: files.ReaderAt, length: int, content_encoding: str = ""
    ) -> None:
        def upload() -> None:
            blob = self._bucket.blob(self._key(path))
            if content_encoding:
                blob.content_encoding = content_encoding
            blob.upload_from_file(base.SectionReader(content, length), size=length)

        try:
            await asyncio.to_thread(upload)
        except gexc.GoogleAPIError as e:
            raise self._err("put", path, e) from e

    async def list(self, prefix: str) -> AsyncIterator[tuple[str, float]]:
        full = self._key(prefix)
        pages = iter(self._client.list_blobs(self._bucket_name, prefix=full).pages)
        while True:
            try:
                page = await asyncio.to_thread(next, pages, None)
                blobs = await asyncio.to_thread(list, page) if page is not None else None
            except gexc.GoogleAPIError as e:
                raise self._err("list", prefix, e) from e
            if blobs is None:
                return
            for blob in blobs:
                name: str = blob.name
                if name.endswith("/"):
                    continue
                rel = name[len(full) :] if name.startswith(full) else name
                updated = blob.updated
                yield rel, updated.timestamp() if updated is not None else 0.0

    async def remove(self, path: str) -> None:
        try:
            await asyncio.to_thread(self._bucket.blob(self._key(path)).delete)
        except gexc.GoogleAPIError as e:
            raise self._err("remove", path, e) from e

    def is_auth_error(self, err: BaseException) -> bool:
        e: BaseException | None = err
        while e is not None:
            if isinstance(e, gexc.Forbidden | gexc.Unauthorized):
                return True
            # A bucket that does not exist (Go: ErrBucketNotExist, a bucket-level 404):
            # a 404 of a request not naming an object (an upload or listing of the bucket).
            if isinstance(e, gexc.NotFound) and ("bucket" in str(e).lower() or "/o/" not in str(e)):
                return True
            e = e.__cause__
        return False
