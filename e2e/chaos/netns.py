"""Network partitions for the chaos suite: one Linux network namespace per node, on a bridge.

:class:`Netns` builds a private little network inside this machine (it needs
root and ``ip`` from iproute2; there is no iptables or tc here, and none is
used):

* a Linux bridge ``gzb<sfx>`` in the root namespace, with no uplink: frames
  put on it reach only the other ports of the same bridge;
* per named node (etcd, each broker) a network namespace ``gz<sfx>-<i>``
  whose loopback is up and whose only other interface is one end of a veth
  pair, the other end being a port of the bridge;
* one more veth pair for the test process itself (the node :data:`CLIENT`),
  which stays in the root namespace: the appenders and the checker reach the
  brokers through it;
* addresses from a private ``10.x.y.0/24`` drawn at random among those no
  route or address of the root namespace touches, so traffic of the test goes
  to loopback or to these namespaces and nowhere else. A blackhole route for
  the whole /24 (at a worse metric than the bridge's own) stays in the root
  namespace until the end, so a packet sent to it after the veth is gone is
  dropped rather than handed to the default route.

``<sfx>`` is a short random suffix: runs in parallel never share a name.

A link is cut by black-holing, per direction, inside the sender's namespace:
``ip route add blackhole <peer>/32`` (:data:`BLACKHOLE`: a new connection fails
at once with EINVAL, packets of an established one vanish), or a permanent
``ip neigh`` entry naming a MAC address no port has (:data:`NEIGH`: every
packet vanishes, a new connection times out as across a real partition).
:meth:`Netns.cut` does both directions, :meth:`Netns.isolate` cuts a node from
every other (the test client included), :meth:`Netns.cut_from_etcd` its link to
etcd only; :meth:`Netns.heal_all` removes every cut. Processes run in a node's
namespace through :meth:`Netns.exec_argv` (``ip netns exec <ns> ...``).

Usage::

    with netns.Netns() as net:                  # everything is deleted on exit
        addrs = net.create(["etcd", "broker-00", "broker-01"])
        subprocess.Popen([*net.exec_argv("etcd"), "etcd", ...])
        net.isolate("broker-00")
        ...
        net.heal_all()

Where ``ip`` is missing :class:`IpMissing` is raised (a test may skip on
it); any other failure to build the network, such as ``ip netns add`` being
refused, is a :class:`NetnsError`: both are the suite's ``HarnessError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import os
import random
import secrets
import shutil
import subprocess
import types
from collections.abc import Iterable, Sequence

from chaos.clusters import HarnessError

__all__ = ["BLACKHOLE", "CLIENT", "NEIGH", "IpMissing", "Netns", "NetnsError", "Node"]

log = logging.getLogger(__name__)

#: The node of the test process itself (root namespace).
CLIENT = "client"
#: Ways to cut one direction of a link (see the module docstring).
BLACKHOLE = "blackhole"
NEIGH = "neigh"
#: The MAC address of permanent bogus neighbour entries: locally administered, on no port.
_NOWHERE_MAC = "02:00:5e:00:de:ad"
#: Metric of the root namespace's guard route for the /24 (the bridge's own route is 0).
_GUARD_METRIC = 4242
_IP_TIMEOUT_S = 20.0


class NetnsError(HarnessError):
    """The private network could not be built or changed (the message says why)."""


class IpMissing(NetnsError):
    """``ip`` (iproute2) is not installed."""


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    """A node of the network: its address, its namespace (None: the root's) and interface."""

    name: str
    address: str
    netns: str | None
    interface: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Cut:
    """One blocked direction: ``src`` can't send to ``dst``."""

    src: str
    dst: str
    how: str


def _ip_binary() -> str:
    # Not always on a non-root PATH, where it is still worth a precise error.
    ip = shutil.which("ip") or next(
        (p for p in ("/usr/sbin/ip", "/sbin/ip") if os.access(p, os.X_OK)), None
    )
    if ip is None:
        raise IpMissing("`ip` (iproute2) is not installed: no network namespaces")
    return ip


class Netns:
    """The namespaces, veths and bridge of one run; see the module docstring.

    ``how`` is the default way :meth:`cut` blocks a direction
    (:data:`BLACKHOLE` or :data:`NEIGH`). Use it as a context manager, or call
    :meth:`close` in a ``finally``: it deletes whatever was made, even half-way.
    """

    def __init__(self, *, how: str = BLACKHOLE, rng: random.Random | None = None) -> None:
        if how not in (BLACKHOLE, NEIGH):
            raise ValueError(f"unknown way to cut a link: {how!r}")
        self.how = how
        self.suffix = secrets.token_hex(3)
        self._rng = rng or random.Random()
        self._ip = ""
        self.bridge = f"gzb{self.suffix}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.nodes: dict[str, Node] = {}
        self._cuts: set[_Cut] = set()
        # What exists, so close() deletes exactly that.
        self._namespaces: list[str] = []
        self._root_links: list[str] = []
        self._guard = False

    # --- Building -----------------------------------------------------------

    def create(self, names: Sequence[str]) -> dict[str, str]:
        """Build the network for ``names`` (plus :data:`CLIENT`); {name: address}.

        Raises :class:`IpMissing` or :class:`NetnsError`; whatever was built
        before a failure is deleted by :meth:`close`.
        """
        if self.nodes:
            raise NetnsError("this network was already created")
        if CLIENT in names or len(set(names)) != len(names):
            raise ValueError(f"node names must be unique and not {CLIENT!r}: {names}")
        if len(names) > 200:
            raise ValueError("a /24 holds at most 200 nodes here")
        self._ip = _ip_binary()
        # The one step that needs privileges first: its refusal is the common failure.
        first = f"gz{self.suffix}-0"
        out = self._run(["netns", "add", first], check=False)
        if out.returncode != 0:
            raise NetnsError(
                f"cannot create network namespaces (`ip netns add` as uid "
                f"{os.getuid()}): {out.stderr.strip()}"
            )
        self._namespaces.append(first)
        self.subnet = self._pick_subnet()
        hosts = list(self.subnet.hosts())
        self._run(["route", "add", "blackhole", str(self.subnet), "metric", str(_GUARD_METRIC)])
        self._guard = True
        self._run(["link", "add", self.bridge, "type", "bridge"])
        self._root_links.append(self.bridge)
        self._run(["link", "set", self.bridge, "up"])

        for i, name in enumerate([CLIENT, *names]):
            address = str(hosts[i])
            port = f"gz{self.suffix}p{i}"  # the bridge's end
            inner = f"gz{self.suffix}v{i}"  # the node's end
            self._run(["link", "add", port, "type", "veth", "peer", "name", inner])
            self._root_links.append(port)  # deleting one end deletes the pair
            self._run(["link", "set", port, "master", self.bridge, "up"])
            if name == CLIENT:
                ns = None
            else:
                ns = first if i == 1 else f"gz{self.suffix}-{i - 1}"
                if ns != first:
                    self._run(["netns", "add", ns])
                    self._namespaces.append(ns)
                self._run(["link", "set", inner, "netns", ns])
                self._run(["link", "set", "lo", "up"], ns)
            self._run(["addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", inner], ns)
            self._run(["link", "set", inner, "up"], ns)
            self.nodes[name] = Node(name, address, ns, inner)
        log.info("network %s: %s", self.subnet, {n.name: n.address for n in self.nodes.values()})
        return {name: n.address for name, n in self.nodes.items()}

    def _pick_subnet(self) -> ipaddress.IPv4Network:
        """A random 10.x.y.0/24 that overlaps no route or address of the root namespace."""
        taken: list[ipaddress.IPv4Network] = []
        routes = self._run(["-4", "route", "show", "table", "all"]).stdout
        addrs = self._run(["-4", "-o", "addr", "show"]).stdout
        for line in routes.splitlines():
            words = line.split()
            if not words:
                continue
            typed = words[0] in ("blackhole", "unreachable", "prohibit", "local", "broadcast")
            with contextlib.suppress(ValueError, IndexError):
                taken.append(ipaddress.ip_network(words[1] if typed else words[0], strict=False))
        for line in addrs.splitlines():
            words = line.split()
            with contextlib.suppress(ValueError, IndexError):
                taken.append(ipaddress.ip_interface(words[words.index("inet") + 1]).network)
        for _ in range(100):
            net = ipaddress.IPv4Network(
                f"10.{self._rng.randrange(64, 250)}.{self._rng.randrange(1, 255)}.0/24"
            )
            if not any(net.overlaps(t) for t in taken if t.prefixlen > 0):
                return net
        raise NetnsError("found no free private /24 for the chaos network")

    # --- Running things in a namespace ---------------------------------------

    def exec_argv(self, name: str) -> list[str]:
        """The command prefix running a program in ``name``'s namespace."""
        node = self.nodes[name]
        if node.netns is None:
            return []
        return [self._ip, "netns", "exec", node.netns]

    def address(self, name: str) -> str:
        return self.nodes[name].address

    # --- Faults -----------------------------------------------------------------

    def block(self, src: str, dst: str, how: str | None = None) -> None:
        """Cut one direction: nothing ``src`` sends reaches ``dst`` (idempotent)."""
        cut = _Cut(src, dst, how or self.how)
        if cut in self._cuts:
            return
        node, peer = self.nodes[src], self.nodes[dst]
        if cut.how == BLACKHOLE:
            self._run(["route", "add", "blackhole", f"{peer.address}/32"], node.netns)
        else:
            self._run(
                [
                    "neigh", "replace", peer.address, "lladdr", _NOWHERE_MAC,
                    "dev", node.interface, "nud", "permanent",
                ],
                node.netns,
            )  # fmt: skip
        self._cuts.add(cut)

    def cut(self, a: str, b: str, how: str | None = None) -> None:
        """Cut the link between ``a`` and ``b``, both directions."""
        self.block(a, b, how)
        self.block(b, a, how)

    def isolate(self, a: str, how: str | None = None) -> None:
        """Cut ``a`` from every other node: etcd, the brokers and the test client."""
        for other in self.nodes:
            if other != a:
                self.cut(a, other, how)

    def cut_from_etcd(self, a: str, etcd: str = "etcd", how: str | None = None) -> None:
        """Cut only the link between ``a`` and ``etcd``."""
        self.cut(a, etcd, how)

    def cut_from(self, a: str, others: Iterable[str], how: str | None = None) -> None:
        """Cut ``a`` from each of ``others`` (e.g. its peer brokers)."""
        for other in others:
            self.cut(a, other, how)

    @property
    def cuts(self) -> list[tuple[str, str]]:
        """The blocked directions now, (from, to)."""
        return sorted((c.src, c.dst) for c in self._cuts)

    def heal_all(self) -> None:
        """Remove every cut. Raises :class:`NetnsError` if one could not be removed."""
        failed = []
        for cut in sorted(self._cuts, key=lambda c: (c.src, c.dst)):
            node, peer = self.nodes[cut.src], self.nodes[cut.dst]
            if cut.how == BLACKHOLE:
                argv = ["route", "del", "blackhole", f"{peer.address}/32"]
            else:
                argv = ["neigh", "del", peer.address, "dev", node.interface]
            out = self._run(argv, node.netns, check=False)
            if out.returncode != 0:
                failed.append(f"{' '.join(argv)} in {node.netns or 'the root'}: {out.stderr}")
            self._cuts.discard(cut)
        if failed:
            raise NetnsError("healing failed: " + "; ".join(failed))

    # --- Tear-down --------------------------------------------------------------

    def close(self) -> None:
        """Delete the namespaces, veths, bridge and routes made (best effort, logged)."""
        problems: list[str] = []
        try:
            self.heal_all()
        except NetnsError as e:
            problems.append(str(e))
        if not self._ip:
            return
        # Deleting a namespace deletes the veth ends in it, and so their peers.
        for ns in reversed(self._namespaces):
            out = self._run(["netns", "del", ns], check=False)
            if out.returncode != 0:
                problems.append(f"netns del {ns}: {out.stderr.strip()}")
        self._namespaces.clear()
        for link in reversed(self._root_links):
            out = self._run(["link", "del", link], check=False)
            if out.returncode != 0 and "Cannot find device" not in out.stderr:
                problems.append(f"link del {link}: {out.stderr.strip()}")
        self._root_links.clear()
        if self._guard and self.subnet is not None:
            # Any route into the /24 left in the root namespace is ours: the guard, and
            # blackholes of cuts whose removal failed.
            self._run(["route", "flush", "root", str(self.subnet)], check=False)
            self._guard = False
        self.nodes.clear()
        if problems:
            log.warning("tearing down network %s: %s", self.suffix, "; ".join(problems))

    def __enter__(self) -> Netns:
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        e: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.close()

    # --- ip ---------------------------------------------------------------------

    def _run(
        self, argv: list[str], netns: str | None = None, *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        cmd = [self._ip, *(["-n", netns] if netns else []), *argv]
        try:
            out = subprocess.run(
                cmd, capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise NetnsError(f"{' '.join(cmd)}: {e}") from e
        if check and out.returncode != 0:
            raise NetnsError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()}")
        return out
