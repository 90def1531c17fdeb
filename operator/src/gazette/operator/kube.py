"""The operator's own few calls to the API server: patch a status, post an Event, hold a Lease.

kopf writes what its handlers return. What happens outside them, driven by the
etcd watches of :mod:`gazette.operator.controller` (a spec put back after an
out-of-band edit, a name taken over when its owner goes, a Shard's replicas),
is written here, with the credentials kopf logged in with
(:class:`Credentials`, filled by the login handler, or by :func:`login` before kopf
runs: a standby replica runs no kopf) over one aiohttp session. So are the
leader election's reads and writes of its ``coordination.k8s.io`` Lease
(:class:`LeaseAPI`, :mod:`gazette.operator.leader`) and the readiness probe's
``GET /version`` (:meth:`KubeClient.check`).

Status patches are JSON merge patches of the status subresource carrying the
``metadata.resourceVersion`` they were computed from, so a patch made from a stale
object fails with :attr:`PatchResult.CONFLICT` instead of undoing a newer write;
the caller recomputes from the fresher object.

:class:`KubeAPI` is the seam; :class:`gazette.operator.testing.MemoryKube` stands in
for it in tests::

    client = kube.KubeClient(credentials)
    result = await client.patch_status(crd.JOURNAL, "ns", "logs", {"conditions": [...]}, "42")
    await client.post_event(body, events.Event("Normal", "Applied", "wrote ..."))
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import socket
from collections.abc import Mapping
from typing import Any, Protocol

import aiohttp
import kopf

from gazette.operator import crd, errors, events

__all__ = [
    "COMPONENT",
    "Credentials",
    "KubeAPI",
    "KubeClient",
    "LeaseAPI",
    "NamespaceAPI",
    "PatchResult",
    "login",
]

logger = logging.getLogger(__name__)

COMPONENT = "gazette-operator"
"""The reporting component of the operator's Events (``kubectl events`` shows it)."""
_MAX_MESSAGE = 1024  # What events.k8s.io allows of a note; longer ones are cut.


class PatchResult(enum.Enum):
    """How a status patch went."""

    OK = "ok"
    CONFLICT = "conflict"
    """The object changed since the patch was computed (409): recompute from the newer one."""
    GONE = "gone"
    """The object is no longer there (404)."""


class KubeAPI(Protocol):
    """What the controller asks of the API server."""

    async def patch_status(
        self,
        kind: crd.Kind,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None,
    ) -> PatchResult:
        """Merge ``status`` into the object's status, if it is still at ``resource_version``.

        Raises KubeAPIError when the API server can't be reached or refuses otherwise.
        """
        ...

    async def post_event(self, body: Mapping[str, Any], event: events.Event) -> None:
        """Post ``event`` about object ``body`` (best effort: failures are logged)."""
        ...


