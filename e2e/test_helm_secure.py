"""The chart with authorization and TLS on: keys and certificates from Secrets.

``charts/gazette/values-secure.yaml`` (over the production values) names a Secret of
auth keys, the brokers' and the clients' certificates (cert-manager's shape:
``tls.crt``, ``tls.key``, ``ca.crt``), and an external etcd with client certificates and
a password. These tests render it and check what each process is given (files, never
key material in the environment, except the clients' signing keys), refuse bad
security values with the schema's or the chart's message, and install it on a real
kube-apiserver (the ``kube`` fixture) after creating the Secrets from a throwaway CA, as
cert-manager would: a server-side dry run of every object, then ``helm install``.
"""

from __future__ import annotations

import base64
import datetime
import json
import pathlib
import secrets
from collections.abc import Iterator
from typing import Any

import helm
import pytest
import yaml
from apiserver import kubeapi
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180, func_only=True)]

SECURE = [helm.CHART / "values-production.yaml", helm.CHART / "values-secure.yaml"]
MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"


def _one(objects: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {[o['metadata']['name'] for o in found]}"
    return found[0]


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]
    return spec["template"]["spec"] if "template" in spec else spec


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = _pod_spec(obj)["containers"]
    return containers[0]


def _env(obj: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(obj).get("env", [])}


