"""Readiness, liveness and metrics: the answers, and the HTTP server that gives them."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import aiohttp
import prometheus_client as prom
import pytest
from operator_objects import journal

from gazette.operator import config, errors, handlers, health, metrics, reconcile, testing


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_readiness_needs_every_check_passing_and_fresh() -> None:
    clock = Clock()
    h = health.Health(health.HealthConfig(stale_after=30), clock=clock)
    h.expect("etcd")
    ok, details = h.ready()
    assert not ok and details["checks"]["etcd"]["message"] == "not checked yet"
    h.report("etcd", True)
    h.report("kube", True)
    assert h.ready()[0]
    h.report("etcd", False, "etcd: connection refused")
    ok, details = h.ready()
    assert not ok
    assert details["checks"]["etcd"] == {
        "ok": False,
        "message": "etcd: connection refused",
        "age": 0.0,
    }
    h.report("etcd", True)
    clock.now += 31  # The probes stopped reporting.
    ok, details = h.ready()
    assert not ok and details["checks"]["kube"]["message"] == "no result for 31s"


def test_liveness_fails_while_work_is_stuck() -> None:
    clock = Clock()
    h = health.Health(health.HealthConfig(wedged_after=60), clock=clock)
    h.report("etcd", True)
    with h.working("reconcile Journal ns/a"):
        clock.now += 59
        assert h.live()[0]
        h.report("etcd", True)
        clock.now += 2
        ok, details = h.live()
        assert not ok
        assert details["wedged"] == ["reconcile Journal ns/a: going on for 61s"]
    assert h.live()[0]
    # Probes that stop running count as wedged too (an outage does not: they report it).
    h.report("etcd", False, "down")
    clock.now += 61
    assert not h.live()[0]


async def test_probe_reports_failures_and_timeouts() -> None:
    h = health.Health(health.HealthConfig(probe_interval=0.01, probe_timeout=0.05))
    answers: list[Any] = [errors.SpecStoreError("etcd: unavailable"), "hang", None]

    async def check() -> None:
        answer = answers.pop(0) if answers else None
        if isinstance(answer, Exception):
            raise answer
        if answer == "hang":
            await asyncio.sleep(10)

    seen: list[tuple[bool, str]] = []
    async with asyncio.timeout(5):
        task = asyncio.create_task(h.probe("etcd", check))
        while len(seen) < 3:
            await asyncio.sleep(0.005)
            got = h.ready()[1]["checks"]["etcd"]
            if not seen or seen[-1] != (got["ok"], got["message"]):
                seen.append((got["ok"], got["message"]))
        task.cancel()
    assert seen == [
        (False, "etcd: unavailable"),
        (False, "no answer within 0.05s"),
        (True, ""),
    ]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (":8080", ("0.0.0.0", 8080)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("http://127.0.0.1:9000/healthz", ("127.0.0.1", 9000)),
        ("[::1]:81", ("::1", 81)),
    ],
)
def test_parse_address(text: str, want: tuple[str, int]) -> None:
    assert health.parse_address(text) == want


def test_parse_address_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        health.parse_address("localhost")


async def test_http_answers_probes_and_scrapes() -> None:
    h = health.Health(health.HealthConfig(address="127.0.0.1:0"))
    h.info["leader"] = True
    h.report("etcd", False, "etcd: down")
    collector = metrics.ControllerCollector(
        lambda: {("Journal", "Ready", "True", "Applied"): 3}, lambda: {"resync": 2}
    )
    prom.REGISTRY.register(collector)
    try:
        async with asyncio.timeout(10), asyncio.TaskGroup() as tg:
            server = tg.create_task(h.serve())
            await h.serving.wait()
            base = f"http://127.0.0.1:{h.port}"
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{base}/readyz") as resp:
                    assert resp.status == 503
                    body = json.loads(await resp.text())
                    assert body["checks"]["etcd"]["message"] == "etcd: down"
                    assert body["leader"] is True
                h.report("etcd", True)
                async with session.get(f"{base}/readyz") as resp:
                    assert resp.status == 200
                for path in ("/healthz", "/livez"):
                    async with session.get(base + path) as resp:
                        assert resp.status == 200
                metrics.reconciles.labels("Journal", "Applied").inc()
                async with session.get(f"{base}/metrics") as resp:
                    assert resp.status == 200
                    text = await resp.text()
            server.cancel()
    finally:
        prom.REGISTRY.unregister(collector)
    assert (
        'gazette_operator_objects{condition="Ready",kind="Journal",reason="Applied",status="True"} 3.0'
        in text
    )
    assert 'gazette_operator_pending{queue="resync"} 2.0' in text
    assert 'gazette_operator_check_ok{check="etcd"} 1.0' in text
    assert "gazette_operator_reconciles_total" in text


def test_lag_counts_new_generations_from_their_last_change() -> None:
    body = journal(generation=2, status={"observedGeneration": 1})
    body["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Apply", "time": "2030-01-01T00:00:10Z"},
        {"manager": "op", "subresource": "status", "time": "2030-01-01T00:00:30Z"},
    ]
    now = datetime.datetime(2030, 1, 1, 0, 0, 13, tzinfo=datetime.UTC)
    assert metrics.change_time(body) == datetime.datetime(2030, 1, 1, 0, 0, 10, tzinfo=datetime.UTC)
    hist = metrics.reconcile_lag_seconds.labels("Journal")
    before = _sum(hist)
    applied = reconcile.Outcome(reconcile.Reason.APPLIED, "ok", "/k", 3, wrote=True)
    metrics.observe(reconcile.JOURNALS, body, applied, 0.01, now)
    assert _sum(hist) == before + 3
    # Seen again at the same generation (a resume): no lag.
    body["status"]["observedGeneration"] = 2
    metrics.observe(reconcile.JOURNALS, body, applied, 0.01, now)
    assert _sum(hist) == before + 3


def _sum(hist: Any) -> float:
    for metric in hist.collect():
        for sample in metric.samples:
            if sample.name.endswith("_sum"):
                return float(sample.value)
    raise AssertionError("no _sum")


def test_kopf_watches_time_out() -> None:
    settings = handlers.operator_settings(instance="replica-1")
    assert settings.watching.server_timeout == 300
    assert isinstance(settings.watching.server_timeout, int)
    assert settings.watching.client_timeout is not None
    assert settings.watching.client_timeout > settings.watching.server_timeout
    assert settings.watching.connect_timeout and settings.networking.connect_timeout
    assert settings.networking.request_timeout == 60
    assert settings.posting.reporting_instance == "replica-1"


def test_health_and_leader_flags() -> None:
    cfg = config.parse_args(
        [
            "--namespace=gazette",
            "--cluster=blue",
            "--liveness=http://127.0.0.1:8081/healthz",
            "--leader-elect-lease-duration=4",
            "--leader-elect-renew-deadline=3",
            "--leader-elect-retry-period=0.5",
        ],
        environ={},
    )
    assert cfg.health.address == "http://127.0.0.1:8081/healthz"
    assert (cfg.leader.enabled, cfg.leader.name, cfg.leader.namespace) == (
        True,
        "gazette-operator-blue",
        "gazette",
    )
    assert (cfg.leader.lease_duration, cfg.leader.renew_deadline) == (4, 3)
    cfg = config.parse_args(
        ["--all-namespaces", "--no-leader-elect", "--health.address=:9090"],
        environ={"POD_NAMESPACE": "ops"},
    )
    assert (cfg.leader.enabled, cfg.leader.namespace, cfg.health.address) == (
        False,
        "ops",
        ":9090",
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--all-namespaces", "--health.address=nonsense"],
        ["--all-namespaces", "--leader-elect-renew-deadline=20"],
        ["--all-namespaces", "--health.wedged-after=0"],
    ],
)
def test_bad_health_and_leader_flags(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config.parse_args(argv, environ={})
    assert "error" in capsys.readouterr().err


class HangingStore(testing.MemorySpecStore):
    """etcd that never answers (and a store without the timeouts EtcdSpecStore has)."""

    async def get(self, root: str, name: str) -> reconcile.Stored | None:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def test_a_hung_reconcile_fails_liveness() -> None:
    clock = Clock()
    h = health.Health(health.HealthConfig(wedged_after=60), clock=clock)
    h.report("etcd", True)
    async with asyncio.timeout(5):
        task = asyncio.create_task(
            handlers.on_apply(
                journal(), {}, reconcile.JOURNALS, handlers.HandlerConfig(), HangingStore(),
                health=h,
            )
        )  # fmt: skip
        await asyncio.sleep(0.05)
        h.report("etcd", True)
        assert h.live()[0]
        clock.now += 61
        h.report("etcd", True)
        ok, details = h.live()
        assert not ok
        assert details["wedged"] == ["reconcile Journal ns/obj: going on for 61s"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert h.live()[0]