class LeaseAPI(Protocol):
    """Reads and writes of ``coordination.k8s.io/v1`` Leases (the leader election's)."""

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease, or None when there is none. Raises KubeAPIError."""
        ...

    async def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create ``lease``; None when one of that name exists already. Raises KubeAPIError."""
        ...

    async def replace_lease(
        self, namespace: str, name: str, lease: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Replace the Lease if it is still at ``lease``'s resourceVersion; None if it is not.

        Raises KubeAPIError.
        """
        ...


class NamespaceAPI(Protocol):
    """What :mod:`gazette.operator.teardown` needs: whether a namespace is being deleted,
    the objects of a kind, and a finalizer taken off one."""

    async def get_namespace(self, name: str) -> dict[str, Any] | None:
        """The Namespace object, or None when it is gone."""
        ...

    async def list_objects(self, kind: crd.Kind, namespace: str | None) -> list[dict[str, Any]]:
        """Every object of ``kind`` in ``namespace`` (None: in every namespace)."""
        ...

    async def remove_finalizer(
        self, kind: crd.Kind, body: Mapping[str, Any], finalizer: str
    ) -> PatchResult:
        """``finalizer`` off the object, as of ``body``'s resourceVersion (else CONFLICT)."""
        ...


def login(settings: kopf.OperatorSettings | None = None) -> kopf.ConnectionInfo | None:
    """In a pod: the service account. Elsewhere: $KUBECONFIG or ~/.kube/config (as kopf's).

    Raises ``kopf.LoginError`` (or OSError) when the kubeconfig is unusable."""
    settings = settings or kopf.OperatorSettings()
    return kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(
        settings=settings
    )


class Credentials:
    """The latest credentials kopf logged in with: its login handler stores them here."""

    def __init__(self) -> None:
        self.info: kopf.ConnectionInfo | None = None
        self._changed = asyncio.Event()

    def set(self, info: kopf.ConnectionInfo | None) -> None:
        if info is not None:
            self.info = info
            self._changed.set()

    async def wait(self) -> kopf.ConnectionInfo:
        """The credentials, once there are some."""
        while self.info is None:
            await self._changed.wait()
        return self.info


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


class KubeClient:
    """:class:`KubeAPI` over aiohttp, with the credentials kopf logged in with.

    One session per set of credentials (re-made when kopf logs in again, e.g. after a
    rotated token); ``timeout`` bounds each request; ``instance`` is the Events'
    ``reportingInstance`` (the leader election's identity; default the host name).
    Call :meth:`close` when done.
    """

    def __init__(
        self, credentials: Credentials, *, timeout: float = 30.0, instance: str = ""
    ) -> None:
        self._credentials = credentials
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._session_info: kopf.ConnectionInfo | None = None
        self._instance = instance or socket.gethostname()

    async def _session_for(self) -> tuple[aiohttp.ClientSession, str]:
        info = await self._credentials.wait()
        if self._session is None or self._session_info is not info:
            if self._session is not None:
                await self._session.close()
            # as_http_headers() carries the token or the basic auth, whichever there is.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=info.as_ssl_context()),
                headers={**info.as_http_headers(), "User-Agent": COMPONENT},
                timeout=self._timeout,
            )
            self._session_info = info
        return self._session, info.server.rstrip("/")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def patch_status(
        self,
        kind: crd.Kind,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None,
    ) -> PatchResult:
        session, server = await self._session_for()
        url = (
            f"{server}/apis/{crd.GROUP}/{crd.VERSION}/namespaces/{namespace}/"
            f"{kind.plural}/{name}/status"
        )
        patch: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        try:
            async with session.patch(
                url, json=patch, headers={"Content-Type": "application/merge-patch+json"}
            ) as resp:
                if resp.status == 409:
                    return PatchResult.CONFLICT
                if resp.status == 404:
                    return PatchResult.GONE
                if resp.status >= 300:
                    text = await resp.text()
                    raise errors.KubeAPIError(
                        f"PATCH {kind.plural}/{namespace}/{name}/status: {resp.status} {text[:500]}",
                        status=resp.status,
                    )
        except (aiohttp.ClientError, TimeoutError) as e:
            raise errors.KubeAPIError(
                f"PATCH {kind.plural}/{namespace}/{name}/status: {e or type(e).__name__}"
            ) from e
        return PatchResult.OK

    async def post_event(self, body: Mapping[str, Any], event: events.Event) -> None:
        meta = body.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        now = _now()
        message = event.message
        if len(message) > _MAX_MESSAGE:
            message = message[: _MAX_MESSAGE - 3] + "..."
        payload = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": body.get("apiVersion"),
                "kind": body.get("kind"),
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": event.type,
            "reason": event.reason,
            "message": message,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": now,
            "action": event.reason,
        }
        try:
            session, server = await self._session_for()
            async with session.post(
                f"{server}/api/v1/namespaces/{namespace}/events", json=payload
            ) as resp:
                if resp.status >= 300:
                    text = await resp.text()
                    logger.warning(
                        "posting event %s about %s/%s: %s %s",
                        event.reason,
                        namespace,
                        meta.get("name"),
                        resp.status,
                        text[:300],
                    )
        except (aiohttp.ClientError, TimeoutError) as e:
            # Events are informative: the status says the same, so one lost is not retried.
            logger.warning(
                "posting event %s about %s/%s: %s", event.reason, namespace, meta.get("name"), e
            )

    # --- Leases and probes ------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str | None = None,
    ) -> tuple[int, Any]:
        """(status, decoded JSON or None) of one request; raises KubeAPIError on transport
        failures and on statuses other than 2xx, 404 and 409."""
        session, server = await self._session_for()
        headers = {"Content-Type": content_type} if content_type else None
        try:
            async with session.request(
                method,
                f"{server}{path}",
                json=None if body is None else dict(body),
                headers=headers,
            ) as resp:
                if resp.status in (404, 409):
                    return resp.status, None
                if resp.status >= 300:
                    text = await resp.text()
                    raise errors.KubeAPIError(
                        f"{method} {path}: {resp.status} {text[:500]}", status=resp.status
                    )
                return resp.status, await resp.json()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise errors.KubeAPIError(f"{method} {path}: {e or type(e).__name__}") from e

    @staticmethod
    def _leases(namespace: str) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        _, got = await self._call("GET", f"{self._leases(namespace)}/{name}")
        return dict(got) if got is not None else None

    async def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> dict[str, Any] | None:
        _, got = await self._call("POST", self._leases(namespace), lease)
        return dict(got) if got is not None else None

    async def replace_lease(
        self, namespace: str, name: str, lease: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        # PUT carries metadata.resourceVersion: the API server refuses it (409) when the
        # Lease changed since it was read, so of two replicas racing, one wins.
        _, got = await self._call("PUT", f"{self._leases(namespace)}/{name}", lease)
        return dict(got) if got is not None else None

    # --- Namespaces and finalizers (gazette.operator.teardown) -------------------

    async def get_namespace(self, name: str) -> dict[str, Any] | None:
        """The Namespace object, or None when it is gone."""
        _, got = await self._call("GET", f"/api/v1/namespaces/{name}")
        return dict(got) if got is not None else None

    async def list_objects(self, kind: crd.Kind, namespace: str | None) -> list[dict[str, Any]]:
        """Every object of ``kind`` in ``namespace`` (None: in every namespace)."""
        where = f"namespaces/{namespace}/" if namespace else ""
        _, got = await self._call("GET", f"/apis/{crd.GROUP}/{crd.VERSION}/{where}{kind.plural}")
        return [dict(item) for item in (got or {}).get("items", [])]

    async def remove_finalizer(
        self, kind: crd.Kind, body: Mapping[str, Any], finalizer: str
    ) -> PatchResult:
        """Take ``finalizer`` off the object, as of the ``resourceVersion`` of ``body``:
        CONFLICT when it changed since (re-read it and try again), GONE when it is gone."""
        meta = body.get("metadata") or {}
        rest = [f for f in meta.get("finalizers") or [] if f != finalizer]
        path = (
            f"/apis/{crd.GROUP}/{crd.VERSION}/namespaces/{meta.get('namespace')}/"
            f"{kind.plural}/{meta.get('name')}"
        )
        patch = {"metadata": {"finalizers": rest, "resourceVersion": meta.get("resourceVersion")}}
        status, _ = await self._call(
            "PATCH", path, patch, content_type="application/merge-patch+json"
        )
        if status == 409:
            return PatchResult.CONFLICT
        if status == 404:
            return PatchResult.GONE
        return PatchResult.OK

    async def check(self) -> None:
        """``GET /version`` with the operator's credentials: raises KubeAPIError unless the
        API server answers and accepts them (a rejected token is a 401)."""
        await self._call("GET", "/version")
