"""The chart's Grafana dashboards and PrometheusRule: rendered by helm, checked against the code.

* every dashboard of ``charts/gazette/files/dashboards`` is valid JSON, renders into a
  ConfigMap carrying the Grafana sidecar's label, and every PromQL expression of its
  panels reads only series the code exports (the families registered when the broker,
  consumer and operator metric modules are imported, with the sample names Prometheus
  sees: ``_total`` on counters, ``_bucket``/``_count``/``_sum`` on histograms);
* the PrometheusRule renders only when enabled and the cluster serves its CRD, holds
  the alerts of issue 30 (journals without enough brokers, persist backlog, spool
  write failures, lease doubts, FAILED shards, growing lag), reads only exported
  series, and passes ``promtool check rules`` (promtool built from its Go module into
  the tool cache by ``e2e/helm/build.sh``, as helm is).
"""

from __future__ import annotations

import importlib
import json
import pathlib
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import helm
import pytest
import yaml
from prometheus_client.metrics_core import Metric

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180, func_only=True)]

DASHBOARDS = helm.CHART / "files" / "dashboards"
RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
#: The modules declaring every metric a Gazette process exports.
METRIC_MODULES = (
    "gazette.allocator.metrics",
    "gazette.broker.server.metrics",
    "gazette.broker.server.keyreload",
    "gazette.broker.fragment.metrics",
    "gazette.broker.fragment.stores.active",
    "gazette.consumer.runtime.metrics",
    "gazette.message.metrics",
    "gazette.operator.metrics",
    "gazette.operator.health",
)
#: Words of PromQL that look like metric names but are not.
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "Inf", "NaN"})
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
}


def _families() -> Iterator[Metric]:
    import prometheus_client

    for name in METRIC_MODULES:
        importlib.import_module(name)
    yield from prometheus_client.REGISTRY.collect()
    # The operator's scrape-time collector is registered by a running operator only.
    from gazette.operator import metrics as op_metrics

    yield from op_metrics.ControllerCollector(dict, dict).collect()


def exported() -> frozenset[str]:
    """Every sample name the code's metrics expose."""
    names: set[str] = set()
    for family in _families():
        names.update(family.name + s for s in _SUFFIXES.get(family.type, ("",)))
    return frozenset(names)


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (not its functions, labels or words)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    found = set()
    for m in re.finditer(r"(?<![\w.:$])[A-Za-z_:][\w:]*", s):
        if s[m.end() :].lstrip().startswith("(") or m.group() in _KEYWORDS:
            continue
        found.add(m.group())
    return found


def test_metric_names_reads_selectors_only() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, op) (rate(a_bucket{ns=~"$x", b="c d"}[5m])))'
        " and on (pod) b_total > 1e5 unless c offset 5m"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}
    assert "gazette_shard_lag_bytes" in exported()
    assert "gazette_spool_write_failures_total" in exported()
    assert "gazette_operator_reconcile_seconds_bucket" in exported()


