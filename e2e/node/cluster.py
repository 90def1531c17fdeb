"""A real Kubernetes node on this machine, joined to the e2e kube-apiserver.

Tier 3 of the chart's end-to-end tests (``make e2e-node``): where tier 1 (kwok) only
schedules pods, here they run. The control plane is the one the other tiers run
(etcd 3.6, kube-apiserver, controller-manager, scheduler from ``e2e/apiserver``); the
node beside it is

* a Linux bridge the tier makes, whose gateway address is the only address the
  apiserver, the kubelet's server and the cluster DNS listen on (besides loopback), so
  that pods reach them and nothing outside this machine does;
* Debian's containerd (cgroupfs, ``restrict_oom_score_adj``, a sandbox image built here
  from ``standins/pause.c``), with the bridge CNI plugin of containernetworking-plugins;
* kubelet and kube-proxy built from the same ``k8s.io/kubernetes`` module as the
  apiserver (``e2e/apiserver/build.sh kubelet kube-proxy``, cached in the tool cache),
  each signing in with a token of its own (``system:node:<name>`` in ``system:nodes``
  under Node authorization, ``system:kube-proxy``), never ``system:masters``;
* cluster DNS (``dns.ClusterDNS``) in the test process.

What it changes on the machine is written to ``STATE/state.json`` before it is changed,
and ``stop()`` puts it back even when start failed half way: the kernel settings the
kubelet and the bridge plugin change (``kernel.panic``, ``vm.overcommit_memory``,
``net.ipv4.ip_forward``, ...), every process it started and the containers' shims and
processes (found by the containerd socket they name and by the node's cgroup), every
mount under its folders, the network namespaces containerd made, kube-proxy's iptables
chains and the bridge. A run that was killed outright leaves the state file, and
``python -m node.cleanup`` (run from e2e/), or the next start, undoes it.

Only one node runs at a time (its folders and cgroup are fixed): a second start while
a live one holds the lock fails.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import pathlib
import secrets
import shlex
import signal
import subprocess
import time
import types
from typing import Any

import yaml
from apiserver import kubeapi

from gazette.keyspace import testing as etcd_testing

from . import images
from .dns import ClusterDNS

__all__ = ["STATE", "NodeCluster", "cleanup"]

#: The node's own folder: containerd's state, the kubelet's root, CNI data, the state file.
STATE = pathlib.Path(os.environ.get("GAZETTE_NODE_STATE", "/var/lib/gazette-e2e-node"))
#: The cgroup (v1: in every hierarchy) the kubelet puts every pod under.
CGROUP_ROOT = "gazette-e2e-node"
NODE = "gazette-node-0"
ZONE = "zone-a"
#: The bridge's /24 and gateway; pods get addresses from .2 on.
SUBNET = "10.244.77.0/24"
GATEWAY = "10.244.77.1"
SERVICE_CIDR = "10.96.0.0/16"
#: Kernel settings the kubelet, kube-proxy or the bridge plugin may write; restored on stop.
SYSCTLS = (
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
)
# containerd pins pods' network namespaces here (as /var/run/netns, a link to /run:
# mountinfo names the real path).
NETNS = pathlib.Path(os.path.realpath("/var/run/netns"))


def _read_sysctls() -> dict[str, str]:
    out = {}
    for key in SYSCTLS:
        with contextlib.suppress(OSError):
            out[key] = (pathlib.Path("/proc/sys") / key).read_text().strip()
    return out


def _run(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _cgroup_dirs() -> list[pathlib.Path]:
    """Every folder of the node's cgroup, in every v1 hierarchy (and v2's), deepest first."""
    found: list[pathlib.Path] = []
    base = pathlib.Path("/sys/fs/cgroup")
    roots = [base / CGROUP_ROOT] + [d / CGROUP_ROOT for d in base.iterdir() if d.is_dir()]
    for root in roots:
        if root.is_dir():
            found.extend(p for p in root.rglob("*") if p.is_dir())
            found.append(root)
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def _cgroup_pids() -> set[int]:
    pids: set[int] = set()
    for d in _cgroup_dirs():
        for name in ("cgroup.procs", "tasks"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(x) for x in (d / name).read_text().split())
    return pids


def _pids_naming(text: str) -> set[int]:
    """Processes whose command line holds ``text`` (the containerd socket: its shims)."""
    pids = set()
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if text.encode() in (proc / "cmdline").read_bytes():
                pids.add(int(proc.name))
    pids.discard(os.getpid())
    return pids


def _start_time(pid: int) -> str | None:
    """The start time of ``pid`` (clock ticks since boot): with the pid, names one process."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _mounts_under(prefixes: list[str]) -> list[str]:
    points = []
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == p or point.startswith(p.rstrip("/") + "/") for p in prefixes):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def _unmount(prefixes: list[str]) -> int:
    """Unmount everything under ``prefixes`` (deepest first, lazily when busy)."""
    count = 0
    for _round in range(5):
        points = _mounts_under(prefixes)
        if not points:
            break
        for point in points:
            if _run("umount", point, check=False).returncode != 0:
                _run("umount", "-l", point, check=False)
            count += 1
    return count


