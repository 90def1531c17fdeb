"""Probes and metrics over HTTP: ``/readyz``, ``/healthz`` (``/livez``), ``/metrics``.

Kubernetes asks two questions of the operator's pod, and Prometheus a third:

* **Ready?** (``/readyz``) Its checks pass: ``kube``, the API server accepts the
  operator's credentials (``GET /version`` with them: a revoked or expired token
  fails it), and ``etcd``, a quorum read of Gazette's etcd answers within
  ``probe_timeout``. Both are probed every ``probe_interval``; a result older than
  ``stale_after`` counts as failed. So an etcd outage turns the pod unready, and
  its end ready again. A standby replica (not holding the leader Lease) is ready
  too: it can take over, and a Deployment's rollout waits for every replica.
* **Alive?** (``/healthz``, ``/livez``) Nothing the operator is doing has been
  going on for longer than ``wedged_after`` (each reconcile, status patch, release
  is tracked with :meth:`Health.working`; all of them are bounded by timeouts far
  shorter, so one that is not done is stuck), and the probes still run. A blocked
  event loop answers nothing, which fails the probe too. Failures outside the
  process (etcd or the API server down) never fail liveness: restarting would not
  help.
* **Metrics** (``/metrics``): :mod:`gazette.operator.metrics`, in Prometheus' text
  format.

Answers are JSON, saying each check and, where known, whether this replica leads::

    {"ok": false, "checks": {"etcd": {"ok": false, "message": "...", "age": 1.2},
                             "kube": {"ok": true, ...}}, "leader": true}

Usage::

    health = health.Health(health.HealthConfig(address=":8080"))
    async with asyncio.TaskGroup() as tg:
        tg.create_task(health.serve())
        tg.create_task(health.probe("etcd", store.check))
        with health.working("reconcile ns/name"):
            ...
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import prometheus_client as prom
from aiohttp import web

from gazette.operator import errors, metrics

__all__ = ["Health", "HealthConfig", "parse_address"]

logger = logging.getLogger(__name__)


def parse_address(value: str) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT``, ``:PORT`` (every interface) or a URL such as
    ``http://0.0.0.0:8080/healthz`` (kopf's liveness endpoint, which this replaces)."""
    text = value.strip()
    if "://" in text:
        url = urllib.parse.urlsplit(text)
        host, port = url.hostname or "0.0.0.0", url.port
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not port_text.isdigit():
            raise ValueError(f"expected HOST:PORT, :PORT or a URL, not {value!r}")
        host, port = host.strip("[]") or "0.0.0.0", int(port_text)
    if port is None or not 0 <= port <= 65535:
        raise ValueError(f"no valid port in {value!r}")
    return host, port


@dataclasses.dataclass(frozen=True, slots=True)
class HealthConfig:
    """Where to serve and how to judge, in seconds.

    ``address``: ``HOST:PORT`` (or ``:PORT``) of the HTTP server; empty serves nothing.
    ``probe_interval`` and ``probe_timeout``: how often and how long each readiness
    check runs; ``stale_after``: a check result older than this fails readiness.
    ``wedged_after``: work going on for longer fails liveness.
    """

    address: str = ""
    probe_interval: float = 5.0
    probe_timeout: float = 3.0
    stale_after: float = 30.0
    wedged_after: float = 120.0


@dataclasses.dataclass(slots=True)
class _Check:
    ok: bool
    message: str
    at: float


