"""The operator's way out when a namespace it serves is being deleted (gazette.operator.teardown).

Against MemoryKube and MemorySpecStore: which objects lose their finalizer, which
specs leave etcd, and what stays when etcd or the API server fails. The real API
server and namespace controller are e2e/test_helm_quickstart.py's and
e2e/test_helm_kwok.py's.
"""

from __future__ import annotations

import copy
from typing import Any

from operator_objects import JOURNAL_SPEC, journal

from gazette.operator import crd, handlers, reconcile, teardown, testing

CONFIG = reconcile.ReconcileConfig(broker_root="/g/cluster", consumers_root="/g/consumers")
HOME = "gazette"


def _journal(name: str, namespace: str = HOME, **spec: Any) -> dict[str, Any]:
    body = journal(name=name, namespace=namespace, uid=f"uid-{namespace}-{name}")
    body["kind"] = "Journal"
    body["spec"] = {**copy.deepcopy(JOURNAL_SPEC), "name": f"examples/{name}", **spec}
    if body["spec"].get("deletionPolicy") == "Delete":
        body["metadata"]["finalizers"] = [crd.FINALIZER]
    return body


async def _world(
    *bodies: dict[str, Any], terminating: tuple[str, ...] = (HOME,)
) -> tuple[testing.MemoryKube, testing.MemorySpecStore]:
    api = testing.MemoryKube()
    store = testing.MemorySpecStore()
    for body in bodies:
        stored = api.add(body)
        # Its spec in etcd, as the operator wrote it when the object was applied.
        await handlers.on_apply(
            stored, {}, reconcile.JOURNALS, handlers.HandlerConfig(CONFIG), store
        )
        ns = stored["metadata"]["namespace"]
        api.namespaces.setdefault(ns, {"metadata": {"name": ns}})
    for ns in terminating:
        api.namespaces[ns]["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return api, store


def _finalizers(api: testing.MemoryKube, namespace: str, name: str) -> list[str]:
    return list(api.objects[(namespace, name)]["metadata"].get("finalizers") or [])


def _names(store: testing.MemorySpecStore) -> set[str]:
    return {key.removeprefix("/g/cluster/items/") for key in store.values}


async def _release(api: testing.MemoryKube, store: testing.MemorySpecStore, **kwargs: Any) -> Any:
    args: dict[str, Any] = {"cluster": "default", "served": (HOME,), "home": HOME, **kwargs}
    return await teardown.release_terminating(api, store, CONFIG, **args)


async def test_a_namespace_being_deleted_loses_the_finalizers_and_the_delete_specs() -> None:
    api, store = await _world(_journal("scratch", deletionPolicy="Delete"), _journal("logs"))
    assert _names(store) == {"examples/scratch", "examples/logs"}
    done = await _release(api, store)
    assert _finalizers(api, HOME, "scratch") == []
    assert _names(store) == {"examples/logs"}  # Retain: the spec stays.
    assert done.specs_deleted == ("gazette/scratch",)
    assert done.finalizers_removed == ("gazette/scratch",)
    assert done.specs_left == done.finalizers_kept == ()


async def test_nothing_happens_while_the_namespace_lives() -> None:
    api, store = await _world(_journal("scratch", deletionPolicy="Delete"), terminating=())
    done = await _release(api, store)
    assert _finalizers(api, HOME, "scratch") == [crd.FINALIZER]
    assert _names(store) == {"examples/scratch"}
    assert done == teardown.Released()


async def test_other_clusters_and_unmanaged_objects_are_left_alone() -> None:
    other = _journal("theirs", deletionPolicy="Delete")
    other["metadata"]["labels"][crd.CLUSTER_LABEL] = "another"
    unmanaged = _journal("hands-off", deletionPolicy="Delete")
    unmanaged["metadata"]["annotations"][crd.UNMANAGED_ANNOTATION] = "true"
    api, store = await _world(other, unmanaged)
    await _release(api, store)
    assert _finalizers(api, HOME, "theirs") == [crd.FINALIZER]
    assert _finalizers(api, HOME, "hands-off") == [crd.FINALIZER]


async def test_etcd_down_at_home_leaves_the_spec_but_lets_the_namespace_go() -> None:
    api, store = await _world(_journal("scratch", deletionPolicy="Delete"))
    store.fail = True
    done = await _release(api, store)
    # No operator comes back to a namespace being deleted with it: the finalizer goes.
    assert _finalizers(api, HOME, "scratch") == []
    assert done.specs_left == ("gazette/scratch",)
    store.fail = False
    assert _names(store) == {"examples/scratch"}


async def test_etcd_down_elsewhere_keeps_the_finalizer_for_the_next_replica() -> None:
    api, store = await _world(
        _journal("scratch", namespace="apps", deletionPolicy="Delete"), terminating=("apps",)
    )
    store.fail = True
    done = await _release(api, store, served=(HOME, "apps"))
    assert _finalizers(api, "apps", "scratch") == [crd.FINALIZER]
    assert done.finalizers_kept == ("apps/scratch",)


async def test_an_object_another_one_owns_keeps_its_spec() -> None:
    # Two objects name one journal: the older (Retain) owns it, the younger's
    # deletion must leave it in etcd.
    older = _journal("first")
    younger = _journal("second", deletionPolicy="Delete")
    younger["spec"]["name"] = older["spec"]["name"]
    younger["metadata"]["creationTimestamp"] = "2030-01-01T00:00:09Z"
    api, store = await _world(older, younger)
    done = await _release(api, store)
    assert _names(store) == {"examples/first"}
    assert _finalizers(api, HOME, "second") == []
    assert done.specs_deleted == ("gazette/second",)  # Nothing of its own to delete.


async def test_a_conflict_is_read_again() -> None:
    api, store = await _world(_journal("scratch", deletionPolicy="Delete"))
    real = api.remove_finalizer
    calls = []

    async def changed_once(kind: crd.Kind, body: dict[str, Any], finalizer: str) -> Any:
        calls.append(body["metadata"]["resourceVersion"])
        if len(calls) == 1:  # Someone wrote the object since it was listed.
            api.add(api.objects[(HOME, "scratch")])
        return await real(kind, body, finalizer)

    api.remove_finalizer = changed_once  # type: ignore[method-assign]
    done = await _release(api, store)
    assert len(calls) == 2 and calls[0] != calls[1]
    assert _finalizers(api, HOME, "scratch") == []
    assert done.finalizers_removed == ("gazette/scratch",)


async def test_the_api_server_failing_changes_nothing_and_raises_nothing() -> None:
    api, store = await _world(_journal("scratch", deletionPolicy="Delete"))
    api.fail = True
    assert await _release(api, store) == teardown.Released()
    api.fail = False
    assert _finalizers(api, HOME, "scratch") == [crd.FINALIZER]
    assert _names(store) == {"examples/scratch"}


async def test_cluster_wide_finds_the_namespaces_of_its_finalizers() -> None:
    api, store = await _world(
        _journal("a", namespace="one", deletionPolicy="Delete"),
        _journal("b", namespace="two", deletionPolicy="Delete"),
        terminating=("two",),
    )
    await _release(api, store, served=(), home="ops")
    assert _finalizers(api, "one", "a") == [crd.FINALIZER]
    assert _finalizers(api, "two", "b") == []
    assert _names(store) == {"examples/a"}
