"""The chart charts/gazette: lint, render, refuse bad values, and pass a real API server.

helm is built from its Go module (``e2e/helm/build.sh``, in the tool cache, ``e2e/cache-root.sh``);
the server-side dry runs use the ``kube`` fixture's kube-apiserver (CRDs installed).
Tests skip only when there is no Go toolchain; a failed build fails them.
"""

from __future__ import annotations

import filecmp
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import helm
import pytest
import yaml
from apiserver import kubeapi

# The helm build (first run) and the API server start happen in fixtures, outside the
# per-test timeout; each is bounded on its own (helm.BUILD_TIMEOUT, the server's startup).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(180, func_only=True)]

PRODUCTION = helm.CHART / "values-production.yaml"


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _one(objects: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    found = [o for o in _by_kind(objects, kind) if o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {[o['metadata']['name'] for o in found]}"
    return found[0]


def _container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# --- lint and render ------------------------------------------------------------


@pytest.mark.parametrize("values", [[], [PRODUCTION]], ids=["default", "production"])
def test_lint(helm_bin: pathlib.Path, values: list[pathlib.Path]) -> None:
    args = ["lint", "--strict", str(helm.CHART)]
    for path in values:
        args += ["-f", str(path)]
    proc = helm.run(helm_bin, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_default_values_render_a_trial_cluster(helm_bin: pathlib.Path) -> None:
    objects = helm.template(helm_bin, kube_version="1.36.0")
    sts = _one(objects, "StatefulSet", "-broker")
    spec = sts["spec"]["template"]["spec"]
    assert sts["spec"]["replicas"] == 3
    # Spread over zones (hard, skew 1) and hosts.
    spread = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    assert spread["topology.kubernetes.io/zone"]["maxSkew"] == 1
    assert spread["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["kubernetes.io/hostname"]["maxSkew"] == 1
    # The zone comes from the pod's topology label (Kubernetes >= 1.35): no init container.
    broker = _container(spec, "broker")
    env = _env(broker)
    assert env["BROKER_ZONE"] == {
        "fieldRef": {"fieldPath": "metadata.labels['topology.kubernetes.io/zone']"}
    }
    assert "initContainers" not in spec
    assert broker["command"] == ["python", "-m", "gazette.broker"]
    assert env["BROKER_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["BROKER_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["ETCD_ADDRESS"] == "http://gazette-etcd.default.svc:2379"
    # Readiness on the broker's own endpoint; drain fits in the grace period.
    assert broker["readinessProbe"]["httpGet"] == {"path": "/debug/ready", "port": "http"}
    assert broker["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    assert spec["terminationGracePeriodSeconds"] >= 120 + 5 + 30
    assert env["BROKER_DRAIN_TIMEOUT"] == "120s"
    # Non-root, read-only root, no token in the broker.
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert broker["securityContext"]["readOnlyRootFilesystem"] is True
    assert broker["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["automountServiceAccountToken"] is False
    assert broker["resources"]["requests"]["cpu"]
    # Spool: an emptyDir with its size limit.
    spool = next(v for v in spec["volumes"] if v["name"] == "spool")
    assert spool["emptyDir"]["sizeLimit"] == "10Gi"
    assert _one(objects, "PodDisruptionBudget", "-broker")["spec"]["maxUnavailable"] == 1
    service = _one(objects, "Service", "-broker")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"grpc": 8080, "http": 8081}
    # No Prometheus operator here: no ServiceMonitor; zones from labels: no node reader.
    assert not _by_kind(objects, "ServiceMonitor")
    assert not [r for r in _by_kind(objects, "ClusterRole") if "node" in r["metadata"]["name"]]
    # Bundled etcd: 3 members spread over zones; the trial S3 server and its bucket job.
    etcd = _one(objects, "StatefulSet", "-etcd")
    assert etcd["spec"]["replicas"] == 3
    assert etcd["spec"]["podManagementPolicy"] == "Parallel"
    args = _container(etcd["spec"]["template"]["spec"], "etcd")["args"]
    assert sum(a.count("=http://") for a in args if a.startswith("--initial-cluster=")) == 3
    assert _one(objects, "Deployment", "-s3")
    assert _one(objects, "Job", "-create-bucket")
    store = _one(objects, "ConfigMap", "-store")["data"]["store"]
    assert store == (
        "s3://gazette/fragments/?endpoint=http%3A%2F%2Fgazette-s3.default.svc%3A9000&region=us-east-1"
    )
    # helm test: gazctl round trip against the brokers' Service.
    test_pod = _one(objects, "Pod", "-test-roundtrip")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    test_env = _env(test_pod["spec"]["containers"][0])
    assert test_env["BROKER_ADDRESS"] == "http://gazette-broker.default.svc:8080"
    assert test_env["STORE"] == store


def _peers(policy: dict[str, Any], port: str | int) -> list[dict[str, Any]]:
    """The peers a NetworkPolicy admits on ``port`` (by name or number)."""
    return [
        peer
        for rule in policy["spec"]["ingress"]
        if any(p["port"] == port for p in rule["ports"])
        for peer in rule["from"]
    ]


def test_network_policies_admit_the_release_and_the_named_peers_only(
    helm_bin: pathlib.Path,
) -> None:
    objects = helm.template(helm_bin, kube_version="1.36.0")
    policies = {o["metadata"]["name"]: o for o in _by_kind(objects, "NetworkPolicy")}
    assert sorted(policies) == ["gazette-broker", "gazette-etcd", "gazette-operator", "gazette-s3"]
    for policy in policies.values():
        assert policy["spec"]["policyTypes"] == ["Ingress"]  # Egress is not restricted.
    release = {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/instance": "gazette",
                "app.kubernetes.io/name": "gazette",
            }
        }
    }
    broker = policies["gazette-broker"]
    assert broker["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "broker"
    assert _peers(broker, "grpc") == [release] and _peers(broker, "http") == [release]
    # The bundled etcd (no auth of its own): brokers, consumers, the operator, its members.
    etcd = policies["gazette-etcd"]
    clients, members = etcd["spec"]["ingress"]
    (selector,) = clients["from"]
    components = next(
        e["values"]
        for e in selector["podSelector"]["matchExpressions"]
        if e["key"] == "app.kubernetes.io/component"
    )
    assert sorted(components) == ["broker", "consumer", "etcd-auth", "operator"]
    assert [p["port"] for p in clients["ports"]] == [2379]
    assert [p["port"] for p in members["ports"]] == [2379, 2380]
    assert policies["gazette-operator"]["spec"]["ingress"] == []  # Nothing but its node.
    assert _peers(policies["gazette-s3"], "s3") == [release]

    # Clients outside the release, consumers, and Prometheus, as the values name them.
    spark = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "spark"}}}
    prometheus = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    objects = helm.template(
        helm_bin,
        kube_version="1.36.0",
        sets={
            "networkPolicy.brokerClients": [spark],
            "networkPolicy.bucketClients": [spark],
            "networkPolicy.metricsFrom": [prometheus],
            "consumers": [{"name": "sum", "app": "stream_sum:Summer", "replicas": 2}],
        },
    )
    policies = {o["metadata"]["name"]: o for o in _by_kind(objects, "NetworkPolicy")}
    broker = policies["gazette-broker"]
    assert _peers(broker, "grpc") == [release, spark]
    assert _peers(broker, "http") == [release, spark, prometheus]
    assert _peers(policies["gazette-s3"], "s3") == [release, spark]
    assert _peers(policies["gazette-operator"], "health") == [prometheus]
    consumers = policies["gazette-consumers"]
    assert _peers(consumers, "grpc") == [release]
    assert _peers(consumers, "http") == [release, prometheus]

    objects = helm.template(helm_bin, sets={"networkPolicy.enabled": False})
    assert not _by_kind(objects, "NetworkPolicy")


def test_production_values(helm_bin: pathlib.Path) -> None:
    objects = helm.template(
        helm_bin,
        values=[PRODUCTION],
        api_versions=["monitoring.coreos.com/v1/ServiceMonitor"],
        kube_version="1.36.0",
    )
    sts = _one(objects, "StatefulSet", "-broker")
    spec = sts["spec"]["template"]["spec"]
    assert sts["spec"]["replicas"] == 6
    spread = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    assert spread["topology.kubernetes.io/zone"]["minDomains"] == 3
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "local-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "100Gi"
    assert not [v for v in spec["volumes"] if v["name"] == "spool"]
    env = _env(_container(spec, "broker"))
    assert env["AWS_ACCESS_KEY_ID"] == {
        "secretKeyRef": {"name": "gazette-s3", "key": "AWS_ACCESS_KEY_ID"}
    }
    # No trial server's bucket Job: only the bundled etcd's auth setup.
    assert [j["metadata"]["name"] for j in _by_kind(objects, "Job")] == ["gazette-etcd-auth"]
    store = _one(objects, "ConfigMap", "-store")["data"]["store"]
    assert store == "s3://my-gazette-fragments/prod/?region=us-east-1"
    monitor = _one(objects, "ServiceMonitor", "gazette")
    assert monitor["spec"]["endpoints"][0]["path"] == "/debug/metrics"
    consumer = _one(objects, "StatefulSet", "-stream-sum")
    cspec = consumer["spec"]["template"]["spec"]
    cenv = _env(_container(cspec, "consumer"))
    assert cenv["ETCD_PREFIX"] == "/gazette/consumers/stream-sum"
    assert cenv["CONSUMER_APP"] == "stream_sum:Summer"
    assert cenv["BROKER_ADDRESS"] == "http://gazette-broker.default.svc:8080"
    assert {c["topologyKey"] for c in cspec["topologySpreadConstraints"]} == {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }
    assert consumer["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "local-ssd"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels and matchExpressions) selects these labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        value = labels.get(e["key"])
        if e["operator"] == "In" and value not in e["values"]:
            return False
        if e["operator"] == "NotIn" and value in e["values"]:
            return False
    return True


def test_service_monitors_scrape_brokers_consumers_and_the_operator(
    helm_bin: pathlib.Path,
) -> None:
    objects = helm.template(
        helm_bin,
        values=[PRODUCTION],
        api_versions=["monitoring.coreos.com/v1/ServiceMonitor"],
        kube_version="1.36.0",
    )
    services = _by_kind(objects, "Service")

    def scraped(monitor: dict[str, Any]) -> set[tuple[str, str, str]]:
        """(Service, port name, path) of every endpoint the monitor finds."""
        found = set()
        for svc in services:
            if not _selects(monitor["spec"]["selector"], svc["metadata"]["labels"]):
                continue
            for endpoint in monitor["spec"]["endpoints"]:
                for port in svc["spec"]["ports"]:
                    if port["name"] == endpoint["port"]:
                        found.add((svc["metadata"]["name"], port["name"], endpoint["path"]))
        return found

    # Brokers (every pod, through the headless Service) and consumers, not the operator.
    assert scraped(_one(objects, "ServiceMonitor", "gazette")) == {
        ("gazette-broker-headless", "http", "/debug/metrics"),
        ("gazette-stream-sum", "http", "/debug/metrics"),
    }
    # The operator's /metrics, served by --health.address on the container's health port.
    assert scraped(_one(objects, "ServiceMonitor", "-operator")) == {
        ("gazette-operator-metrics", "metrics", "/metrics"),
    }
    svc = _one(objects, "Service", "-operator-metrics")
    assert svc["spec"]["ports"][0]["targetPort"] == "health"
    deploy = _one(objects, "Deployment", "-operator")
    assert _selects(
        {"matchLabels": svc["spec"]["selector"]}, deploy["spec"]["template"]["metadata"]["labels"]
    )
    operator = _container(deploy["spec"]["template"]["spec"], "operator")
    assert "--health.address=:8080" in operator["args"]
    assert {"name": "health", "containerPort": 8080, "protocol": "TCP"} in operator["ports"]


def test_zone_from_node_reads_only_its_node(helm_bin: pathlib.Path) -> None:
    """Before 1.35 (no pod topology labels) an init container gets the Node, and only that."""
    objects = helm.template(
        helm_bin,
        kube_version="1.31.0",
        sets={"consumers": [{"name": "sum", "app": "stream_sum:Summer", "replicas": 2}]},
    )
    (role,) = [
        r for r in _by_kind(objects, "ClusterRole") if "node-reader" in r["metadata"]["name"]
    ]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    (binding,) = [
        b for b in _by_kind(objects, "ClusterRoleBinding") if "node-reader" in b["metadata"]["name"]
    ]
    assert {s["name"] for s in binding["subjects"]} == {"gazette-broker", "gazette-consumer"}
    for suffix, var in (("-broker", "BROKER_ZONE"), ("-sum", "CONSUMER_ZONE")):
        spec = _one(objects, "StatefulSet", suffix)["spec"]["template"]["spec"]
        (init,) = spec["initContainers"]
        assert init["command"] == ["python", "/opt/gazette/scripts/node-zone.py"]
        # The token is mounted into the init container alone.
        assert spec["automountServiceAccountToken"] is False
        assert any(m["name"] == "node-reader-token" for m in init["volumeMounts"])
        main = spec["containers"][0]
        assert not any(m["name"] == "node-reader-token" for m in main["volumeMounts"])
        assert main["command"][:2] == ["/bin/sh", "-ec"]
        assert f'{var}="$(cat /run/gazette/zone/zone)"' in main["command"][2]
        assert var not in _env(main)


def test_operator_rbac_is_least(helm_bin: pathlib.Path) -> None:
    objects = helm.template(helm_bin, sets={"operator.watchNamespaces": ["apps", "default"]})
    roles = {
        (r["metadata"].get("namespace"), r["metadata"]["name"]): r
        for r in objects
        if r["kind"] == "Role"
    }
    assert set(roles) == {
        ("default", "gazette-operator"),
        ("apps", "gazette-operator"),
        ("default", "gazette-operator-lease"),
    }
    rules = roles[("apps", "gazette-operator")]["rules"]
    assert rules == [
        {
            "apiGroups": ["gazette.dev"],
            "resources": ["journals", "shards"],
            "verbs": ["get", "list", "watch", "patch"],
        },
        {
            "apiGroups": ["gazette.dev"],
            "resources": ["journals/status", "shards/status"],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        # Whether its namespace is being deleted (gazette.operator.teardown): a Role's
        # grant covers only the namespace object it is in.
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
    ]
    for role in roles.values():
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            assert not {"delete", "deletecollection", "escalate", "bind"} & set(rule["verbs"])
    (scan,) = _by_kind(objects, "ClusterRole")  # kopf's scanning: read-only
    assert scan["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["list", "watch"],
        },
    ]
    deploy = _one(objects, "Deployment", "-operator")
    env = _env(_container(deploy["spec"]["template"]["spec"], "operator"))
    assert env["WATCH_NAMESPACES"] == "apps,default"
    assert env["GAZETTE_CLUSTER"] == "default"
    # Cluster-wide: one ClusterRole with the same rules.
    wide = helm.template(
        helm_bin, sets={"operator.allNamespaces": True, "operator.clusterScan": False}
    )
    (cluster_role,) = _by_kind(wide, "ClusterRole")
    assert cluster_role["rules"] == rules
    lease = roles[("default", "gazette-operator-lease")]["rules"]
    assert lease[1]["resourceNames"] == ["gazette-operator"]
    args = _container(deploy["spec"]["template"]["spec"], "operator")["args"]
    assert "--leader-elect-resource-name=gazette-operator" in args


@pytest.mark.parametrize(
    ("sets", "volume"),
    [
        (
            {"broker.spool.type": "hostPath"},
            {"hostPath": {"path": "/mnt/disks/gazette", "type": "DirectoryOrCreate"}},
        ),
        (
            {
                "broker.spool.type": "emptyDir",
                "broker.spool.emptyDir.medium": "Memory",
                "broker.spool.size": "1Gi",
            },
            {"emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        ),
    ],
    ids=["hostPath", "memory"],
)
def test_spool_choices(
    helm_bin: pathlib.Path, sets: dict[str, Any], volume: dict[str, Any]
) -> None:
    objects = helm.template(helm_bin, sets=sets)
    spec = _one(objects, "StatefulSet", "-broker")["spec"]["template"]["spec"]
    (spool,) = [v for v in spec["volumes"] if v["name"] == "spool"]
    assert {k: v for k, v in spool.items() if k != "name"} == volume
    if "hostPath" in volume:
        mount = next(m for m in _container(spec, "broker")["volumeMounts"] if m["name"] == "spool")
        assert mount["subPathExpr"] == "$(BROKER_ID)"


@pytest.mark.parametrize(
    ("sets", "store", "env"),
    [
        (
            {
                "storage.trialServer.enabled": False,
                "storage.type": "gcs",
                "storage.bucket": "frags",
                "storage.gcs.credentialsSecret": "gcs-key",
            },
            "gs://frags/fragments/",
            {"GOOGLE_APPLICATION_CREDENTIALS": "/var/run/secrets/gazette/gcs/service-account.json"},
        ),
        (
            {
                "storage.trialServer.enabled": False,
                "storage.type": "azure",
                "storage.bucket": "frags",
                "storage.azure.accountName": "acct",
                "storage.azure.credentialsSecret": "az",
            },
            "azure://acct/frags/fragments/",
            {"AZURE_ACCOUNT_NAME": "acct"},
        ),
        (
            {
                "storage.trialServer.enabled": False,
                "storage.s3.endpoint": "https://s3.example.com",
                "storage.s3.credentialsSecret": "s3",
            },
            "s3://gazette/fragments/?endpoint=https%3A%2F%2Fs3.example.com&region=us-east-1",
            {"AWS_REGION": "us-east-1"},
        ),
    ],
    ids=["gcs", "azure", "s3"],
)
def test_bucket_settings(
    helm_bin: pathlib.Path, sets: dict[str, Any], store: str, env: dict[str, str]
) -> None:
    objects = helm.template(helm_bin, sets=sets)
    assert _one(objects, "ConfigMap", "-store")["data"]["store"] == store
    spec = _one(objects, "StatefulSet", "-broker")["spec"]["template"]["spec"]
    broker_env = _env(_container(spec, "broker"))
    for key, value in env.items():
        assert broker_env[key] == value
    assert not _by_kind(objects, "Deployment") or not [
        d for d in _by_kind(objects, "Deployment") if d["metadata"]["name"].endswith("-s3")
    ]


def test_external_etcd(helm_bin: pathlib.Path) -> None:
    objects = helm.template(
        helm_bin,
        sets={"etcd.bundled.enabled": False, "etcd.external.endpoint": "http://etcd.infra:2379"},
    )
    assert not [o for o in objects if o["metadata"]["name"].endswith("-etcd")]
    for kind, suffix, name in (
        ("StatefulSet", "-broker", "broker"),
        ("Deployment", "-operator", "operator"),
    ):
        spec = _one(objects, kind, suffix)["spec"]["template"]["spec"]
        assert _env(_container(spec, name))["ETCD_ADDRESS"] == "http://etcd.infra:2379"


# --- bad values fail with the schema's message -----------------------------------


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"broker.replicas": 0}, "at '/broker/replicas': minimum: got 0, want 1"),
        ({"broker.spool.type": "nfs"}, "at '/broker/spool/type': value must be one of"),
        ({"storage.bucket": ""}, "at '/storage/bucket': minLength"),
        ({"storage.bucket": None}, "at '/storage': missing property 'bucket'"),
        ({"etcd.bundled.enabled": False}, "at '/etcd/external/endpoint': minLength"),
        ({"zone.from": "guess"}, "at '/zone/from': value must be one of"),
        ({"broker.drainTimeout": "2 minutes"}, "at '/broker/drainTimeout'"),
        ({"brokers.replicas": 3}, "additional properties 'brokers' not allowed"),
    ],
    ids=[
        "replicas-0",
        "spool-type",
        "empty-bucket",
        "missing-bucket",
        "etcd-endpoint",
        "zone-from",
        "duration",
        "typo",
    ],
)
def test_bad_values_fail_with_a_schema_message(
    helm_bin: pathlib.Path, sets: dict[str, Any], message: str
) -> None:
    args = helm.template_args(sets={k: v for k, v in sets.items() if v is not None})
    if None in sets.values():
        args += [arg for k, v in sets.items() if v is None for arg in ("--set", f"{k}=null")]
    proc = helm.run(helm_bin, *args)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert message in proc.stderr, proc.stderr


def test_short_grace_period_fails_naming_the_drain(helm_bin: pathlib.Path) -> None:
    proc = helm.run(
        helm_bin, *helm.template_args(sets={"broker.terminationGracePeriodSeconds": 60})
    )
    assert proc.returncode != 0
    assert "must be at least broker.drainTimeout (120s)" in proc.stderr, proc.stderr


def test_chart_crds_are_the_repository_crds() -> None:
    """charts/gazette/crds/ is a copy of crds/ (rendered by `make crds`): keep them identical."""
    ours = sorted(p.name for p in (helm.CHART / "crds").glob("*.yaml"))
    theirs = sorted(p.name for p in (helm.REPO / "crds").glob("*.yaml"))
    assert ours == theirs
    _, mismatch, errors = filecmp.cmpfiles(
        helm.CHART / "crds", helm.REPO / "crds", theirs, shallow=False
    )
    assert not mismatch and not errors, (
        f"charts/gazette/crds differs from crds/ in {mismatch + errors}: "
        "cp crds/*.yaml charts/gazette/crds/"
    )


# --- a real kube-apiserver accepts every rendered object ---------------------------

DRY_RUNS = {
    "default": {},
    "production": {"values": [PRODUCTION]},
    "node-zones": {
        "kube_version": "1.31.0",
        "sets": {
            "consumers": [{"name": "sum", "app": "stream_sum:Summer", "replicas": 3}],
            "operator.allNamespaces": True,
        },
    },
    "gcs-hostpath": {
        "sets": {
            "storage.trialServer.enabled": False,
            "storage.type": "gcs",
            "storage.gcs.credentialsSecret": "gcs-key",
            "broker.spool.type": "hostPath",
            "etcd.bundled.enabled": False,
            "etcd.external.endpoint": "http://etcd.infra:2379",
        }
    },
}


@pytest.fixture
def dry_run_namespace(kube: kubeapi.KubeAPIServer) -> Iterator[str]:
    import secrets

    name = f"helm-{secrets.token_hex(4)}"
    kube.kubectl("create", "namespace", name)
    yield name


@pytest.mark.parametrize("case", sorted(DRY_RUNS))
def test_server_side_dry_run_accepts_every_object(
    helm_bin: pathlib.Path, kube: kubeapi.KubeAPIServer, dry_run_namespace: str, case: str
) -> None:
    kwargs: dict[str, Any] = {"kube_version": kubeapi.k8s_version(), **DRY_RUNS[case]}
    objects = helm.template(helm_bin, namespace=dry_run_namespace, **kwargs)
    manifest = yaml.safe_dump_all(objects)
    proc = kube.kubectl(
        "apply",
        "--dry-run=server",
        "--namespace",
        dry_run_namespace,
        "-o",
        "json",
        "-f",
        "-",
        input=manifest,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    accepted = json.loads(proc.stdout)
    items = accepted.get("items", [accepted])
    assert sorted((o["kind"], o["metadata"]["name"]) for o in items) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in objects
    )


def test_helm_install_against_the_api_server(
    helm_bin: pathlib.Path, kube: kubeapi.KubeAPIServer, dry_run_namespace: str
) -> None:
    """`helm install` itself (capabilities and lookup from the server; CRDs already there).

    No controller-manager runs, so hooks (the bucket Job) are skipped: nothing would run
    them. Bad values fail here too, with the schema's message, before anything is created.
    """
    env = {"KUBECONFIG": str(kube.kubeconfig)}
    base = ["--namespace", dry_run_namespace, "--no-hooks", "--timeout", "60s"]
    bad = helm.run(
        helm_bin, "install", "bad", str(helm.CHART), *base, "--set", "broker.replicas=0", env=env
    )
    assert bad.returncode != 0
    assert "at '/broker/replicas': minimum: got 0, want 1" in bad.stderr, bad.stderr
    proc = helm.run(helm_bin, "install", "gazette", str(helm.CHART), *base, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "zones from: podLabel" in proc.stdout  # 1.36: the pods' topology labels
    sts = json.loads(
        kube.kubectl(
            "get", "statefulset", "gazette-broker", "-n", dry_run_namespace, "-o", "json"
        ).stdout
    )
    assert sts["spec"]["replicas"] == 3
    secret = kube.kubectl(
        "get", "secret", "gazette-s3", "-n", dry_run_namespace, "-o", "json"
    ).stdout
    keys = json.loads(secret)["data"]
    # An upgrade keeps the trial server's generated credentials (lookup).
    up = helm.run(helm_bin, "upgrade", "gazette", str(helm.CHART), *base, env=env)
    assert up.returncode == 0, up.stderr
    again = kube.kubectl(
        "get", "secret", "gazette-s3", "-n", dry_run_namespace, "-o", "json"
    ).stdout
    assert json.loads(again)["data"] == keys
    down = helm.run(
        helm_bin, "uninstall", "gazette", "--namespace", dry_run_namespace, "--no-hooks", env=env
    )
    assert down.returncode == 0, down.stderr
