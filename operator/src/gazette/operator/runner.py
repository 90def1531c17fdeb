"""Running the operator: probes and metrics, leader election, then the controller with its
etcd watches and kopf's own main loop, each in a task group.

The life of one replica:

1. It logs in (the service account in a pod, else the kubeconfig), connects to
   etcd, and serves ``/readyz``, ``/healthz`` and ``/metrics``
   (:mod:`gazette.operator.health`), probing the API server and etcd for readiness.
2. It stands by until it holds the leader Lease (:mod:`gazette.operator.leader`;
   at once with ``--no-leader-elect``). A standby writes nothing.
3. It serves: kopf's handlers and the controller, renewing the Lease meanwhile.
4. It stops when told (SIGTERM, SIGINT or ``stop``): kopf and the controller stop
   first, then it releases the Lease, so the next replica takes over at once.
   Should renewing fail for the renew deadline, it raises
   :class:`~gazette.operator.leader.LeadershipLost` instead (the process exits 1, to
   be restarted as a standby), so two replicas never write at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

import kopf
import prometheus_client as prom

from gazette import keyspace
from gazette.operator import (
    assignments,
    config,
    controller,
    errors,
    handlers,
    health,
    kube,
    leader,
    metrics,
    store,
    teardown,
)

__all__ = ["run"]

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def _signals(stop: asyncio.Event) -> Iterator[None]:
    # While standing by, SIGTERM and SIGINT set `stop`; kopf installs its own once it runs.
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def _login(credentials: kube.Credentials) -> None:
    try:
        info = await asyncio.to_thread(kube.login)
    except (OSError, ValueError, KeyError, kopf.LoginError) as e:
        raise errors.KubeAPIError(f"no Kubernetes credentials: {e}") from e
    if info is None:
        raise errors.KubeAPIError(
            "no Kubernetes credentials: no service account, no $KUBECONFIG, no ~/.kube/config"
        )
    credentials.set(info)


async def run(
    cfg: config.OperatorConfig,
    *,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
    checks: health.Health | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGINT / SIGTERM in the main thread).

    ``ready`` is set once kopf has listed the objects and indexed their claims (on the
    leader). ``checks`` receives the probes' results (one is made when not given).
    Raises LeadershipLost (in an ExceptionGroup) when this replica lost the Lease.
    """
    stop = stop or asyncio.Event()
    checks = checks or health.Health(cfg.health)
    credentials = kube.Credentials()
    api = kube.KubeClient(credentials, instance=cfg.leader.identity)
    client = await keyspace.connect(cfg.etcd)
    specs = store.EtcdSpecStore(client)
    views = assignments.AssignmentViews(client)
    ctl = controller.Controller(cfg.handlers.controller(), specs, api, views, health=checks)
    collector = metrics.ControllerCollector(ctl.census, ctl.queues)
    prom.REGISTRY.register(collector)
    elector = leader.Elector(cfg.leader, api)
    checks.info["leader"] = False
    try:
        with _signals(stop):
            async with asyncio.TaskGroup() as tg:
                background = [tg.create_task(checks.serve(), name="health server")]
                try:
                    await _login(credentials)
                    root = cfg.handlers.reconcile.broker_root
                    background += [
                        tg.create_task(checks.probe("kube", api.check), name="kube probe"),
                        tg.create_task(
                            checks.probe("etcd", lambda: specs.check(root)), name="etcd probe"
                        ),
                    ]
                    if not cfg.leader.enabled or await elector.acquire(stop):
                        await _lead(cfg, specs, ctl, api, credentials, checks, elector, stop, ready)
                finally:
                    for task in background:
                        task.cancel()
    finally:
        prom.REGISTRY.unregister(collector)
        await api.close()
        await client.close()


async def _lead(
    cfg: config.OperatorConfig,
    specs: store.EtcdSpecStore,
    ctl: controller.Controller,
    api: kube.KubeClient,
    credentials: kube.Credentials,
    checks: health.Health,
    elector: leader.Elector,
    stop: asyncio.Event,
    ready: asyncio.Event | None,
) -> None:
    checks.info["leader"] = True
    metrics.leader.set(1)
    try:
        await _serve(cfg, specs, ctl, api, credentials, checks, elector, stop, ready)
    finally:
        checks.info["leader"] = False
        metrics.leader.set(0)
        # Only now that kopf and the controller stopped: the next replica may write at once.
        await elector.release()


async def _serve(
    cfg: config.OperatorConfig,
    specs: store.EtcdSpecStore,
    ctl: controller.Controller,
    api: kube.KubeClient,
    credentials: kube.Credentials,
    checks: health.Health,
    elector: leader.Elector,
    stop: asyncio.Event,
    ready: asyncio.Event | None,
) -> None:
    """kopf and the controller (and the Lease's renewals), until kopf stops; then, still
    the leader, the objects of served namespaces being deleted (:mod:`.teardown`)."""
    quiet = handlers.QuietObservers()
    objects_log = logging.getLogger("kopf.objects")
    objects_log.addFilter(quiet)
    try:
        registry = handlers.build_registry(
            cfg.handlers, specs, controller=ctl, credentials=credentials, health=checks
        )
        logger.info(
            "serving cluster %r into etcd %s (journals under %s, shards under %s/<consumer>)",
            cfg.handlers.cluster,
            cfg.etcd.address,
            cfg.handlers.reconcile.broker_root,
            cfg.handlers.reconcile.consumers_root,
        )
        async with asyncio.TaskGroup() as tg:
            background = [tg.create_task(ctl.run(), name="controller")]
            if cfg.leader.enabled:
                background.append(tg.create_task(elector.hold(), name="lease renewals"))
            try:
                await kopf.operator(
                    registry=registry,
                    settings=handlers.operator_settings(instance=cfg.leader.identity),
                    standalone=True,
                    clusterwide=cfg.all_namespaces,
                    namespaces=cfg.namespaces,
                    stop_flag=stop,
                    ready_flag=ready,
                )
                # kopf returned: told to stop (a signal, or `stop`), not failed.
                await teardown.release_terminating(
                    api,
                    specs,
                    cfg.handlers.reconcile,
                    cluster=cfg.handlers.cluster,
                    served=() if cfg.all_namespaces else cfg.namespaces,
                    home=cfg.leader.namespace,
                )
            finally:
                for task in background:
                    task.cancel()
    finally:
        objects_log.removeFilter(quiet)
