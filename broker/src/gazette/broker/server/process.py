"""A broker process: ``python -m gazette.broker`` (Gazette ``cmd/gazette/main.go``).

Life of a broker:

1. Create ``--broker.spool-dir`` if missing (exiting at once if that fails),
   and bind the gRPC port (so that a port of 0 is known before announcing).
2. Grant an etcd lease and announce ``<root>/members/<zone>#<suffix>`` with its
   BrokerSpec (endpoint, journal limit); load the KeySpace at the
   announcement's revision and watch it; run the allocator
   (:class:`gazette.allocator.Session`).
3. Serve: local replicas (:class:`~gazette.broker.server.service.Service`),
   the persister, store health checks, the gRPC service behind the native
   front door (:func:`gazette.broker.protocol.dial.listen_native`), and, on
   that port (what isn't gRPC) and on the HTTP port, the journal HTTP gateway
   (:mod:`gazette.broker.http_gateway`:
   ``GET``/``HEAD``/``PUT /<journal>``, proxied to our own gRPC endpoint with
   the request's ``Authorization`` header) with the diagnostics
   ``/debug/ready`` and ``/debug/metrics``. With ``--broker.auth-keys`` every
   RPC needs a token (:mod:`gazette.broker.protocol.auth`); keys from
   ``--broker.auth-keys-file`` are reloaded when it changes and on SIGHUP
   (:mod:`gazette.broker.server.keyreload`). With ``--broker.server-cert-file``
   both ports serve TLS with that certificate, the announced endpoint is
   ``https://``, and peers (and the gateway's own channel) are dialed with the
   ``--broker.peer-*`` files (:func:`tls_configs`).
4. On SIGTERM or SIGINT: mark the member exiting; the allocator moves every
   journal away, for at most ``--broker.drain-timeout`` (and not at all when
   every broker is exiting: there is nowhere to go). Then local replicas stop
   (rolling their spools), the gRPC server stops gracefully, the persister
   stores every completed spool (retrying until it can), and only then is the
   lease revoked, which hands journals still assigned here to other brokers.
   The process exits 0.

While etcd is unreachable the broker keeps serving on its current routes for
as long as its lease is surely valid; at the first failed keep-alive it
persists everything it holds, and past the lease it serves no writes
(:class:`~gazette.broker.server.errors.LeaseInDoubt`) until etcd answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import json
import logging
import os
import resource
import signal
import socket
import sys
from collections.abc import Coroutine
from typing import Any

from gazette import allocator, keyspace
from gazette.allocator import txn
from gazette.broker import http_gateway, journals
from gazette.broker import protocol as pb
from gazette.broker.fragment import index, persister, recovery, spool, stores
from gazette.broker.protocol import dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.broker.server import (
    api,
    config,
    fences,
    isolation,
    keyreload,
    metrics,
    native,
    service,
    topology,
)

log = logging.getLogger(__name__)

GRACEFUL_STOP_TIMEOUT = 15.0

_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}


class _JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["err"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(cfg: config.LogConfig) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if cfg.format == "json":
        handler.setFormatter(_JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS.get(cfg.level.lower(), logging.WARNING))


def bind_host(host: str) -> str:
    """Listen on the advertised host when it is an IP address, else everywhere."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return "[::]"
    return f"[{host}]" if ":" in host else host


def broker_spec(cfg: config.BrokerConfig, endpoint: str, *, exiting: bool = False) -> pb.BrokerSpec:
    spec = pb.BrokerSpec(journal_limit=cfg.limit, exiting=exiting)
    spec.process_spec.id.zone = cfg.zone
    spec.process_spec.id.suffix = cfg.id
    spec.process_spec.endpoint = endpoint
    return spec