def _iptables_chains() -> dict[str, list[str]]:
    """``{"<tool> <table>": [chains]}`` of the node's kind (KUBE-*, CNI-*) now present."""
    out: dict[str, list[str]] = {}
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                text = _run(f"{tool}-save", "-t", table, check=False).stdout
                out[f"{tool} {table}"] = [
                    line[1:].split()[0]
                    for line in text.splitlines()
                    if line.startswith((":KUBE-", ":CNI-"))
                ]
    return out


def _remove_chains(before: dict[str, list[str]]) -> int:
    """Remove the KUBE-*/CNI-* chains that were not there before, and the rules that
    jump to them (the kubelet's and kube-proxy's, the bridge plugin's)."""
    removed = 0
    for key, chains in _iptables_chains().items():
        tool, table = key.split()
        new = set(chains) - set(before.get(key, []))
        if not new:
            continue
        text = _run(f"{tool}-save", "-t", table, check=False).stdout
        for line in text.splitlines():
            if line.startswith("-A ") and line.split()[1] not in new:
                words = shlex.split(line)
                if any(
                    words[i] in ("-j", "-g") and words[i + 1] in new for i in range(len(words) - 1)
                ):
                    _run(tool, "-t", table, "-D", *words[1:], check=False)
        for chain in new:
            _run(tool, "-t", table, "-F", chain, check=False)
        for chain in new:
            _run(tool, "-t", table, "-X", chain, check=False)
            removed += 1
    return removed


def cleanup(state_file: pathlib.Path | None = None, *, log: Any = print) -> bool:
    """Undo what a node recorded in its state file: processes, mounts, netns, iptables
    chains, cgroups, the bridge, kernel settings. Returns False when there was nothing."""
    state_file = state_file or STATE / "state.json"
    if not state_file.exists():
        return False
    state = json.loads(state_file.read_text())
    # Processes first: the node's own daemons, then containerd's shims, then whatever
    # runs in the node's cgroup (the containers), twice (a shim may start one late).
    _kill(
        {
            int(pid)
            for pid, started in state.get("pids", {}).values()
            if _start_time(int(pid)) == started  # the same process, not a reused pid
        }
    )
    sock = state.get("containerd_socket")
    for _ in range(2):
        if sock:
            _kill(_pids_naming(sock))
        _kill(_cgroup_pids())
        time.sleep(0.5)
    for d in _cgroup_dirs():
        with contextlib.suppress(OSError):
            d.rmdir()
    before = set(state.get("netns_before", []))
    made_netns = (
        [str(p) for p in NETNS.glob("cni-*") if p.name not in before] if NETNS.is_dir() else []
    )
    unmounted = _unmount([*state.get("mount_roots", []), *made_netns])
    for path in made_netns:
        with contextlib.suppress(OSError):
            os.unlink(path)
    proxy = state.get("kube_proxy")
    if proxy and os.access(proxy, os.X_OK):
        _run(proxy, "--cleanup", check=False, timeout=60)
    chains = _remove_chains(state.get("iptables_before", {}))
    bridge = state.get("bridge")
    if bridge and pathlib.Path(f"/sys/class/net/{bridge}").exists():
        _run("ip", "link", "delete", bridge, check=False)
    restored = []
    for key, value in state.get("sysctls", {}).items():
        path = pathlib.Path("/proc/sys") / key
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(value + "\n")
                restored.append(f"{key.replace('/', '.')}={value}")
    log(
        f"node cleanup: {unmounted} mounts, {len(made_netns)} netns, {chains} iptables chains "
        "removed; "
        f"restored {', '.join(restored) or 'no kernel settings (none changed)'}"
    )
    state_file.unlink()
    return True


