"""``python -m gazette.gazctl.devcluster {up,down,status} --data DIR``."""

from __future__ import annotations

import argparse
import pathlib
import sys

from gazette.gazctl import devcluster
from gazette.keyspace import testing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gazette.gazctl.devcluster")
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--data", type=pathlib.Path, default=pathlib.Path(".local"))
    parser.add_argument(
        "--etcd-port",
        type=int,
        default=devcluster.DEFAULT_ETCD_PORT,
        help="etcd client port (default 2379; a free port is used when it's taken; 0: any)",
    )
    args = parser.parse_args(argv)

    if args.command == "up":
        try:
            devcluster.up(devcluster.Options(data=args.data, etcd_port=args.etcd_port))
        except testing.EtcdStartError as e:
            print(f"up failed: {e}", file=sys.stderr)
            return 1
    elif args.command == "down":
        devcluster.down(args.data)
    else:
        running = [p for p in devcluster.read_state(args.data) if devcluster.is_running(p)]
        if not running:
            print(f"down (nothing running from {args.data})")
        for p in running:
            print(f"{p.name}  pid {p.pid}  {p.endpoint}  log {p.log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