def ensure_spool_dir(directory: str) -> None:
    """Create ``--broker.spool-dir`` (and its parents) unless it exists.

    Raises SystemExit with a one-line reason when it can't be created or
    written: spooling would otherwise fail on every append.
    """
    if not directory:
        return  # The system temporary directory.
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise SystemExit(
            f"--broker.spool-dir {directory}: cannot create it: {e.strerror or e}"
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise SystemExit(f"--broker.spool-dir {directory}: not writable")


@dataclasses.dataclass(frozen=True)
class Serving:
    """Where a started broker serves (what ``serve`` tells its ``started`` future)."""

    endpoint: str
    http_port: int  # -1 when the HTTP port is off.


async def serve(
    cfg: config.Config,
    *,
    stop: asyncio.Event | None = None,
    started: asyncio.Future[Serving] | None = None,
) -> None:
    """Run a broker until ``stop`` is set, then exit gracefully.

    Without a ``stop`` event of the caller's, SIGTERM and SIGINT stop it. Once it
    serves, ``started`` (if given) gets its :class:`Serving` endpoints: several
    brokers can so run in one event loop (``gazette.broker.testing``).
    """
    ensure_spool_dir(cfg.broker.spool_dir)
    loop = asyncio.get_running_loop()
    signals_are_ours = stop is None
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)

    bcfg = cfg.broker
    keys = keyreload.server_auth(bcfg.auth_keys, bcfg.auth_keys_file, "--broker.auth-keys-file")
    reloader = keyreload.reloader_of(keys, bcfg.auth_keys_file)
    if signals_are_ours:
        keyreload.handle_sighup(loop, reloader, "--broker.auth-keys")
    listen_cfg, peer_tls = tls_configs(bcfg)
    ensure_open_files(bcfg.max_connections, 1 if bcfg.http_port < 0 else 2)
    server = dial.server(listen_cfg)
    host = bcfg.host or socket.gethostname()
    try:
        front = dial.listen_native(server, bind_host(host), bcfg.port, listen_cfg)
    except OSError as e:
        raise SystemExit(f"--broker.port {bcfg.port}: {e}") from None
    except ImportError as e:
        raise SystemExit(str(e)) from None
    port = front.port
    port_metrics = metrics.ports.add(front.stats)
    if keys is not None:
        # Callers without a token of our keys are refused before their messages
        # are read (and so never make the broker hold them).
        keys.watch(front.set_auth)
    endpoint = config.endpoint_of(host, port, tls=bcfg.tls)

    # Pinged as Gazette pings etcd: a connection into a partition is dropped within the lease.
    client = await keyspace.connect(cfg.etcd, keepalive=cfg.etcd.lease_s / 4)
    root = cfg.etcd.prefix
    decoder = allocator.key_value_decoder(root, journals.JournalDecoder(pb.validate))
    ks = keyspace.KeySpace(root, decoder, keyspace.KeySpaceConfig(watch_delay=bcfg.watch_delay_s))
    lease_ttl = max(2, round(cfg.etcd.lease_s))
    session = allocator.Session(
        client,
        ks,
        allocator.member_key(root, bcfg.zone, bcfg.id),
        broker_spec(bcfg, endpoint).SerializeToString(),
        broker_spec(bcfg, endpoint, exiting=True).SerializeToString(),
        config=allocator.SessionConfig(
            lease_ttl=lease_ttl,
            # Retrying a taken member key faster than its lease could expire is pointless.
            announce_retry=min(10.0, max(1.0, lease_ttl / 4)),
            watch_keyspace=False,
        ),
        is_consistent=journals.journal_is_consistent,
    )
    registry = stores.StoreRegistry(
        stores.StoresConfig(
            file_root=bcfg.file_root or stores.UNCONFIGURED_FILE_ROOT, file_only=bcfg.file_only
        )
    )
    ready = False
    native_host: native.NativeHost | None = None
    http_front: dial.NativePort | None = None
    http_metrics = 0
    # The journal gateway (its RPCs go to our own gRPC endpoint, so they route and
    # proxy like any client's) and /debug/: on the gRPC port, as Gazette serves
    # them (the front door hands it what isn't gRPC), and on the HTTP port.
    gateway_config = http_gateway.ServerConfig(
        body_timeout=bcfg.http_body_timeout_s,
        # One certificate for both ports, as Gazette serves both on one.
        listen_config=listen_cfg,
        dial_config=dial.DialConfig(tls=peer_tls),
    )
    debug_auth = keys if bcfg.debug_token_required else None
    debug = http_gateway.Server(
        lambda: ready, grpc_endpoint=endpoint, config=gateway_config, debug_auth=debug_auth
    )
    port_gateway = http_gateway.Server(
        lambda: ready, grpc_endpoint=endpoint, config=gateway_config, debug_auth=debug_auth
    )
    port_gateway.location_port_offset = 0

    # Spool files keep their names in a spool dir we were given, to be recovered
    # after a crash; in the system's temporary directory they stay anonymous.
    spool_config = spool.SpoolConfig(
        directory=bcfg.spool_dir or None,
        write_timeout=bcfg.spool_write_timeout_s,
        recoverable=bool(bcfg.spool_dir),
        sync=bcfg.spool_sync,
    )

    async def spec_of(journal: str) -> pb.JournalSpec | None:
        key = allocator.item_key(root, journal)
        resp = await txn.commit(client, [], [txn.get(key)], [])
        kvs = resp.responses[0].response_range.kvs
        return pb.JournalSpec.FromString(kvs[0].value) if kvs else None

    fence_keeper = fences.Fences(client, root, spool_config.directory)

    async def stored_end(journal: str) -> int | None:
        spec = await spec_of(journal)
        if spec is None:
            return None
        listing = await index.walk_all_stores(registry, journal, list(spec.fragment.stores))
        # Nothing stored may mean everything expired (retention): then the fence is
        # the only record of how far the journal went, and stays.
        return listing.end_offset() if len(listing) else None

    try:
        async with registry, asyncio.TaskGroup() as tg:
            if spool_config.recoverable and spool_config.directory is not None:
                # Before we announce ourselves: what we held when we were killed may be
                # the only copy of acknowledged appends (see fragment.recovery).
                found = await recovery.recover(
                    spool_config.directory, registry, spec_of, config=spool_config
                )
                confirmed: dict[str, int] = {}
                for r in found:
                    confirmed[r.journal] = max(confirmed.get(r.journal, 0), r.confirmed)
                await fences.settle_recovered(fence_keeper, confirmed, stored_end)
            session_task = tg.create_task(session.run(), name="allocator session")
            stop_task = tg.create_task(stop.wait(), name="stop signal")
            ready_task = tg.create_task(session.ready.wait(), name="announced")
            await asyncio.wait(
                (session_task, ready_task, stop_task), return_when=asyncio.FIRST_COMPLETED
            )
            if not session.ready.is_set():
                ready_task.cancel()
                session_task.cancel()
                stop_task.cancel()
                return  # Stopped before we were announced.
            observed = session.observed
            assert observed is not None
            # From here on the data plane resolves journals as we do.
            publisher = topology.Publisher(observed, front.topology)
            publisher.start()
            watch_task = tg.create_task(ks.watch(client), name="keyspace watch")
            if reloader is not None:
                reload_task = tg.create_task(reloader.run(), name="auth key reload")

            svc: service.Service
            pers = persister.Persister(
                registry,
                lambda j: svc.lookup_spec(j),
                config=persister.PersisterConfig(replica_delay=bcfg.replica_persist_delay_s),
            )
            session.lease.on_doubt = lambda: svc.persist_all_now()
            svc = service.Service(
                client,
                observed,
                registry,
                pers,
                service.ServiceConfig(
                    spool=spool_config,
                    max_message_size=bcfg.max_grpc_recv_size,
                    peer_tls=peer_tls,
                ),
                lease_valid=lambda: session.lease.valid(loop.time()),
                lease_remaining=lambda: _remaining(session.lease.valid_until - loop.time()),
                authorization=keys,
                fences=fence_keeper,
            )
            # The data plane serves Append and Replicate; we answer what it asks.
            plane_host = native.NativeHost.for_broker(
                bcfg, front, svc, spool_config, peer_tls, lease_ttl
            )
            native_host = svc.native = plane_host
            svc.publish_lease()
            # Replicas before routes: a journal that resolves here finds its replica.
            plane_host.update_local(observed.state)
            publisher.before_publish = lambda: plane_host.update_local(observed.state)
            plane_host.start()
            publishing = tg.create_task(plane_host.publish(), name="native data plane publisher")
            persister_task = tg.create_task(pers.serve(), name="persister")
            replicas_task = tg.create_task(svc.run(), name="replicas")
            pb2_grpc.add_JournalServicer_to_server(api.JournalServicer(svc), server)
            await server.start()
            await port_gateway.start_unix(front.http_socket)
            http_port = -1
            if bcfg.http_port != -1:
                # A front door of its own, HTTP only, with the same connection limits.
                try:
                    http_front = dial.listen_native(
                        None, bind_host(host), bcfg.http_port, listen_cfg
                    )
                except OSError as e:
                    raise SystemExit(f"--broker.http-port {bcfg.http_port}: {e}") from None
                http_port = http_front.port
                http_metrics = metrics.ports.add(http_front.stats)
                await debug.start_unix(http_front.http_socket)
                # Location headers name the primary's HTTP port: at the same distance
                # from its gRPC port as ours (keep that distance across a cluster).
                debug.location_port_offset = http_port - port
                log.info("serving the HTTP gateway and diagnostics on port %d", http_port)
            ready = True
            if started is not None and not started.done():
                started.set_result(Serving(endpoint, http_port))
            log.warning(
                "broker %s#%s serving %s (etcd %s, root %s)",
                bcfg.zone,
                bcfg.id,
                endpoint,
                cfg.etcd.address,
                root,
            )

            watch_peers = tg.create_task(
                _isolation(bcfg, endpoint, session, svc).run(), name="isolation watch"
            )
            await asyncio.wait((session_task, stop_task), return_when=asyncio.FIRST_COMPLETED)
            watch_peers.cancel()
            if not session_task.done():
                await _drain(session, session_task, bcfg.drain_timeout_s)
            stop_task.cancel()
            ready = False

            svc.stop_replicas()
            front.topology.stop_serving_local_replicas()
            publishing.cancel()
            await plane_host.stop(native.STOP_TIMEOUT)
            await front.stop(GRACEFUL_STOP_TIMEOUT)
            await server.stop(GRACEFUL_STOP_TIMEOUT)
            await replicas_task
            watch_task.cancel()
            if reloader is not None:
                reload_task.cancel()
            pers.stop()
            await persister_task
            if not session_task.done():
                # Journals still assigned here go to other brokers once our lease
                # is revoked: only now, with everything we held persisted.
                session_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await session_task
            await svc.peers.close()
            await debug.close()  # Cuts streaming reads: then the door closes at once.
            await port_gateway.close()
            if http_front is not None:
                await http_front.stop(1.0)
            log.warning("broker stopped")
    finally:
        metrics.ports.remove(port_metrics)
        metrics.ports.remove(http_metrics)
        if native_host is not None:
            native_host.close()
        await front.stop(0)
        if http_front is not None:
            await http_front.stop(0)
        await server.stop(None)
        await debug.close()
        await port_gateway.close()
        with contextlib.suppress(keyspace.errors.KeySpaceError, OSError):
            await client.close()


