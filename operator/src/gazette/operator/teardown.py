"""The operator's last duty when its namespace is deleted: let the namespace go.

Deleting a namespace deletes its pods first, and only once they are gone everything
else (Kubernetes' ordered namespace deletion, on by default since 1.33): the
operator's pod is stopped while its Journals and Shards still exist, not yet marked
for deletion. When the namespace controller then deletes them, those of
``deletionPolicy: Delete`` hold the finalizer ``gazette.dev/delete-spec`` for an
operator that no longer runs, and the namespace stays Terminating for good
("Some content in the namespace has finalizers remaining"), as the chart's first run
on a real node showed.

So on its way out (SIGTERM, after kopf stopped), :func:`release_terminating` does
now what it would do when they are deleted, for the objects of its cluster in every
namespace it serves that is being deleted (a namespace's deletion cannot be undone):
it removes each ``Delete`` object's spec from etcd (:func:`reconcile.delete`, with the
claims of the objects it can list), then takes its finalizer off. Within ``budget``
seconds, well inside a pod's termination grace period: its token, RBAC and
ServiceAccount still exist then, as the namespace controller waits for the pods.

When etcd cannot be reached (a bundled etcd is a pod of the same namespace, stopped
at the same time) the spec is left, with a warning naming it; the finalizer is still
removed where the namespace is the operator's own (its Lease's), since no operator
will come back to it there. In another served namespace the finalizer stays, for the
next replica.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gazette.operator import crd, errors, kube, reconcile

__all__ = ["Released", "release_terminating"]

logger = logging.getLogger(__name__)

_CONFLICT_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True, slots=True)
class Released:
    """What :func:`release_terminating` did, as ``namespace/name`` of the objects:
    ``specs_deleted`` those whose spec is out of etcd (or was never theirs to delete:
    another object owns it, or the object is paused), ``specs_left`` those whose spec
    etcd kept (it failed, or time ran out)."""

    specs_deleted: tuple[str, ...] = ()
    specs_left: tuple[str, ...] = ()
    finalizers_removed: tuple[str, ...] = ()
    finalizers_kept: tuple[str, ...] = ()


def _ours(body: Mapping[str, Any], cluster: str) -> bool:
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        crd.FINALIZER in (meta.get("finalizers") or [])
        and labels.get(crd.CLUSTER_LABEL) == cluster
        and not reconcile.is_unmanaged(body)
    )


def _terminating(namespace: Mapping[str, Any] | None) -> bool:
    return namespace is not None and bool(
        (namespace.get("metadata") or {}).get("deletionTimestamp")
    )


def _label(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


async def _namespaces(
    client: kube.NamespaceAPI,
    served: Sequence[str],
    kinds: Iterable[reconcile.SpecKind],
    cluster: str,
) -> list[str]:
    """The served namespaces to look at: those named (no patterns), else those where
    objects of ours hold the finalizer (cluster-wide, or patterns)."""
    named = [ns for ns in served if ns and not any(c in ns for c in "*?[!")]
    if named and len(named) == len(served):
        return named
    found: set[str] = set()
    for kind in kinds:
        for body in await client.list_objects(kind.crd, None):
            if _ours(body, cluster):
                found.add(str((body.get("metadata") or {}).get("namespace")))
    return sorted(found)


async def release_terminating(
    client: kube.NamespaceAPI,
    store: reconcile.SpecStore,
    config: reconcile.ReconcileConfig,
    *,
    cluster: str,
    served: Sequence[str],
    home: str,
    kinds: Sequence[reconcile.SpecKind] = (reconcile.JOURNALS, reconcile.SHARDS),
    budget: float = 20.0,
) -> Released:
    """Finish the deletion of our objects in served namespaces being deleted (see above).

    ``served`` are the operator's namespaces (empty: every namespace), ``home`` its own
    (the Lease's). All within ``budget`` seconds, of which etcd deletions get the first
    60%, so that the finalizers still come off when etcd hangs. Never raises for the API
    or etcd: it logs, and says what it did.
    """
    done = _Progress()
    try:
        async with asyncio.timeout(budget):
            await _release(
                client, store, config, cluster, served, home, kinds,
                time.monotonic() + 0.6 * budget, done,
            )  # fmt: skip
    except TimeoutError:
        logger.warning("out of time (%.0fs) releasing finalizers on the way out", budget)
    except errors.KubeAPIError as e:
        logger.warning("not releasing finalizers on the way out: %s", e)
    if done.terminating:
        logger.info(
            "namespaces %s are being deleted: specs deleted %s, left %s; finalizers removed "
            "from %s, kept on %s",
            done.terminating, done.deleted, done.left, done.removed, done.kept,
        )  # fmt: skip
    return Released(tuple(done.deleted), tuple(done.left), tuple(done.removed), tuple(done.kept))


@dataclasses.dataclass(slots=True)
class _Progress:
    terminating: list[str] = dataclasses.field(default_factory=list)
    deleted: list[str] = dataclasses.field(default_factory=list)
    left: list[str] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)
    kept: list[str] = dataclasses.field(default_factory=list)


async def _release(
    client: kube.NamespaceAPI,
    store: reconcile.SpecStore,
    config: reconcile.ReconcileConfig,
    cluster: str,
    served: Sequence[str],
    home: str,
    kinds: Sequence[reconcile.SpecKind],
    etcd_deadline: float,
    done: _Progress,
) -> None:
    for ns in await _namespaces(client, served, kinds, cluster):
        if _terminating(await client.get_namespace(ns)):
            done.terminating.append(ns)
    for ns in done.terminating:
        for kind in kinds:
            try:
                objects = await client.list_objects(kind.crd, ns)
            except errors.KubeAPIError as e:
                logger.warning("listing %s in %s, being deleted: %s", kind.crd.plural, ns, e)
                continue
            claims = _claims(objects, kind, config)
            for body in objects:
                if not _ours(body, cluster):
                    continue
                name = _label(body)
                spec_gone = await _delete_spec(body, kind, config, store, claims, etcd_deadline)
                (done.deleted if spec_gone else done.left).append(name)
                if not spec_gone and ns != home:
                    done.kept.append(name)  # The next replica deletes it.
                    continue
                if await _remove_finalizer(client, kind, body):
                    done.removed.append(name)
                else:
                    done.kept.append(name)


def _claims(
    objects: Iterable[Mapping[str, Any]],
    kind: reconcile.SpecKind,
    config: reconcile.ReconcileConfig,
) -> dict[str, list[reconcile.Claim]]:
    """``etcd key -> claims`` of these objects, as kopf's index holds them while it runs."""
    out: dict[str, list[reconcile.Claim]] = {}
    for body in objects:
        if reconcile.is_unmanaged(body):
            continue
        key = reconcile.claim_key(body, kind, config)
        if key is not None:
            out.setdefault(key, []).append(reconcile.claim_of(body))
    return out


async def _delete_spec(
    body: Mapping[str, Any],
    kind: reconcile.SpecKind,
    config: reconcile.ReconcileConfig,
    store: reconcile.SpecStore,
    claims: Mapping[str, list[reconcile.Claim]],
    deadline: float,
) -> bool:
    """Whether the object's spec is out of etcd (or was never its to delete)."""
    if (body.get("spec") or {}).get("deletionPolicy") != "Delete":
        return True  # The finalizer outlived a policy changed to Retain: nothing to delete.
    key = reconcile.claim_key(body, kind, config)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        logger.warning("%s: out of time, its spec stays in etcd", _label(body))
        return False
    try:
        async with asyncio.timeout(remaining):
            message = await reconcile.delete(
                body,
                kind,
                config,
                store,
                claims.get(key, []) if key else [],
                claimed=lambda other: claims.get(other, []),
            )
    except (errors.SpecStoreError, TimeoutError) as e:
        logger.warning("%s: its spec stays in etcd (%s)", _label(body), e or "timed out")
        return False
    logger.info("%s, being deleted with its namespace: %s", _label(body), message)
    return True


async def _remove_finalizer(
    client: kube.NamespaceAPI, kind: reconcile.SpecKind, body: Mapping[str, Any]
) -> bool:
    meta = body.get("metadata") or {}
    current: Mapping[str, Any] | None = body
    for _ in range(_CONFLICT_ATTEMPTS):
        if current is None or crd.FINALIZER not in (
            (current.get("metadata") or {}).get("finalizers") or []
        ):
            return True
        try:
            result = await client.remove_finalizer(kind.crd, current, crd.FINALIZER)
        except errors.KubeAPIError as e:
            logger.warning("%s: its finalizer stays (%s)", _label(body), e)
            return False
        if result is not kube.PatchResult.CONFLICT:
            return True
        try:
            fresh = await client.list_objects(kind.crd, str(meta.get("namespace")))
        except errors.KubeAPIError as e:
            logger.warning("%s: its finalizer stays (%s)", _label(body), e)
            return False
        uid = meta.get("uid")
        current = next((o for o in fresh if (o.get("metadata") or {}).get("uid") == uid), None)
    logger.warning("%s: its finalizer stays (kept changing)", _label(body))
    return False
