"""A consumer process: announce in etcd, serve assigned shards, drain on SIGTERM.

``python -m gazette.consumer --consumer.app pkg.module:App`` runs :func:`run`.
The process joins the allocator under ``--etcd.prefix`` as a member
(``members/<zone>#<id>``, a ConsumerSpec under its lease); shards
(``items/<id>``, ShardSpecs written by the operator or ``gazctl``) are
assigned over the members, each to a primary and its hot standbys, and
:class:`~gazette.consumer.runtime.service.Service` serves the local ones.

On SIGTERM (or SIGINT) the member is marked exiting, the allocator moves its
shards to other processes (bounded by ``--consumer.drain-timeout``), then the
shards stop and the lease is revoked. ``/debug/ready`` answers 200 once the
process serves, 503 before and while draining; ``/debug/metrics`` has the
Prometheus metrics.

With ``--consumer.auth-keys`` (or ``--consumer.auth-keys-file``, reloaded when
it changes and on SIGHUP: :mod:`gazette.broker.server.keyreload`) every
``consumer.Shard`` RPC needs a bearer token (:mod:`~.shard_api`); the journal
client shows the brokers ``--broker.auth-keys`` or ``--broker.auth-token``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import socket

from gazette import allocator, keyspace
from gazette.broker import client, http_gateway
from gazette.broker.protocol import dial
from gazette.broker.server import config as broker_config
from gazette.broker.server import keyreload
from gazette.broker.server import process as broker_process
from gazette.consumer import protocol as pc
from gazette.consumer.protocol import protocol_pb2_grpc as pc_grpc
from gazette.consumer.runtime import config, errors, interfaces
from gazette.consumer.runtime.resolver import Resolver
from gazette.consumer.runtime.service import Service
from gazette.consumer.runtime.shard import ShardServices
from gazette.consumer.runtime.shard_api import ShardAPI
from gazette.consumer.runtime.shards import ShardDecoder, shard_is_consistent

__all__ = ["Serving", "run", "serve"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Serving:
    """Where a started consumer process serves."""

    endpoint: str
    http_port: int  # -1 when off.
    member_key: str


def consumer_spec(cfg: config.ConsumerConfig, endpoint: str, *, exiting: bool = False) -> bytes:
    spec = pc.ConsumerSpec(shard_limit=cfg.limit, exiting=exiting)
    spec.process_spec.id.zone = cfg.zone
    spec.process_spec.id.suffix = cfg.id
    spec.process_spec.endpoint = endpoint
    pc.validate(spec)
    return spec.SerializeToString()


async def serve(
    cfg: config.Config,
    app: interfaces.Application,
    *,
    stop: asyncio.Event | None = None,
    started: asyncio.Future[Serving] | None = None,
) -> None:
    """Run the consumer process until ``stop`` (default: SIGTERM/SIGINT), then drain and exit."""
    loop = asyncio.get_running_loop()
    signals_are_ours = stop is None
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
    ccfg = cfg.consumer
    host = ccfg.host or socket.gethostname()
    # The gRPC port (consumer.Shard) is announced in the ConsumerSpec: gazctl and peers dial it.
    listen_cfg, peer_tls = tls_configs(ccfg)
    broker_process.ensure_open_files(
        ccfg.max_connections, 1 if ccfg.http_port < 0 else 2, "--consumer.max-connections"
    )
    server = dial.server(listen_cfg)
    # The broker's native front door owns the port, as it does a broker's: connection
    # limits with a clear refusal, header timeouts, TLS, and tokens checked before a
    # request's messages are read; gRPC goes on to our server, and other HTTP requests
    # (/debug/) to the HTTP server below, on one port as Gazette's consumers serve.
    try:
        front = dial.listen_native(server, _bind_host(host), ccfg.port, listen_cfg)
    except OSError as e:
        raise errors.ConfigError(f"--consumer.port {ccfg.port}: {e}") from None
    except ImportError as e:
        raise SystemExit(
            str(e).replace("gazette-broker[server]", "gazette-consumer[server]")
        ) from None
    port = front.port
    endpoint = broker_config.endpoint_of(host, port, tls=ccfg.tls)

    # Pinged as Gazette pings etcd: a connection into a partition is dropped within the lease.
    etcd = await keyspace.connect(cfg.etcd, keepalive=cfg.etcd.lease_s / 4)
    root = cfg.etcd.prefix
    ks = keyspace.KeySpace(
        root,
        allocator.key_value_decoder(root, ShardDecoder(ccfg.max_hot_standbys)),
        keyspace.KeySpaceConfig(watch_delay=ccfg.watch_delay_s),
    )
    member_key = allocator.member_key(root, ccfg.zone, ccfg.id)
    lease_ttl = max(2, round(cfg.etcd.lease_s))
    session = allocator.Session(
        etcd,
        ks,
        member_key,
        consumer_spec(ccfg, endpoint),
        consumer_spec(ccfg, endpoint, exiting=True),
        config=allocator.SessionConfig(
            lease_ttl=lease_ttl,
            announce_retry=min(10.0, max(1.0, lease_ttl / 4)),
            watch_keyspace=False,
        ),
        is_consistent=shard_is_consistent,
    )
    ready = False
    # /debug/ready and /debug/metrics, with the gRPC port's certificate (as Gazette's one
    # port), header and idle timeouts and a connection cap: the broker's HTTP server,
    # without its journal gateway.
    http_config = http_gateway.ServerConfig(listen_config=listen_cfg)
    http = http_gateway.Server(lambda: ready, grpc_endpoint=None, config=http_config)
    port_http = http_gateway.Server(lambda: ready, grpc_endpoint=None, config=http_config)
    keys = keyreload.server_auth(ccfg.auth_keys, ccfg.auth_keys_file, "--consumer.auth-keys-file")
    if keys is not None:
        keys.watch(front.set_auth)
    reloader = keyreload.reloader_of(keys, ccfg.auth_keys_file, "--consumer.auth-keys-file")
    if signals_are_ours:
        keyreload.handle_sighup(loop, reloader, "--consumer.auth-keys")
    jc = client.JournalClient(
        client.ClientConfig(
            address=cfg.broker.address,
            cache_size=cfg.broker.cache_size,
            auth_keys=cfg.broker.auth_keys,
            auth_token=cfg.broker.auth_token,
            cert_file=cfg.broker.cert_file,
            cert_key_file=cfg.broker.cert_key_file,
            trusted_ca_file=cfg.broker.trusted_ca_file,
        )
    )
    try:
        async with jc, asyncio.TaskGroup() as tg:
            session_task = tg.create_task(session.run(), name="allocator session")
            announced = tg.create_task(session.ready.wait(), name="announced")
            stopped = tg.create_task(stop.wait(), name="stop signal")
            await asyncio.wait((session_task, announced, stopped), return_when="FIRST_COMPLETED")
            if not session.ready.is_set():
                for t in (session_task, announced, stopped):
                    t.cancel()
                return
            observed = session.observed
            assert observed is not None
            watch_task = tg.create_task(ks.watch(etcd), name="keyspace watch")
            if reloader is not None:
                reload_task = tg.create_task(reloader.run(), name="auth key reload")
            svc = Service(ShardServices(app, etcd, ks, jc), observed)
            shards_stop = asyncio.Event()
            shards_task = tg.create_task(svc.run(shards_stop), name="shards")
            resolver = Resolver(svc, jc, peer_tls, keys)
            api = ShardAPI(svc, etcd, resolver)
            pc_grpc.add_ShardServicer_to_server(api, server)
            if isinstance(app, interfaces.ServiceRegistrar):
                app.register_services(server, resolver)
            await server.start()
            await port_http.start_unix(front.http_socket)
            http_port = -1
            if ccfg.http_port != -1:
                http_port = await http.start(
                    _bind_host(host).strip("[]") or "0.0.0.0", ccfg.http_port
                )
            ready = True
            if started is not None and not started.done():
                started.set_result(Serving(endpoint, http_port, member_key))
            log.warning(
                "consumer %s#%s serving %s (etcd %s, prefix %s, brokers %s)",
                ccfg.zone,
                ccfg.id,
                endpoint,
                cfg.etcd.address,
                root,
                cfg.broker.address,
            )
            await asyncio.wait((session_task, stopped), return_when="FIRST_COMPLETED")
            ready = False
            if not session_task.done():
                await _drain(session, session_task, observed, ccfg.drain_timeout_s)
            stopped.cancel()
            shards_stop.set()
            await shards_task
            watch_task.cancel()
            if reloader is not None:
                reload_task.cancel()
            if not session_task.done():
                session_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await session_task
            await resolver.close()
            await front.stop(broker_process.GRACEFUL_STOP_TIMEOUT)
            log.warning("consumer stopped")
    finally:
        await front.stop(0)
        await server.stop(None)
        await http.close()
        await port_http.close()
        with contextlib.suppress(keyspace.errors.KeySpaceError, OSError):
            await etcd.close()


async def _drain(
    session: allocator.Session,
    session_task: asyncio.Task[None],
    observed: allocator.ObservedState,
    limit_s: float,
) -> None:
    log.warning("signalled to stop: draining shard assignments (for up to %.0fs)", limit_s)
    session.request_exit()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not session_task.done():
        state = observed.state
        if state.members and all(kv.decoded.exiting for kv in state.members):
            log.warning("every consumer is exiting: stopping with shards assigned here")
            return
        if loop.time() >= deadline:
            log.warning(
                "shards did not drain in %.0fs (%d still assigned here); stopping anyway",
                limit_s,
                len(state.local_items),
            )
            return
        await asyncio.wait({session_task}, timeout=0.5)


def tls_configs(ccfg: config.ConsumerConfig) -> tuple[dial.ListenConfig, dial.TLS]:
    """How the gRPC port listens, and our TLS towards peers (``--consumer.*-file``).

    Without ``--consumer.server-cert-file`` the port is plaintext and the other
    TLS flags are ignored, as a broker's.
    """
    serving: dial.TLS | None = None
    peer = dial.TLS()
    if ccfg.tls:
        serving = dial.TLS(ccfg.server_cert_file, ccfg.server_cert_key_file, ccfg.server_ca_file)
        peer = dial.TLS(ccfg.peer_cert_file, ccfg.peer_cert_key_file, ccfg.peer_ca_file)
    listen = dial.ListenConfig(
        tls=serving, max_connections=ccfg.max_connections, process="consumer"
    )
    return listen, peer


def _bind_host(host: str) -> str:
    return broker_process.bind_host(host)


def run(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m gazette.consumer``; returns the exit status."""
    cfg = config.parse(argv)
    broker_process.setup_logging(cfg.log)
    try:
        app = config.load_application(cfg.consumer.app, cfg.app_args)
    except errors.ConfigError as e:
        log.error("%s", e)
        return 2
    try:
        broker_process.run_to_exit(serve(cfg, app))
    except KeyboardInterrupt:
        return 130
    except keyspace.errors.EtcdAuthError as e:
        # etcd refused --etcd.username: one line naming the flags, not a traceback.
        log.error("%s", e)
        return 1
    return 0