def _remaining(seconds: float) -> float | None:
    return seconds if seconds > 0 else None


def _isolation(
    bcfg: config.BrokerConfig, endpoint: str, session: allocator.Session, svc: service.Service
) -> isolation.Isolation:
    """The watch that gives our journals up while no peer answers (see isolation)."""
    spec = broker_spec(bcfg, endpoint).SerializeToString()
    # Announced while cut off: a member with no room for journals gets none.
    no_room = broker_spec(dataclasses.replace(bcfg, limit=0), endpoint).SerializeToString()

    async def isolated(why: str) -> None:
        svc.cut_off = why
        await session.resign(no_room)

    async def rejoined() -> None:
        svc.cut_off = None
        await session.update_spec(spec)

    return isolation.Isolation(
        svc.other_brokers,
        svc.probe_peer,
        on_isolated=isolated,
        on_rejoined=rejoined,
        on_unreachable=svc.forget_peer,
        config=isolation.IsolationConfig(timeout=bcfg.isolation_timeout_s),
    )


# File descriptors a broker needs besides its clients' connections: spool files,
# etcd and peer connections, the gRPC and gateway sockets behind the front door.
_OWN_FILES = 1024


def ensure_open_files(
    max_connections: int, ports: int, flag: str = "--broker.max-connections"
) -> None:
    """Raise the open-files limit to what ``max_connections`` on ``ports`` need, if allowed.

    Go's runtime raises its soft limit to the hard one at start; Python doesn't, and
    a soft limit of 1024 (a common default) would run out long before the connection
    limit, failing accepts instead of refusing clearly. Logs a warning if the hard
    limit is too low.
    """
    need = max_connections * ports + _OWN_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < need:
        log.warning(
            "%s %d on %d port(s) may need %d open files, over the"
            " limit of %d (ulimit -n): raise the limit or lower the flag, else accepts fail"
            " before connections are refused clearly",
            flag,
            max_connections,
            ports,
            need,
            soft,
        )


