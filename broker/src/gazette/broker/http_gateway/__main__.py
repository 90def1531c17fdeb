"""``python -m gazette.broker.http_gateway``: the journal HTTP gateway as its own process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from gazette.broker.http_gateway import server


async def _serve(args: argparse.Namespace) -> None:
    config = server.ServerConfig(body_timeout=args.body_timeout)
    http = server.Server(lambda: True, grpc_endpoint=args.broker_address, config=config)
    port = await http.start(args.host, args.port)
    print(f"http gateway on http://{args.host}:{port} -> {args.broker_address}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await http.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gazette.broker.http_gateway",
        description="Serve GET/HEAD/PUT /<journal> over HTTP/1.1, through a broker's gRPC port.",
    )
    parser.add_argument(
        "--broker.address",
        dest="broker_address",
        default=os.environ.get("BROKER_ADDRESS", "http://localhost:8080"),
        help="broker endpoint the RPCs go to (env BROKER_ADDRESS; default %(default)s)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (%(default)s)")
    parser.add_argument("--port", type=int, default=8081, help="listen port (%(default)s)")
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=server.ServerConfig.body_timeout,
        help="seconds a request body may send nothing before it is answered 408 (%(default)s)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
