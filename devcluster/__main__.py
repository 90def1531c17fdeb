"""``python -m devcluster {up,down,status} --data DIR``."""

from __future__ import annotations

import argparse
import pathlib
import sys

import devcluster
from gazette.keyspace import testing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devcluster",
        description="A local cluster: etcd and 3 brokers in 2 zones over a file:// store. "
        "Ports: etcd E (peer E+1); broker i gRPC B+2i, its HTTP gateway B+2i+1. "
        "A taken port is replaced by a free one, and said so.",
    )
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--data", type=pathlib.Path, default=pathlib.Path(".local"))
    parser.add_argument(
        "--port-base",
        type=int,
        default=None,
        metavar="P",
        help="derive every port from P: etcd P (peer P+1), brokers from P+2",
    )
    parser.add_argument(
        "--etcd-port",
        type=int,
        default=devcluster.DEFAULT_ETCD_PORT,
        metavar="E",
        help="etcd client port E, peer E+1 (default 2379, gazctl's default; 0: any)",
    )
    parser.add_argument(
        "--broker-port",
        type=int,
        default=devcluster.DEFAULT_BROKER_PORT,
        metavar="B",
        help="first broker's gRPC port B (default 8080, gazctl's default --broker.address;"
        " 0: any free pairs)",
    )
    parser.add_argument(
        "--journals",
        type=pathlib.Path,
        default=devcluster.EXAMPLE_JOURNALS,
        help="journal YAML hierarchy to apply once up (default examples/journals.yaml)",
    )
    parser.add_argument("--no-journals", action="store_true", help="apply no journals")
    parser.add_argument(
        "--secure",
        action="store_true",
        help="up: mutual TLS (a throwaway CA under DATA/tls) and bearer-token authorization"
        " (--broker.auth-keys); DATA/env then holds gazctl's certificate and key variables",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=devcluster.STOP_TIMEOUT,
        help=f"down: seconds to wait for a graceful exit after SIGTERM before SIGKILL "
        f"(default {devcluster.STOP_TIMEOUT:.0f})",
    )
    args = parser.parse_args(argv)

    if args.command == "up":
        etcd_port, broker_port = args.etcd_port, args.broker_port
        if args.port_base is not None:
            etcd_port = args.port_base
            broker_port = args.port_base + 2 if args.port_base else 0
        options = devcluster.Options(
            data=args.data,
            etcd_port=etcd_port,
            broker_port=broker_port,
            journals=None if args.no_journals else args.journals,
            secure=args.secure,
        )
        try:
            devcluster.up(options)
        except (testing.EtcdStartError, devcluster.StartError) as e:
            print(f"up failed: {e}", file=sys.stderr)
            return 1
    elif args.command == "down":
        stopped = devcluster.down(args.data, timeout=args.timeout)
        forced = [s.process.name for s in stopped if s.forced]
        if forced:
            print(
                f"down: {', '.join(forced)} had to be killed with SIGKILL "
                "(no graceful exit); see their logs",
                file=sys.stderr,
            )
            return 1
    else:
        running = [p for p in devcluster.read_state(args.data) if devcluster.is_running(p)]
        if not running:
            print(f"down (nothing running from {args.data})")
        for p in running:
            print(f"{p.name}  pid {p.pid}  {p.endpoint}  log {p.log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