def tls_configs(bcfg: config.BrokerConfig) -> tuple[dial.ListenConfig, dial.TLS]:
    """How the gRPC port listens, and the TLS of calls to peers (``--broker.*-file``).

    Without ``--broker.server-cert-file`` the broker serves plaintext and the
    other TLS flags are ignored, as Gazette's (its peers' https:// endpoints are
    then dialed with the default root pool).
    """
    # Appends and Applies refuse messages over --broker.max-grpc-recv-size
    # themselves, with a clear status: gRPC's own limit is only a backstop.
    limit = api.core_receive_limit(bcfg.max_grpc_recv_size)
    most = bcfg.max_connections
    if not bcfg.tls:
        return dial.ListenConfig(max_receive_message_size=limit, max_connections=most), dial.TLS()
    serving = dial.TLS(bcfg.server_cert_file, bcfg.server_cert_key_file, bcfg.server_ca_file)
    peer = dial.TLS(bcfg.peer_cert_file, bcfg.peer_cert_key_file, bcfg.peer_ca_file)
    return dial.ListenConfig(
        max_receive_message_size=limit, tls=serving, max_connections=most
    ), peer


async def _drain(
    session: allocator.Session, session_task: asyncio.Task[None], limit_s: float
) -> None:
    """Mark the member exiting and wait (boundedly) until its journals moved away."""
    log.warning("signalled to stop: draining journal assignments (for up to %.0fs)", limit_s)
    session.request_exit()
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + limit_s
    while not session_task.done():
        observed = session.observed
        if observed is not None and _nowhere_to_go(observed.state):
            log.warning(
                "every broker is exiting: stopping with %d journals assigned here",
                len(observed.state.local_items),
            )
            return
        if loop.time() >= deadline:
            held = len(observed.state.local_items) if observed is not None else -1
            log.warning(
                "assignments did not drain in %.0fs (%d journals still assigned here);"
                " stopping anyway, after persisting every spool",
                limit_s,
                held,
            )
            return
        await asyncio.wait({session_task}, timeout=0.5)
    session_task.result()
    log.warning("assignments drained in %.1fs", loop.time() - started)


def _nowhere_to_go(state: allocator.State) -> bool:
    return bool(state.members) and all(kv.decoded.exiting for kv in state.members)


def run_to_exit(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run(main)`` for a process's entry point, then ignore SIGTERM and SIGINT.

    Closing the event loop puts the default signal actions back, and the interpreter
    still joins worker threads and gRPC's own after that. A second SIGTERM in that
    window (Kubernetes re-signalling, a supervisor, `make down`) would kill a process
    that has already persisted everything and is merely exiting, with status -15 instead
    of 0: found by e2e/test_helm_processes.py, which signals each broker twice.
    """
    try:
        asyncio.run(main)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)


def run(cfg: config.Config) -> int:
    """Entry point of ``python -m gazette.broker``; returns the exit status."""
    setup_logging(cfg.log)
    try:
        run_to_exit(serve(cfg))
    except KeyboardInterrupt:
        return 130
    except keyspace.errors.EtcdAuthError as e:
        # etcd refused --etcd.username: one line naming the flags, not a traceback.
        log.error("%s", e)
        return 1
    return 0
