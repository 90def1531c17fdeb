"""``python -m gazette.broker.http_gateway``: the journal HTTP gateway as its own process.

With ``--server-cert-file`` it serves HTTPS (and, with ``--server-ca-file``,
requires client certificates); an ``https://`` ``--broker.address`` is dialed
with ``--broker.cert-file`` / ``--broker.trusted-ca-file``, as gazctl does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from gazette.broker.http_gateway import server
from gazette.broker.protocol import dial


async def _serve(args: argparse.Namespace) -> None:
    serving = None
    if args.server_cert_file:
        serving = dial.TLS(args.server_cert_file, args.server_cert_key_file, args.server_ca_file)
    config = server.ServerConfig(
        body_timeout=args.body_timeout,
        listen_config=dial.ListenConfig(tls=serving),
        dial_config=dial.DialConfig(
            tls=dial.TLS(args.cert_file, args.cert_key_file, args.trusted_ca_file)
        ),
    )
    http = server.Server(lambda: True, grpc_endpoint=args.broker_address, config=config)
    port = await http.start(args.host, args.port)
    scheme = "https" if serving is not None else "http"
    print(f"http gateway on {scheme}://{args.host}:{port} -> {args.broker_address}", flush=True)
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
    for flag, env, text in (
        ("--broker.cert-file", "BROKER_CERT_FILE", "client certificate for https:// brokers"),
        ("--broker.cert-key-file", "BROKER_CERT_KEY_FILE", "private key of --broker.cert-file"),
        ("--broker.trusted-ca-file", "BROKER_TRUSTED_CA_FILE", "CA of the brokers"),
        ("--server-cert-file", "", "certificate to serve HTTPS with (default: plain HTTP)"),
        ("--server-cert-key-file", "", "private key of --server-cert-file"),
        ("--server-ca-file", "", "CA whose client certificates are required"),
    ):
        parser.add_argument(
            flag,
            dest=flag.removeprefix("--").removeprefix("broker.").replace("-", "_"),
            default=os.environ.get(env, "") if env else "",
            help=f"PEM {text}" + (f" (env {env})" if env else ""),
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