def _mounted(obj: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Mount path -> (the Secret mounted there, read-only) of the first container."""
    secrets_by_volume = {
        v["name"]: v["secret"]["secretName"] for v in _pod_spec(obj)["volumes"] if "secret" in v
    }
    return {
        m["mountPath"]: (secrets_by_volume[m["name"]], bool(m.get("readOnly")))
        for m in _container(obj).get("volumeMounts", [])
        if m["name"] in secrets_by_volume
    }


def _render(helm_bin: pathlib.Path, **kwargs: Any) -> list[dict[str, Any]]:
    return helm.template(helm_bin, values=SECURE, kube_version="1.36.0", **kwargs)


def test_secure_values_lint(helm_bin: pathlib.Path) -> None:
    args = ["lint", "--strict", str(helm.CHART)]
    for path in SECURE:
        args += ["-f", str(path)]
    proc = helm.run(helm_bin, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_brokers_get_keys_and_certificates_as_files(helm_bin: pathlib.Path) -> None:
    objects = _render(helm_bin, api_versions=[MONITOR_API])
    sts = _one(objects, "StatefulSet", "-broker")
    env = _env(sts)
    # Auth keys as a reloadable file, never as a value in the pod spec.
    assert env["BROKER_AUTH_KEYS_FILE"] == "/etc/gazette/auth/auth-keys"
    assert "BROKER_AUTH_KEYS" not in env
    assert env["BROKER_SERVER_CERT_FILE"] == "/etc/gazette/tls/broker/tls.crt"
    assert env["BROKER_SERVER_CERT_KEY_FILE"] == "/etc/gazette/tls/broker/tls.key"
    assert env["BROKER_SERVER_CA_FILE"] == "/etc/gazette/tls/broker/ca.crt"
    # Peers: the broker's own certificate (no peer Secret set).
    assert env["BROKER_PEER_CERT_FILE"] == "/etc/gazette/tls/peer/tls.crt"
    assert env["BROKER_PEER_CA_FILE"] == "/etc/gazette/tls/peer/ca.crt"
    assert env["ETCD_ADDRESS"].count("https://") == 3
    assert env["ETCD_CERT_FILE"] == "/etc/gazette/tls/etcd/tls.crt"
    assert env["ETCD_TRUSTED_CA_FILE"] == "/etc/gazette/tls/etcd/ca.crt"
    assert env["ETCD_USERNAME"] == "gazette"
    assert env["ETCD_PASSWORD_FILE"] == "/etc/gazette/etcd/password/password"
    # https:// endpoints in etcd name the pod's DNS name, which the certificate can cover.
    assert env["BROKER_HOST"] == "$(BROKER_ID).gazette-broker-headless.default.svc"
    names = [e["name"] for e in _container(sts)["env"]]
    assert names.index("BROKER_ID") < names.index("BROKER_HOST")  # $(BROKER_ID) expands
    assert _mounted(sts) == {
        "/etc/gazette/auth": ("gazette-auth-keys", True),
        "/etc/gazette/tls/broker": ("gazette-broker-tls", True),
        "/etc/gazette/tls/peer": ("gazette-broker-tls", True),
        "/etc/gazette/tls/etcd": ("gazette-etcd-client-tls", True),
        "/etc/gazette/etcd/password": ("gazette-etcd-password", True),
    }
    # The auth keys directory is mounted whole (no subPath): the kubelet refreshes it
    # when the Secret changes, and the broker reloads the file.
    auth = next(m for m in _container(sts)["volumeMounts"] if m["name"] == "auth-keys")
    assert "subPath" not in auth
    # The kubelet can't present a client certificate: readiness is an exec probe.
    probe = _container(sts)["readinessProbe"]
    assert "exec" in probe and "httpGet" not in probe
    assert "BROKER_PEER_CERT_FILE" in probe["exec"]["command"][-1]
    # Clients of the release dial https.
    store = _one(objects, "ConfigMap", "-store")["data"]
    assert store["brokerAddress"] == "https://gazette-broker.default.svc:8080"
    monitor = _one(objects, "ServiceMonitor", "gazette")
    assert monitor["spec"]["endpoints"][0]["scheme"] == "https"


def test_clients_and_operator_get_what_they_use(helm_bin: pathlib.Path) -> None:
    objects = _render(helm_bin)
    consumer = _one(objects, "StatefulSet", "-stream-sum")
    env = _env(consumer)
    # A client signs its tokens: the keys from the Secret's key, by reference.
    assert env["BROKER_AUTH_KEYS"] == {
        "secretKeyRef": {"name": "gazette-auth-keys", "key": "auth-keys"}
    }
    assert env["BROKER_ADDRESS"].startswith("https://")
    assert env["BROKER_CERT_FILE"] == "/etc/gazette/tls/client/tls.crt"
    assert env["BROKER_CERT_KEY_FILE"] == "/etc/gazette/tls/client/tls.key"
    assert env["BROKER_TRUSTED_CA_FILE"] == "/etc/gazette/tls/client/ca.crt"
    assert env["ETCD_CERT_KEY_FILE"] == "/etc/gazette/tls/etcd/tls.key"
    assert _mounted(consumer)["/etc/gazette/tls/client"] == ("gazette-client-tls", True)
    assert "/etc/gazette/tls/broker" not in _mounted(consumer)  # not the brokers' key

    operator = _one(objects, "Deployment", "-operator")
    oenv = _env(operator)
    assert oenv["ETCD_CERT_FILE"] == "/etc/gazette/tls/etcd/tls.crt"
    assert oenv["ETCD_PASSWORD_FILE"] == "/etc/gazette/etcd/password/password"
    # Shards' lag reads write heads from brokers: it signs its own narrow tokens from the
    # keys, which it gets as the brokers do (a read-only file that follows the Secret),
    # never as a value in its environment; and over https it presents the clients'
    # certificate (the brokers require one), not the brokers' own.
    assert "--shard-lag-interval=15" in _container(operator)["args"]
    assert {k: v for k, v in oenv.items() if k.startswith("BROKER_")} == {
        "BROKER_AUTH_KEYS_FILE": "/etc/gazette/auth/auth-keys",
        "BROKER_CERT_FILE": "/etc/gazette/tls/client/tls.crt",
        "BROKER_CERT_KEY_FILE": "/etc/gazette/tls/client/tls.key",
        "BROKER_TRUSTED_CA_FILE": "/etc/gazette/tls/client/ca.crt",
    }
    # Consumers serve plaintext here: nothing of theirs.
    assert not [k for k in oenv if k.startswith("CONSUMER_")]
    assert _mounted(operator) == {
        "/etc/gazette/auth": ("gazette-auth-keys", True),
        "/etc/gazette/tls/client": ("gazette-client-tls", True),
        "/etc/gazette/tls/etcd": ("gazette-etcd-client-tls", True),
        "/etc/gazette/etcd/password": ("gazette-etcd-password", True),
    }
    mount = next(m for m in _container(operator)["volumeMounts"] if m["name"] == "auth-keys")
    assert "subPath" not in mount  # The kubelet refreshes a rotated Secret.
    (volume,) = [v for v in _pod_spec(operator)["volumes"] if v["name"] == "auth-keys"]
    assert volume["secret"] == {"secretName": "gazette-auth-keys", "defaultMode": 0o440}

    test_pod = _one(objects, "Pod", "-test-roundtrip")
    tenv = _env(test_pod)
    assert tenv["BROKER_ADDRESS"].startswith("https://")
    assert tenv["BROKER_CERT_FILE"] == "/etc/gazette/tls/client/tls.crt"
    assert "BROKER_AUTH_KEYS" in tenv
    assert not [k for k in tenv if k.startswith("ETCD_")]


@pytest.mark.parametrize(
    ("sets", "lag_args"),
    [
        # Lag never checked: nothing to sign, so no keys.
        ({"operator.shardLagInterval": 0}, ["--shard-lag-interval=0"]),
        # Authorization off: no keys to give.
        (
            {"security.authKeys.generate": False, "security.authKeys.secretName": ""},
            ["--shard-lag-interval=15"],
        ),
    ],
)
def test_the_operator_gets_no_keys_it_would_not_use(
    helm_bin: pathlib.Path, sets: dict[str, Any], lag_args: list[str]
) -> None:
    objects = helm.template(helm_bin, kube_version="1.36.0", sets=sets)
    operator = _one(objects, "Deployment", "-operator")
    assert [a for a in _container(operator)["args"] if a.startswith("--shard-lag")] == lag_args
    assert not [k for k in _env(operator) if k.startswith("BROKER_")]
    assert "/etc/gazette/auth" not in _mounted(operator)
    assert not [v for v in _pod_spec(operator)["volumes"] if v["name"] == "auth-keys"]
    # The brokers keep theirs whatever the operator does.
    if "operator.shardLagInterval" in sets:
        broker = _one(objects, "StatefulSet", "-broker")
        assert _mounted(broker)["/etc/gazette/auth"] == ("gazette-auth-keys", True)


@pytest.mark.parametrize(
    ("sets", "keys", "certificate"),
    [
        # Lag never checked: it dials no broker or consumer, so neither keys nor certificate.
        (
            {"operator.shardLagInterval": 0, "security.tls.consumer.secretName": "sum-tls"},
            False,
            False,
        ),
        # Authorization off, TLS on: the certificate alone.
        ({"security.authKeys.secretName": "", "security.authKeys.generate": False}, False, True),
    ],
)
def test_the_operators_certificate_goes_with_its_lag_checks(
    helm_bin: pathlib.Path, sets: dict[str, Any], keys: bool, certificate: bool
) -> None:
    objects = _render(helm_bin, sets=sets)
    operator = _one(objects, "Deployment", "-operator")
    env, mounted = _env(operator), _mounted(operator)
    assert ("BROKER_AUTH_KEYS_FILE" in env) == keys
    assert ("/etc/gazette/auth" in mounted) == keys
    assert ("BROKER_CERT_FILE" in env) == certificate
    assert ("/etc/gazette/tls/client" in mounted) == certificate
    assert not [k for k in env if k.startswith("CONSUMER_")]
    assert not [m for m in mounted if m.startswith("/etc/gazette/tls/consumer")]
    # etcd's, which it needs whatever it checks.
    assert mounted["/etc/gazette/tls/etcd"] == ("gazette-etcd-client-tls", True)
    # The consumers keep their client certificate whatever the operator does.
    consumer = _one(objects, "StatefulSet", "-stream-sum")
    assert _mounted(consumer)["/etc/gazette/tls/client"] == ("gazette-client-tls", True)


def test_the_default_install_gives_the_operator_the_keys_file(helm_bin: pathlib.Path) -> None:
    """Authorization is on by default, so the default install's lag needs the keys."""
    objects = helm.template(helm_bin, kube_version="1.36.0")
    operator = _one(objects, "Deployment", "-operator")
    assert _env(operator)["BROKER_AUTH_KEYS_FILE"] == "/etc/gazette/auth/auth-keys"
    assert _mounted(operator)["/etc/gazette/auth"] == ("gazette-auth-keys", True)


def test_consumer_server_tls(helm_bin: pathlib.Path) -> None:
    objects = _render(helm_bin, sets={"security.tls.consumer.secretName": "stream-sum-tls"})
    consumer = _one(objects, "StatefulSet", "-stream-sum")
    env = _env(consumer)
    assert env["CONSUMER_SERVER_CERT_FILE"] == "/etc/gazette/tls/consumer/tls.crt"
    assert env["CONSUMER_SERVER_CA_FILE"] == "/etc/gazette/tls/consumer/ca.crt"
    assert env["CONSUMER_HOST"] == "$(CONSUMER_ID).gazette-stream-sum.default.svc"
    assert "exec" in _container(consumer)["readinessProbe"]

    # The operator's lag Stat goes to https:// consumers that ask for a client
    # certificate: it presents the clients' (as the consumers' probes do) and trusts the
    # consumers' CA, of whose Secret it gets that one key, never the private key.
    operator = _one(objects, "Deployment", "-operator")
    oenv = _env(operator)
    assert {k: v for k, v in oenv.items() if k.startswith("CONSUMER_")} == {
        "CONSUMER_TRUSTED_CA_FILE": "/etc/gazette/tls/consumer-ca/ca.crt",
        "CONSUMER_CERT_FILE": "/etc/gazette/tls/client/tls.crt",
        "CONSUMER_CERT_KEY_FILE": "/etc/gazette/tls/client/tls.key",
    }
    assert _mounted(operator)["/etc/gazette/tls/consumer-ca"] == ("stream-sum-tls", True)
    assert "/etc/gazette/tls/consumer" not in _mounted(operator)
    (volume,) = [v for v in _pod_spec(operator)["volumes"] if v["name"] == "tls-consumer-ca"]
    assert volume["secret"] == {
        "secretName": "stream-sum-tls",
        "defaultMode": 0o440,
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    # Without a CA key consumers ask for no certificate, and the root pool is trusted.
    objects = _render(
        helm_bin,
        sets={
            "security.tls.consumer.secretName": "stream-sum-tls",
            "security.tls.consumer.caKey": "",
        },
    )
    operator = _one(objects, "Deployment", "-operator")
    assert not [k for k in _env(operator) if k.startswith("CONSUMER_")]
    assert not [v for v in _pod_spec(operator)["volumes"] if v["name"] == "tls-consumer-ca"]


def test_authorization_is_on_by_default_with_keys_of_the_charts_own(
    helm_bin: pathlib.Path,
) -> None:
    objects = helm.template(helm_bin, kube_version="1.36.0")
    secret = _one(objects, "Secret", "-auth-keys")
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    key = base64.b64decode(base64.b64decode(secret["data"]["auth-keys"]))
    assert len(key) == 32
    sts = _one(objects, "StatefulSet", "-broker")
    assert _env(sts)["BROKER_AUTH_KEYS_FILE"] == "/etc/gazette/auth/auth-keys"
    assert _mounted(sts) == {
        "/etc/gazette/auth": ("gazette-auth-keys", True),
        "/etc/gazette/etcd/password": ("gazette-etcd-auth", True),
    }
    # helm test's gazctl signs with the same keys.
    assert _env(_one(objects, "Pod", "-test-roundtrip"))["BROKER_AUTH_KEYS"] == {
        "secretKeyRef": {"name": "gazette-auth-keys", "key": "auth-keys"}
    }
    # Each render makes a new key (helm install's lookup keeps an installed one).
    again = _one(helm.template(helm_bin, kube_version="1.36.0"), "Secret", "-auth-keys")
    assert again["data"] != secret["data"]


def test_without_security_nothing_changes(helm_bin: pathlib.Path) -> None:
    objects = helm.template(
        helm_bin,
        kube_version="1.36.0",
        sets={"security.authKeys.generate": False, "etcd.bundled.auth.enabled": False},
    )
    assert not [o for o in objects if o["kind"] == "Secret" and "auth" in o["metadata"]["name"]]
    sts = _one(objects, "StatefulSet", "-broker")
    env = _env(sts)
    assert not [
        k
        for k in env
        if "CERT" in k
        or "AUTH" in k
        or (k.startswith("ETCD_") and k not in ("ETCD_ADDRESS", "ETCD_PREFIX"))
    ]
    assert env["BROKER_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert _container(sts)["readinessProbe"]["httpGet"]["path"] == "/debug/ready"
    assert _mounted(sts) == {}


def test_the_bundled_etcd_has_users_of_the_charts_own(helm_bin: pathlib.Path) -> None:
    objects = helm.template(helm_bin, kube_version="1.36.0")
    secret = _one(objects, "Secret", "-etcd-auth")
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    passwords = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert sorted(passwords) == ["password", "root-password"]
    assert all(len(p) == 32 for p in passwords.values())
    job = _one(objects, "Job", "-etcd-auth")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    command = _container(job)["command"]
    assert command[:3] == ["python", "-m", "gazette.keyspace.auth_setup"]
    assert "--user=gazette" in command
    # Ranges as the processes read them: a root key and everything after it.
    assert "--prefix=/gazette/cluster" in command and "--prefix=/gazette/consumers" in command
    assert _mounted(job) == {"/etc/gazette/etcd-auth": ("gazette-etcd-auth", True)}
    # Brokers (and consumers, the operator) sign in with the user's password alone.
    for kind, suffix in (("StatefulSet", "-broker"), ("Deployment", "-operator")):
        obj = _one(objects, kind, suffix)
        env = _env(obj)
        assert env["ETCD_USERNAME"] == "gazette", suffix
        assert env["ETCD_PASSWORD_FILE"] == "/etc/gazette/etcd/password/password", suffix
        (volume,) = [v for v in _pod_spec(obj)["volumes"] if v["name"] == "etcd-password"]
        assert volume["secret"]["items"] == [{"key": "password", "path": "password"}], suffix
    # The etcd NetworkPolicy lets the Job in.
    policy = _one(objects, "NetworkPolicy", "-etcd")
    (components,) = [
        e["values"]
        for e in policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchExpressions"]
        if e["key"] == "app.kubernetes.io/component"
    ]
    assert "etcd-auth" in components
    off = helm.template(helm_bin, kube_version="1.36.0", sets={"etcd.bundled.auth.enabled": False})
    assert not [o for o in off if o["metadata"]["name"].endswith("-etcd-auth")]
    assert "ETCD_USERNAME" not in _env(_one(off, "StatefulSet", "-broker"))


def test_debug_token_required_is_a_value_with_the_scrape_token_beside_it(
    helm_bin: pathlib.Path,
) -> None:
    token = {"type": "Bearer", "credentials": {"name": "metrics-token", "key": "token"}}
    objects = helm.template(
        helm_bin,
        kube_version="1.36.0",
        api_versions=[MONITOR_API],
        sets={
            "security.debugTokenRequired": True,
            "monitoring.serviceMonitor.authorization": token,
        },
    )
    sts = _one(objects, "StatefulSet", "-broker")
    assert _env(sts)["BROKER_DEBUG_TOKEN_REQUIRED"] == "true"
    # Readiness stays a plain GET: /debug/ready needs no token.
    assert _container(sts)["readinessProbe"]["httpGet"]["path"] == "/debug/ready"
    monitor = _one(objects, "ServiceMonitor", "gazette")
    assert monitor["spec"]["endpoints"][0]["authorization"] == token
    # Off by default, and then nothing changes.
    plain = helm.template(helm_bin, kube_version="1.36.0", api_versions=[MONITOR_API])
    assert "BROKER_DEBUG_TOKEN_REQUIRED" not in _env(_one(plain, "StatefulSet", "-broker"))
    assert "authorization" not in _one(plain, "ServiceMonitor", "gazette")["spec"]["endpoints"][0]


BAD = {
    "debug token without keys": (
        {"security.debugTokenRequired": True, "security.authKeys.generate": False},
        "security.debugTokenRequired needs authorization keys",
    ),
    "certificate without its key": (
        {"security.tls.broker.secretName": "x", "security.tls.broker.keyKey": ""},
        "at '/security/tls/broker/keyKey': minLength: got 0, want 1",
    ),
    "secret name": (
        {"security.authKeys.secretName": "Not_A_Name"},
        "at '/security/authKeys/secretName'",
    ),
    "endpoint list": (
        {"etcd.bundled.enabled": False, "etcd.external.endpoint": r"https://a:2379\,b:2379"},
        "at '/etcd/external/endpoint'",
    ),
    "etcd tls with the bundled etcd": (
        {"etcd.tls.secretName": "etcd-client"},
        "etcd.tls, etcd.username and etcd.passwordSecret are for an etcd you run",
    ),
    "unknown key": ({"security.tls.server": {}}, "additional properties 'server' not allowed"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_security_values_fail_at_install(helm_bin: pathlib.Path, case: str) -> None:
    sets, message = BAD[case]
    proc = helm.run(helm_bin, *helm.template_args(sets=sets))
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


# --- on a real kube-apiserver, with the Secrets cert-manager would make --------------


def _ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gazette-test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _tls_secret(
    name: str, ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate], dns: list[str]
) -> dict[str, Any]:
    """A kubernetes.io/tls Secret as cert-manager writes it: tls.crt, tls.key, ca.crt."""
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = {
        "tls.crt": cert.public_bytes(serialization.Encoding.PEM),
        "tls.key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        "ca.crt": ca_cert.public_bytes(serialization.Encoding.PEM),
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name},
        "data": {k: base64.b64encode(v).decode() for k, v in pem.items()},
    }


@pytest.fixture
def secure_namespace(kube: kubeapi.KubeAPIServer) -> Iterator[str]:
    """A fresh namespace holding the Secrets values-secure.yaml names."""
    ns = f"secure-{secrets.token_hex(4)}"
    kube.kubectl("create", "namespace", ns)
    ca = _ca()
    broker_dns = [
        f"*.gazette-broker-headless.{ns}.svc",
        f"gazette-broker.{ns}.svc",
        "gazette-broker",
    ]
    objects = [
        _tls_secret("gazette-broker-tls", ca, broker_dns),
        _tls_secret("gazette-client-tls", ca, ["gazette-client"]),
        _tls_secret("gazette-etcd-client-tls", ca, ["gazette"]),
    ]
    keys = base64.b64encode(secrets.token_bytes(32)).decode()
    for name, key, value in (
        ("gazette-auth-keys", "auth-keys", keys),
        ("gazette-etcd-password", "password", secrets.token_urlsafe(16)),
    ):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name},
                "stringData": {key: value},
            }
        )
    kube.kubectl(
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
    )
    yield ns
    kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_secure_release_on_the_api_server(
    helm_bin: pathlib.Path, kube: kubeapi.KubeAPIServer, secure_namespace: str
) -> None:
    ns = secure_namespace
    objects = helm.template(
        helm_bin, values=SECURE, namespace=ns, kube_version=kubeapi.k8s_version()
    )
    proc = kube.kubectl(
        "apply", "--dry-run=server", "--namespace", ns, "-o", "json", "-f", "-",
        input=yaml.safe_dump_all(objects), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    accepted = json.loads(proc.stdout)
    items = accepted.get("items", [accepted])
    assert sorted((o["kind"], o["metadata"]["name"]) for o in items) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in objects
    )

    env = {"KUBECONFIG": str(kube.kubeconfig)}
    base = ["--namespace", ns, "--no-hooks", "--timeout", "60s"]
    for path in SECURE:
        base += ["-f", str(path)]
    install = helm.run(helm_bin, "install", "gazette", str(helm.CHART), *base, env=env)
    assert install.returncode == 0, install.stderr
    sts = json.loads(
        kube.kubectl("get", "statefulset", "gazette-broker", "-n", ns, "-o", "json").stdout
    )
    # What the API server stored mounts the Secrets that exist, by name.
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    for volume, secret in (
        ("auth-keys", "gazette-auth-keys"),
        ("tls-broker", "gazette-broker-tls"),
        ("tls-etcd", "gazette-etcd-client-tls"),
    ):
        assert volumes[volume]["secret"]["secretName"] == secret
        kube.kubectl("get", "secret", secret, "-n", ns)
    stored = json.loads(
        kube.kubectl("get", "secret", "gazette-broker-tls", "-n", ns, "-o", "json").stdout
    )
    cert = x509.load_pem_x509_certificate(base64.b64decode(stored["data"]["tls.crt"]))
    host = f"gazette-broker-0.gazette-broker-headless.{ns}.svc"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # The advertised host (BROKER_HOST of pod 0) is covered by the wildcard SAN.
    assert any(
        name.startswith("*.") and host.endswith(name[1:]) and "." not in host[: -len(name) + 1]
        for name in sans.get_values_for_type(x509.DNSName)
    ), sans
    # The operator's client certificate, for its lag checks over https.
    operator = json.loads(
        kube.kubectl("get", "deployment", "gazette-operator", "-n", ns, "-o", "json").stdout
    )
    ovolumes = {v["name"]: v for v in operator["spec"]["template"]["spec"]["volumes"]}
    assert ovolumes["tls-client"]["secret"]["secretName"] == "gazette-client-tls"
    down = helm.run(helm_bin, "uninstall", "gazette", "--namespace", ns, "--no-hooks", env=env)
    assert down.returncode == 0, down.stderr