class NodeCluster:
    """The e2e control plane with one real node (``NODE``, zone ``ZONE``) that runs pods.

    ``images`` are refs already in podman's store (``make images``) to put into
    containerd; the stand-ins and pause image of :mod:`node.images` are added.
    """

    def __init__(self, work_dir: pathlib.Path, *, image_refs: dict[str, str]) -> None:
        self.work_dir = work_dir
        self.image_refs = image_refs
        self.bins = kubeapi.bin_dir()
        self._stack = contextlib.ExitStack()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock: Any = None
        self.api: kubeapi.KubeAPIServer
        self.dns: ClusterDNS
        self.standins: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        self.sysctls_before: dict[str, str] = {}
        self.sock = str(STATE / "containerd" / "containerd.sock")

    # --- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> NodeCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.stop()

    def _timed(self, what: str, t0: float) -> None:
        self.timings[what] = time.monotonic() - t0

    def _save_state(self, **extra: Any) -> None:
        path = STATE / "state.json"
        state = json.loads(path.read_text()) if path.exists() else {}
        state.update(extra)
        state["pids"] = {name: (p.pid, _start_time(p.pid)) for name, p in self._procs.items()}
        path.write_text(json.dumps(state, indent=1))

    def _start(self) -> None:
        STATE.mkdir(parents=True, exist_ok=True)
        self._lock = (STATE / "lock").open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise RuntimeError(f"another e2e node holds {STATE / 'lock'}") from None
        cleanup(log=lambda m: print(f"{m} (left by an earlier run)"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.sysctls_before = _read_sysctls()
        proxy_bin = self.bins / "kube-proxy"
        self._save_state(
            sysctls=self.sysctls_before,
            netns_before=sorted(p.name for p in NETNS.glob("*")) if NETNS.is_dir() else [],
            containerd_socket=self.sock,
            mount_roots=[str(STATE), str(self.work_dir)],
            kube_proxy=str(proxy_bin),
            iptables_before=_iptables_chains(),
            bridge=None,
        )
        missing = [b for b in ("kubelet", "kube-proxy") if not os.access(self.bins / b, os.X_OK)]
        if missing:
            t0 = time.monotonic()
            subprocess.run(
                [str(kubeapi.HERE / "build.sh"), str(self.bins.parent.parent), *missing],
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                timeout=3600,
            )
            self._timed("build kubelet, kube-proxy", t0)

        t0 = time.monotonic()
        self.standins = images.standins()
        self._timed("stand-in images", t0)

        # The bridge first: the apiserver listens on its gateway.
        self.bridge = f"gzn{secrets.token_hex(3)}"
        self._save_state(bridge=self.bridge)
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

        t0 = time.monotonic()
        etcd = self._stack.enter_context(kubeapi.kube_etcd(self.work_dir / "etcd"))
        self.node_token = secrets.token_hex(16)
        self.proxy_token = secrets.token_hex(16)
        self.api = self._stack.enter_context(
            kubeapi.KubeAPIServer(
                self.bins,
                etcd.endpoint,
                self.work_dir / "api",
                host=GATEWAY,
                nodes=True,
                tokens=(
                    (self.node_token, f"system:node:{NODE}", "system:nodes"),
                    (self.proxy_token, "system:kube-proxy", "gazette:e2e-node"),
                ),
            )
        )
        self._timed("kube-apiserver ready", t0)
        pki = self.work_dir / "api" / "pki"
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bins / "kube-controller-manager"),
                f"--kubeconfig={self.api.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--cluster-name=gazette-e2e",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.bins / "kube-scheduler"),
                f"--kubeconfig={self.api.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )
        # kube-apiserver reaches the kubelet (logs, exec) as this user.
        self.api.kubectl(
            "create",
            "clusterrolebinding",
            "gazette-e2e-apiserver-kubelet",
            "--clusterrole=system:kubelet-api-admin",
            f"--user={kubeapi.KUBELET_CLIENT}",
        )
        self.dns = self._stack.enter_context(
            ClusterDNS(GATEWAY, self.api.url, self.api.token, (pki / "ca.crt").read_bytes())
        )

        t0 = time.monotonic()
        self._start_containerd()
        self._timed("containerd ready", t0)
        t0 = time.monotonic()
        imported = images.import_into_containerd(
            self.sock, {**self.image_refs, **self.standins}, STATE / "imported.json"
        )
        self._timed(f"images into containerd ({imported} imported)", t0)

        t0 = time.monotonic()
        self._start_kubelet()
        self._wait_node_ready(timeout=120)
        self._timed("node Ready", t0)
        self._start_kube_proxy()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = self.work_dir / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [*etcd_testing.die_with_parent_argv(), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "HOME": str(self.work_dir), **(env or {})},
            )
        self._procs[name] = proc
        self._save_state()

    def check_alive(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            text = (self.work_dir / f"{name}.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    # --- containerd ------------------------------------------------------------------

    def _start_containerd(self) -> None:
        state = STATE / "containerd"
        state.mkdir(parents=True, exist_ok=True)
        cni_conf = STATE / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        # The pods' network: the bridge made above, its gateway their default route.
        # No IP masquerade: pods talk only to each other and to the gateway.
        (cni_conf / "10-gazette-e2e.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "gazette-e2e",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": self.bridge,
                            "isGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(STATE / "cni" / "ipam"),
                            },
                        },
                        {"type": "loopback"},
                    ],
                }
            )
        )
        root = images.containerd_root()
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{state}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
[{cri}]
  sandbox_image = "{self.standins["pause"]}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{cni_conf}"
