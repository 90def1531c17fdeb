"""Consumer processes on loopback for tests: ``python -m gazette.consumer`` run, killed, restarted.

:class:`ConsumerCluster` runs N processes of one application against a given
etcd and broker cluster, each on 127.0.0.1 with its own ports, spread over
zones, and waits until each reports ``/debug/ready``. Processes are
:class:`gazette.broker.testing.BrokerProcess` objects running another module,
so they are killed (SIGKILL), stopped (SIGTERM) and watched the same way.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable, Sequence
from types import TracebackType

from gazette.broker import testing as broker_testing
from gazette.broker.protocol import tlstesting

__all__ = ["ConsumerCluster"]


class ConsumerCluster:
    """N consumer processes of application ``app`` (``pkg.module:Name``).

    With ``tls`` (:mod:`~gazette.broker.protocol.tlstesting` certificates) the
    processes serve mutual TLS, dial each other with their node certificate, and
    dial the (``https://``) brokers with the client certificate.
    """

    def __init__(
        self,
        app: str,
        *,
        etcd_endpoint: str,
        etcd_prefix: str,
        broker_address: str,
        work_dir: pathlib.Path | str,
        processes: int = 2,
        zones: Sequence[str] = ("zone-a", "zone-b"),
        lease: str = "3s",
        log_level: str = "info",
        extra_args: Iterable[str] = (),
        app_args: Iterable[str] = (),
        env: dict[str, str] | None = None,
        tls: tlstesting.Certs | None = None,
    ) -> None:
        self.app = app
        self.tls = tls
        tls_args = [*tls.broker_args("consumer"), *tls.client_args()] if tls is not None else []
        ssl_context = tls.client_ssl_context() if tls is not None else None
        self.etcd_prefix = etcd_prefix
        self.work_dir = pathlib.Path(work_dir)
        self.processes: list[broker_testing.BrokerProcess] = []
        penv = {**os.environ, **(env or {})}
        ports = broker_testing.free_ports(2 * processes)
        for i in range(processes):
            zone = zones[i % len(zones)]
            suffix = f"consumer-{i:02d}"
            port, http_port = ports[2 * i], ports[2 * i + 1]
            pdir = self.work_dir / suffix
            pdir.mkdir(parents=True, exist_ok=True)
            args = [
                "--consumer.app", app,
                "--consumer.zone", zone,
                "--consumer.id", suffix,
                "--consumer.host", "127.0.0.1",
                "--consumer.port", str(port),
                "--consumer.http-port", str(http_port),
                "--broker.address", broker_address,
                "--etcd.address", etcd_endpoint,
                "--etcd.prefix", etcd_prefix,
                "--etcd.lease", lease,
                "--log.level", log_level,
                *tls_args,
                *extra_args,
            ]  # fmt: skip
            app_argv = list(app_args)
            if app_argv:
                args += ["--", *app_argv]
            self.processes.append(
                broker_testing.BrokerProcess(
                    zone,
                    suffix,
                    port,
                    http_port,
                    pdir / "work",
                    pdir / "consumer.log",
                    args,
                    penv,
                    module="gazette.consumer",
                    ssl_context=ssl_context,
                )
            )

    def __len__(self) -> int:
        return len(self.processes)

    def __getitem__(self, i: int) -> broker_testing.BrokerProcess:
        return self.processes[i]

    def start(self, timeout: float = 60.0) -> None:
        for p in self.processes:
            p.start()
        for p in self.processes:
            p.wait_ready(timeout)

    def kill(self, i: int) -> None:
        self.processes[i].kill()

    def restart(self, i: int, timeout: float = 60.0) -> None:
        self.processes[i].start()
        self.processes[i].wait_ready(timeout)

    def kill_all(self) -> None:
        for p in self.processes:
            p.kill()

    def exited_on_their_own(self) -> list[broker_testing.BrokerProcess]:
        return [p for p in self.processes if p.exited_on_its_own]

    def logs(self, lines: int = 40) -> str:
        return "\n".join(f"== {p.suffix}\n{p.log_tail(lines)}" for p in self.processes)

    def __enter__(self) -> ConsumerCluster:
        try:
            self.start()
        except BaseException:
            self.kill_all()
            raise
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill_all()
