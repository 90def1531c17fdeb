"""Running the operator: an etcd client, the controller and its etcd watches, the kopf
registry, and kopf's own main loop, in one task group."""

from __future__ import annotations

import asyncio
import logging

import kopf

from gazette import keyspace
from gazette.operator import assignments, config, controller, handlers, kube, store

__all__ = ["run"]

logger = logging.getLogger(__name__)


async def run(
    cfg: config.OperatorConfig,
    *,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGINT / SIGTERM in the main thread).

    ``ready`` is set once kopf has listed the objects and indexed their claims.
    Runs standalone (no kopf peering): deploy one replica.
    """
    client = await keyspace.connect(cfg.etcd_address)
    credentials = kube.Credentials()
    api = kube.KubeClient(credentials)
    specs = store.EtcdSpecStore(client)
    views = assignments.AssignmentViews(client)
    ctl = controller.Controller(cfg.handlers.controller(), specs, api, views)
    quiet = handlers.QuietObservers()
    objects_log = logging.getLogger("kopf.objects")
    objects_log.addFilter(quiet)
    try:
        registry = handlers.build_registry(
            cfg.handlers, specs, controller=ctl, credentials=credentials
        )
        logger.info(
            "serving cluster %r into etcd %s (journals under %s, shards under %s/<consumer>)",
            cfg.handlers.cluster,
            cfg.etcd_address,
            cfg.handlers.reconcile.broker_root,
            cfg.handlers.reconcile.consumers_root,
        )
        async with asyncio.TaskGroup() as tg:
            follow = tg.create_task(ctl.run(), name="controller")
            try:
                await kopf.operator(
                    registry=registry,
                    settings=handlers.operator_settings(),
                    standalone=True,
                    clusterwide=cfg.all_namespaces,
                    namespaces=cfg.namespaces,
                    liveness_endpoint=cfg.liveness or None,
                    stop_flag=stop,
                    ready_flag=ready,
                )
            finally:
                follow.cancel()
    finally:
        objects_log.removeFilter(quiet)
        await api.close()
        await client.close()
