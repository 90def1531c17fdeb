"""moto's S3 server, answering as the chart's trial MinIO pod is asked to.

Run as ``s3-standin.py server DIR --address=:PORT`` (the chart's arguments; DIR is
ignored: objects live in memory, as the trial server's emptyDir does not outlive the
pod either). ``/minio/health/*`` answers 200 for the readiness probe; every other
request goes to moto.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Iterable
from typing import Any

# Clients name the server by its Service (http://<release>-s3:9000): path-style
# requests, whose host is no bucket.
os.environ.setdefault("S3_IGNORE_SUBDOMAIN_BUCKETNAME", "true")

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["server"])
    parser.add_argument("dir")
    parser.add_argument("--address", default=":9000")
    args = parser.parse_args(argv)
    host, _, port = args.address.rpartition(":")
    moto = DomainDispatcherApplication(create_backend_app)

    def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").startswith("/minio/health/"):
            start("200 OK", [("Content-Length", "0")])
            return [b""]
        return moto(environ, start)  # type: ignore[no-any-return]

    # PID 1 of its container: without a handler SIGTERM would be ignored until the
    # pod's grace period ran out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple(host or "0.0.0.0", int(port), app, threaded=True)


if __name__ == "__main__":
    main(sys.argv[1:])
