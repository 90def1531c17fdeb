"""``s3://<bucket>/<prefix>/`` fragment stores through boto3 (Gazette `broker/stores/s3/store.go`).

Query arguments (keys match case-insensitively; unknown keys fail construction):
``profile``, ``endpoint`` (an S3-compatible endpoint; forces path-style
addressing), ``region``, ``ACL``, ``storageClass``, ``SSE``, ``SSEKMSKeyId``,
``find``, ``replace``. A region must resolve (query, profile or environment).

boto3 clients block, so every call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from gazette.broker.fragment import errors, files
from gazette.broker.fragment.stores import base

log = logging.getLogger(__name__)

_OPTIONS = (
    "find",
    "replace",
    "profile",
    "endpoint",
    "ACL",
    "storageClass",
    "SSE",
    "SSEKMSKeyId",
    "region",
)
_AUTH_ERROR_CODES = frozenset({"NoSuchBucket", "AccessDenied"})
_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


class _S3Reader(base.StoreReader):
    def __init__(self, body: Any, content_encoding: str) -> None:
        self._body = body
        self.content_encoding = content_encoding

    async def read(self, size: int = files.COPY_BLOCK) -> bytes:
        data: bytes = await asyncio.to_thread(self._body.read, size)
        return data

    async def aclose(self) -> None:
        self._body.close()


class S3Store(base.Store):
    def __init__(self, url: str, config: base.StoresConfig) -> None:
        parts = urllib.parse.urlsplit(url)
        args = base.parse_query_args(parts, _OPTIONS)
        self._url = url
        self._bucket = parts.netloc
        self._prefix = parts.path[1:]  # FragmentStore validation ensures a trailing '/'.
        self._rewriter = base.Rewriter(args.get("find", ""), args.get("replace", ""))
        self._put_extra: dict[str, str] = {}
        for option, field in (
            ("ACL", "ACL"),
            ("storageClass", "StorageClass"),
            ("SSE", "ServerSideEncryption"),
            ("SSEKMSKeyId", "SSEKMSKeyId"),
        ):
            if args.get(option):
                self._put_extra[field] = args[option]

        profile = args.get("profile") or None
        endpoint = args.get("endpoint") or None
        try:
            session = boto3.session.Session(
                profile_name=profile, region_name=args.get("region") or None
            )
            credentials = session.get_credentials()
        except botocore.exceptions.BotoCoreError as e:
            raise errors.StoreConfigError(
                f"constructing S3 session: {e}", store=url, op="construct"
            ) from e
        if credentials is None:
            raise errors.StoreConfigError(
                f"fetching AWS credentials for profile {profile or ''!r}: none found",
                store=url,
                op="construct",
            )
        # Fail fast: without a region every request would fail later, endpoint or not.
        if not session.region_name:
            raise errors.StoreConfigError(
                f"missing AWS region configuration for profile {profile or ''!r}",
                store=url,
                op="construct",
            )
        client_config = botocore.config.Config(
            signature_version="s3v4",
            # Bucket-named virtual hosts don't work with an explicit endpoint.
            s3={"addressing_style": "path" if endpoint else "auto"},
            # As Gazette's SDK: no flexible-checksum trailers, which S3-compatible
            # servers don't all accept.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"mode": "standard"},
        )
        self._client: Any = session.client("s3", endpoint_url=endpoint, config=client_config)
        log.info(
            "constructed S3 client for %s (endpoint %s, profile %s, region %s, key %s)",
            url,
            endpoint,
            profile,
            session.region_name,
            credentials.access_key,
        )

    def _key(self, path: str) -> str:
        return self._rewriter.rewrite(self._prefix, path)

    def _err(self, op: str, path: str, e: BaseException) -> errors.StoreError:
        return errors.StoreError(f"S3 {op} {path}: {e}", store=self._url, op=op, path=path)

    def sign_get(self, path: str, ttl: float) -> str:
        try:
            url: str = self._client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self._bucket, "Key": self._key(path)},
                ExpiresIn=int(ttl),
            )
        except botocore.exceptions.BotoCoreError as e:
            raise self._err("signget", path, e) from e
        return url

    async def exists(self, path: str) -> bool:
        try:
            await asyncio.to_thread(
                self._client.head_object, Bucket=self._bucket, Key=self._key(path)
            )
        except botocore.exceptions.ClientError as e:
            if _status(e) == 404 or _code(e) in _NOT_FOUND_CODES:
                return False
            raise self._err("exists", path, e) from e
        except botocore.exceptions.BotoCoreError as e:
            raise self._err("exists", path, e) from e
        return True

    async def get(self, path: str) -> base.StoreReader:
        try:
            resp = await base.open_in_thread(
                functools.partial(
                    self._client.get_object, Bucket=self._bucket, Key=self._key(path)
                ),
                lambda resp: resp["Body"].close(),
            )
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._err("get", path, e) from e
        return _S3Reader(resp["Body"], resp.get("ContentEncoding", "") or "")

    async def put(
        self, path: str, content: files.ReaderAt, length: int, content_encoding: str = ""
    ) -> None:
        kwargs: dict[str, Any] = {
            "Bucket": self._bucket,
            "Key": self._key(path),
            "Body": base.SectionReader(content, length),
            "ContentLength": length,
            **self._put_extra,
        }
        if content_encoding:
            kwargs["ContentEncoding"] = content_encoding
        try:
            await asyncio.to_thread(self._client.put_object, **kwargs)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._err("put", path, e) from e

    async def list(self, prefix: str) -> AsyncIterator[tuple[str, float]]:
        full = self._key(prefix)
        pages = iter(
            self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=full)
        )
        while True:
            try:
                page = await asyncio.to_thread(next, pages, None)
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
                raise self._err("list", prefix, e) from e
            if page is None:
                return
            for obj in page.get("Contents", ()):
                key: str = obj["Key"]
                if key.endswith("/"):
                    continue  # A "directory" placeholder.
                rel = key[len(full) :] if key.startswith(full) else key
                yield rel, obj["LastModified"].timestamp()

    async def remove(self, path: str) -> None:
        try:
            await asyncio.to_thread(
                self._client.delete_object, Bucket=self._bucket, Key=self._key(path)
            )
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._err("remove", path, e) from e

    def is_auth_error(self, err: BaseException) -> bool:
        e: BaseException | None = err
        while e is not None:
            if isinstance(e, botocore.exceptions.ClientError) and (
                _code(e) in _AUTH_ERROR_CODES or _status(e) == 403
            ):
                return True
            e = e.__cause__
        return False


def _code(e: botocore.exceptions.ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _status(e: botocore.exceptions.ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