def _exprs(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


def test_each_dashboard_is_json_of_exported_metrics() -> None:
    known = exported()
    files = sorted(DASHBOARDS.glob("*.json"))
    assert [f.stem for f in files] == ["brokers", "consumers", "journals", "operator"]
    uids = set()
    for path in files:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        uids.add(dashboard["uid"])
        assert dashboard["title"].startswith("Gazette / ")
        assert dashboard["panels"], path
        for title, expr in _exprs(dashboard):
            names = metric_names(expr)
            assert names, f"{path.name}: {title}: no metric in {expr}"
            unknown = names - known
            assert not unknown, f"{path.name}: {title}: {sorted(unknown)} not exported: {expr}"
    assert len(uids) == len(files)


def _rendered(helm_bin: pathlib.Path, **kwargs: Any) -> list[dict[str, Any]]:
    return helm.template(helm_bin, namespace="gz", **kwargs)


def test_dashboards_render_as_sidecar_configmaps(helm_bin: pathlib.Path) -> None:
    maps = {
        o["metadata"]["name"]: o
        for o in _rendered(helm_bin)
        if o["kind"] == "ConfigMap" and "-dashboard-" in o["metadata"]["name"]
    }
    assert sorted(maps) == [
        f"gazette-dashboard-{n}" for n in ("brokers", "consumers", "journals", "operator")
    ]
    for name, cm in maps.items():
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        stem = name.rsplit("-", 1)[1]
        ((key, text),) = cm["data"].items()
        assert key == f"gazette-{stem}.json"
        assert json.loads(text) == json.loads((DASHBOARDS / f"{stem}.json").read_text())
    off = _rendered(helm_bin, sets={"monitoring.dashboards.enabled": False})
    assert not [o for o in off if "-dashboard-" in o["metadata"]["name"]]


def _rule_objects(helm_bin: pathlib.Path, **kwargs: Any) -> list[dict[str, Any]]:
    return [o for o in _rendered(helm_bin, **kwargs) if o["kind"] == "PrometheusRule"]


def test_prometheus_rule_is_off_by_default_and_needs_its_crd(helm_bin: pathlib.Path) -> None:
    assert _rule_objects(helm_bin, api_versions=[RULE_API]) == []
    on = {"monitoring.prometheusRule.enabled": True}
    assert _rule_objects(helm_bin, sets=on) == []  # No such CRD in the cluster.


@pytest.fixture(scope="module")
def promtool() -> pathlib.Path | None:
    """promtool from the tool cache, built first (as helm) when Go is here.

    A fixture, so that a cold build (minutes) is bounded by helm.BUILD_TIMEOUT, not by
    the test's own timeout.
    """
    if shutil.which("go") is None:
        return None
    proc = subprocess.run(
        [str(helm.HERE / "build.sh"), str(helm.binary_path().parent.parent.parent), "promtool"],
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=helm.BUILD_TIMEOUT,
    )
    return pathlib.Path(proc.stdout.strip().splitlines()[-1])


def test_prometheus_rule_alerts_on_exported_metrics_and_passes_promtool(
    helm_bin: pathlib.Path, promtool: pathlib.Path | None, tmp_path: pathlib.Path
) -> None:
    sets = {
        "monitoring.prometheusRule.enabled": True,
        "monitoring.prometheusRule.lagBytes": 1 << 30,
    }
    (rule,) = _rule_objects(helm_bin, sets=sets, api_versions=[RULE_API])
    groups = rule["spec"]["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"]}
    assert sorted(alerts) == [
        "GazetteJournalsUnderReplicated",
        "GazetteLeaseDoubtsRepeated",
        "GazetteLeaseInDoubt",
        "GazettePersistBacklog",
        "GazetteShardFailed",
        "GazetteShardLagGrowing",
        "GazetteSpoolWriteFailures",
    ]
    known = exported()
    for name, r in alerts.items():
        names = metric_names(r["expr"])
        assert names and not names - known, f"{name}: {sorted(names - known)}: {r['expr']}"
        assert r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        assert 'namespace="gz"' in r["expr"], r["expr"]
    # Values reach the expressions, as integers (not Go's 1.073741824e+09).
    assert "> 1073741824)" in alerts["GazetteShardLagGrowing"]["expr"]
    assert 'job="gazette-broker-headless"' in alerts["GazetteJournalsUnderReplicated"]["expr"]

    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    if promtool is None:
        pytest.skip("no Go toolchain to build promtool (e2e/helm/build.sh promtool)")
    out = subprocess.run(
        [str(promtool), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alerts)} rules found" in out.stdout, out.stdout
    # promtool does refuse what is wrong: an expression that does not parse.
    bad = {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "sum by (x"}]}]}
    path.write_text(yaml.safe_dump(bad), encoding="utf-8")
    refused = subprocess.run(
        [str(promtool), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode != 0