class Health:
    """The readiness checks' last results and the work in progress; serves them over HTTP.

    ``clock`` (monotonic seconds) is injected, so tests drive time. ``info`` holds
    what else the answers say (``leader``).
    """

    def __init__(
        self, config: HealthConfig | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config or HealthConfig()
        self._clock = clock
        self._checks: dict[str, _Check | None] = {}
        self._work: dict[int, tuple[str, float]] = {}
        self._ids = itertools.count()
        self._probed = clock()
        self.info: dict[str, Any] = {}
        self.port = 0
        """The port served, once :meth:`serve` listens (useful with port 0)."""
        self.serving = asyncio.Event()

    # --- What the operator tells ------------------------------------------------

    def expect(self, check: str) -> None:
        """Readiness waits for ``check``: it fails until the check first passes."""
        self._checks.setdefault(check, None)

    def report(self, check: str, ok: bool, message: str = "") -> None:
        """The latest result of readiness check ``check``."""
        old = self._checks.get(check)
        if old is None or old.ok != ok:
            if ok:
                logger.info("readiness check %s passes", check)
            else:
                logger.warning("readiness check %s fails: %s", check, message)
        self._checks[check] = _Check(ok, message, self._clock())
        self._probed = self._clock()
        metrics.check_ok.labels(check).set(1 if ok else 0)

    @contextlib.contextmanager
    def working(self, what: str) -> Iterator[None]:
        """Track one piece of work: liveness fails while one has gone on for ``wedged_after``."""
        token = next(self._ids)
        self._work[token] = (what, self._clock())
        try:
            yield
        finally:
            del self._work[token]

    # --- The answers ------------------------------------------------------------

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """(ready, details): every check passed, lately."""
        now = self._clock()
        checks: dict[str, Any] = {}
        ok = True
        for name, check in sorted(self._checks.items()):
            if check is None:
                checks[name] = {"ok": False, "message": "not checked yet"}
                ok = False
                continue
            age = now - check.at
            fresh = age <= self.config.stale_after
            passed = check.ok and fresh
            message = check.message if fresh else f"no result for {age:.0f}s"
            checks[name] = {"ok": passed, "message": message, "age": round(age, 1)}
            ok = ok and passed
        return ok, {"ok": ok, "checks": checks, **self.info}

    def live(self) -> tuple[bool, dict[str, Any]]:
        """(alive, details): no work older than ``wedged_after``, and the probes run."""
        now = self._clock()
        limit = self.config.wedged_after
        stuck = sorted(
            (now - started, what) for what, started in self._work.values() if now - started > limit
        )
        problems = [f"{what}: going on for {age:.0f}s" for age, what in reversed(stuck)]
        if self._checks and now - self._probed > limit:
            problems.append(f"no readiness probe ran for {now - self._probed:.0f}s")
        ok = not problems
        return ok, {"ok": ok, "wedged": problems[:10], "working": len(self._work), **self.info}

    # --- Running ----------------------------------------------------------------

    async def probe(self, check: str, run: Callable[[], Awaitable[object]]) -> None:
        """Run readiness check ``check`` (``run`` raises when it fails) every
        ``probe_interval`` until cancelled."""
        self.expect(check)
        while True:
            try:
                async with asyncio.timeout(self.config.probe_timeout):
                    await run()
            except TimeoutError:
                self.report(check, False, f"no answer within {self.config.probe_timeout:g}s")
            except errors.OperatorError as e:
                self.report(check, False, str(e))
            else:
                self.report(check, True)
            await asyncio.sleep(self.config.probe_interval)

    def _answer(self, verdict: tuple[bool, dict[str, Any]]) -> web.Response:
        ok, details = verdict
        return web.Response(
            status=200 if ok else 503,
            text=json.dumps(details, sort_keys=True) + "\n",
            content_type="application/json",
        )

    def app(self) -> web.Application:
        """The aiohttp application answering the probes and the scrapes."""

        async def ready(request: web.Request) -> web.Response:
            return self._answer(self.ready())

        async def live(request: web.Request) -> web.Response:
            return self._answer(self.live())

        async def scrape(request: web.Request) -> web.Response:
            body = prom.generate_latest(prom.REGISTRY)
            return web.Response(body=body, headers={"Content-Type": prom.CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/readyz", ready)
        app.router.add_get("/healthz", live)
        app.router.add_get("/livez", live)
        app.router.add_get("/metrics", scrape)
        return app

    async def serve(self) -> None:
        """Serve ``/readyz``, ``/healthz``, ``/livez`` and ``/metrics`` on
        ``config.address`` until cancelled (nothing, when it is empty)."""
        if not self.config.address:
            await asyncio.Future()  # Nothing to serve: wait to be cancelled.
        host, port = parse_address(self.config.address)
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            self.port = int(runner.addresses[0][1]) if runner.addresses else port
            logger.info("serving /readyz, /healthz and /metrics on %s:%d", host, self.port)
            self.serving.set()
            await asyncio.Future()
        finally:
            await runner.cleanup()
