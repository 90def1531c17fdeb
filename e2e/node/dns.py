"""Cluster DNS for the e2e node: A records of Services and StatefulSet pods, from the API.

The chart's pods find etcd, the S3 server and each other by name
(``<svc>.<ns>.svc``, ``<pod>.<svc>-headless.<ns>.svc``), so the node needs cluster DNS.
A CoreDNS would be one more Go build on a shared machine; this answers the few names
a Kubernetes DNS answers that the tests need, on the bridge's gateway address (the
kubelet's ``clusterDNS``), in the test process:

* ``<svc>.<ns>.svc.cluster.local``: the Service's cluster IP, or for a headless one the
  addresses of its EndpointSlices (not-ready ones too where the Service publishes them,
  as the endpoint controller marks them);
* ``<host>.<svc>.<ns>.svc.cluster.local``: the pod of that hostname and subdomain.

Anything else is NXDOMAIN (there is no upstream to forward to here); AAAA of a known name
is an empty answer. UDP only: every answer fits in 512 bytes.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import ssl
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["ClusterDNS"]

SUFFIX = ".svc.cluster.local"
TYPE_A = 1
TTL = 5


class ClusterDNS:
    """Serves cluster names on ``host:53`` (UDP) until stopped; ``api_url``/``token``/``ca_pem``
    are the kube-apiserver it reads Services, EndpointSlices and pods from."""

    def __init__(self, host: str, api_url: str, token: str, ca_pem: bytes, port: int = 53) -> None:
        self.host = host
        self.port = port
        self._api = api_url
        self._token = token
        self._ctx = ssl.create_default_context(cadata=ca_pem.decode())
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.queries = 0

    def __enter__(self) -> ClusterDNS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((self.host, self.port))
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="cluster-dns", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # --- lookups -------------------------------------------------------------------

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(
            self._api + path, headers={"Authorization": f"Bearer {self._token}"}
        )
        try:
            with urllib.request.urlopen(request, context=self._ctx, timeout=3) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def resolve(self, name: str) -> list[str] | None:
        """The IPv4 addresses of ``name``, or None where no such name is."""
        name = name.lower().rstrip(".")
        if not name.endswith(SUFFIX):
            return None
        parts = name.removesuffix(SUFFIX).split(".")
        if len(parts) == 2:
            svc, ns = parts
            service = self._get(f"/api/v1/namespaces/{ns}/services/{svc}")
            if service is None:
                return None
            ip = service["spec"].get("clusterIP")
            if ip and ip != "None":
                return [ip]
            selector = urllib.parse.quote(f"kubernetes.io/service-name={svc}")
            slices = self._get(
                f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector={selector}"
            )
            return [
                address
                for s in (slices or {}).get("items", [])
                for endpoint in s.get("endpoints") or []
                if (endpoint.get("conditions") or {}).get("ready", True)
                for address in endpoint.get("addresses", [])
            ]
        if len(parts) == 3:
            host, svc, ns = parts
            pod = self._get(f"/api/v1/namespaces/{ns}/pods/{host}")
            if pod is None or pod["spec"].get("subdomain") != svc:
                return None
            ip = (pod.get("status") or {}).get("podIP")
            return [ip] if ip else []
        return None

    # --- the wire --------------------------------------------------------------------

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            ready, _, _ = select.select([self._sock], [], [], 0.2)
            if not ready:
                continue
            with contextlib.suppress(OSError):
                query, peer = self._sock.recvfrom(4096)
                answer = self.answer(query)
                if answer is not None:
                    self._sock.sendto(answer, peer)

    def answer(self, query: bytes) -> bytes | None:
        """The response to one DNS query message (None: not a question we can parse)."""
        if len(query) < 12:
            return None
        ident, flags, qdcount = struct.unpack("!HHH", query[:6])
        if flags & 0x8000 or qdcount != 1:
            return None
        labels, at = [], 12
        while at < len(query) and query[at]:
            size = query[at]
            labels.append(query[at + 1 : at + 1 + size].decode("ascii", "replace"))
            at += 1 + size
        if at + 5 > len(query):
            return None
        question = query[12 : at + 5]
        qtype, _qclass = struct.unpack("!HH", query[at + 1 : at + 5])
        self.queries += 1
        try:
            ips = self.resolve(".".join(labels))
            rcode = 3 if ips is None else 0
        except (OSError, ValueError, KeyError):
            ips, rcode = None, 2  # SERVFAIL: the API did not answer; the client retries.
        records = b""
        count = 0
        if ips and qtype == TYPE_A:
            for ip in ips:
                records += struct.pack("!HHHIH", 0xC00C, TYPE_A, 1, TTL, 4) + socket.inet_aton(ip)
                count += 1
        # Answer, authoritative, recursion desired echoed, recursion available.
        out_flags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | rcode
        return struct.pack("!HHHHHH", ident, out_flags, 1, count, 0, 0) + question + records