"""
        path = STATE / "containerd.toml"
        path.write_text(config)
        self._spawn("containerd", ["containerd", "--config", str(path)])
        deadline = time.monotonic() + 60
        while self.ctr("version", check=False).returncode != 0:
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"containerd not up in 60s:\n{self.log_tail('containerd')}")
            time.sleep(0.3)
        self._purge_containers()

    def ctr(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return _run(
            "ctr",
            "--address",
            self.sock,
            "--namespace",
            "k8s.io",
            *args,
            check=check,
            timeout=timeout,
        )

    def _purge_containers(self) -> int:
        """Kill and remove every container in containerd's k8s.io namespace (those of an
        earlier run that died live on in its kept metadata)."""
        tasks = [
            line.split()[0]
            for line in self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:]
            if line.strip()
        ]
        for task in tasks:
            self.ctr("tasks", "kill", "--signal", "SIGKILL", "--all", task, check=False)
        for task in tasks:
            self.ctr("tasks", "delete", "--force", task, check=False)
        containers = self.ctr("containers", "ls", "-q", check=False).stdout.split()
        for c in containers:
            self.ctr("containers", "delete", c, check=False)
        return len(containers)

    # --- kubelet, kube-proxy ---------------------------------------------------------

    def _kubeconfig(self, name: str, token: str) -> pathlib.Path:
        ca = (self.work_dir / "api" / "pki" / "ca.crt").read_text()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.api.url,
                        "certificate-authority-data": base64.b64encode(ca.encode()).decode(),
                    },
                }
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": name}}],
            "current-context": "e2e",
        }
        path = self.work_dir / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def _make_cgroup_root(self) -> None:
        """The kubelet's cgroupRoot, in every v1 hierarchy: it checks it exists (and a new
        cpuset cgroup takes no process until it has CPUs and memory nodes)."""
        base = pathlib.Path("/sys/fs/cgroup")
        for hierarchy in base.iterdir():
            if not hierarchy.is_dir() or hierarchy.name == "unified":
                continue
            path = hierarchy / CGROUP_ROOT
            path.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (path / name).write_text((hierarchy / name).read_text())

    def _start_kubelet(self) -> None:
        self._make_cgroup_root()
        root = STATE / "kubelet"
        root.mkdir(parents=True, exist_ok=True)
        resolv = STATE / "resolv.conf"
        resolv.write_text("# no upstream resolvers: pods resolve cluster names only\n")
        self.kubelet_port = etcd_testing.free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": GATEWAY,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.work_dir / "api" / "pki" / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{CGROUP_ROOT}",
            "failCgroupV1": False,
            "failSwapOn": False,
            "clusterDNS": [GATEWAY],
            "clusterDomain": "cluster.local",
            "resolvConf": str(resolv),
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "imageServiceEndpoint": f"unix://{self.sock}",
            # The disk is shared with other work: no evictions or image GC for it.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "protectKernelDefaults": False,
            "serializeImagePulls": False,
            # Containers' logs in the node's folder (not /var/log/pods).
            "podLogsDir": str(STATE / "pod-logs"),
            "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
        }
        path = self.work_dir / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn(
            "kubelet",
            [
                str(self.bins / "kubelet"),
                f"--config={path}",
                f"--kubeconfig={self._kubeconfig('kubelet', self.node_token)}",
                f"--hostname-override={NODE}",
                f"--node-ip={GATEWAY}",
                f"--root-dir={root}",
                f"--cert-dir={root / 'pki'}",
                f"--node-labels=topology.kubernetes.io/zone={ZONE}",
                "--v=1",
            ],
        )

    def _wait_node_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            out = self.api.kubectl("get", "node", NODE, "-o", "json", check=False)
            if out.returncode == 0:
                node = json.loads(out.stdout)
                if kubeapi.condition(node)[0] == "True":
                    return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"node not Ready in {timeout}s:\n{self.log_tail('kubelet', 60)}"
                )
            time.sleep(0.5)

    def _start_kube_proxy(self) -> None:
        health, metrics = etcd_testing.free_ports(2)
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {
                "kubeconfig": str(self._kubeconfig("kube-proxy", self.proxy_token))
            },
            "hostnameOverride": NODE,
            "mode": "iptables",
            "healthzBindAddress": f"127.0.0.1:{health}",
            "metricsBindAddress": f"127.0.0.1:{metrics}",
            "clusterCIDR": SUBNET,
            "nodePortAddresses": [f"{GATEWAY}/32"],
            # Pods and Services share one bridge: masquerade so replies come back
            # through the host, where the Service's address is put back.
            "iptables": {"masqueradeAll": True},
            # Leave the host's conntrack table and timeouts as they are.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }
        path = self.work_dir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn("kube-proxy", [str(self.bins / "kube-proxy"), f"--config={path}", "--v=1"])

    # --- teardown --------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the node and the control plane and undo every change (see the module doc)."""
        t0 = time.monotonic()
        try:
            if "kubelet" in self._procs and "containerd" in self._procs:
                self._drain_pods(timeout=30)
            for name in ("kube-proxy", "kubelet", "kube-controller-manager", "kube-scheduler"):
                self._terminate(name)
            if "containerd" in self._procs:
                self._purge_containers()
                self._terminate("containerd")
        finally:
            self._procs.clear()
            try:
                if self._lock is not None:
                    cleanup(log=lambda m: print(f"\n{m}"))
            finally:
                self._stack.close()
                if self._lock is not None:
                    self._lock.close()
                    self._lock = None
                self.timings["stop and clean up"] = time.monotonic() - t0

    def _terminate(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        with contextlib.suppress(OSError, ValueError):
            self._save_state()

    def _drain_pods(self, timeout: float) -> None:
        """With the controllers stopped, delete every pod so the kubelet tears each down
        itself (CNI DEL: its veth, address and network namespace), then wait for
        containerd to run no task (stopped sandboxes stay listed until the kubelet's
        garbage collection, which ``_purge_containers`` does instead)."""
        for name in ("kube-controller-manager", "kube-scheduler"):
            self._terminate(name)
        self.api.kubectl(
            "delete", "pods", "--all", "--all-namespaces", "--grace-period=0", "--force",
            "--wait=false", check=False, timeout=60,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tasks = self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:]
            if not [t for t in tasks if t.strip()]:
                return
            time.sleep(0.5)
