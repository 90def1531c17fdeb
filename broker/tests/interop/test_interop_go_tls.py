"""Mutual TLS side by side with Gazette's Go broker and gazctl (v0.103): one CA, one key list.

* A mixed cluster of 2 Python and 2 Go brokers, each serving TLS with a
  certificate of one throwaway CA, requiring client certificates of it
  (``--broker.server-ca-file``), dialing its peers with its own
  (``--broker.peer-*``) and sharing ``--broker.auth-keys``: every broker
  announces an ``https://`` endpoint; journals of replication 2 are spread
  over both kinds, so appends are proxied and replicated across kinds over
  mTLS; both gazctls (``BROKER_CERT_FILE`` / ``BROKER_CERT_KEY_FILE`` /
  ``BROKER_TRUSTED_CA_FILE``) append through and read from every broker.
* Our gazctl without a client certificate is refused by brokers of both kinds.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable

import pytest
from go_gazette import GoBroker, go_gazctl, our_gazctl

from gazette.broker import testing
from gazette.broker.protocol import tlstesting
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

KEYS = "aW50ZXJvcCB0bHMga2V5"  # base64 of "interop tls key"

SPECS = """
name: itls/
replication: 2
fragment:
  length: 4096
  compression_codec: NONE
  stores:
  - file:///
  refresh_interval: 1s
children:
"""


def _until(what: str, check: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting until {what}")
        time.sleep(0.2)


def test_a_mixed_mtls_cluster_replicates_and_serves_both_gazctls(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    certs = tlstesting.make_certs(tmp_path / "tls")
    env = {**certs.client_env(), "BROKER_AUTH_KEYS": KEYS}
    names = [f"itls/m{i}" for i in range(6)]
    specs = SPECS + "".join(f"- name: {n}\n" for n in names)
    with testing.running_cluster(
        etcd_server.endpoint,
        tmp_path / "py",
        brokers=2,
        zones=("zone-a", "zone-b"),
        tls=certs,
        extra_args=["--broker.auth-keys", KEYS],
    ) as cluster:
        gos = [
            GoBroker(
                go_bins,
                etcd_server.endpoint,
                cluster.etcd_prefix,
                zone=zone,
                suffix=f"go-broker-{i}",
                file_root=cluster.file_root,
                log_path=tmp_path / f"go-{i}.log",
                extra_args=("--broker.auth-keys", KEYS, *certs.broker_args()),
                ssl_context=certs.client_ssl_context(),
            )
            for i, zone in enumerate(("zone-a", "zone-b"))
        ]
        try:
            for g in gos:
                g.start()
            endpoints = [b.endpoint for b in cluster.brokers] + [g.endpoint for g in gos]
            assert all(ep.startswith("https://127.0.0.1:") for ep in endpoints)
            go_gazctl(go_bins, endpoints[2], "journals", "apply", input=specs.encode(), env=env)
            for name in names:
                _until(
                    f"{name} is writable",
                    lambda name=name: (
                        our_gazctl(
                            endpoints[0],
                            "journals",
                            "append",
                            "-l",
                            f"name={name}",
                            input=b"",
                            env=env,
                            ok=False,
                        ).returncode
                        == 0
                    ),
                )
            want = dict.fromkeys(names, b"")
            for i in range(16):
                name = names[i % len(names)]
                endpoint = endpoints[i % len(endpoints)]
                line = f"{name} {i} via {endpoint}\n".encode()
                if (i // len(endpoints)) % 2:
                    go_gazctl(
                        go_bins,
                        endpoint,
                        "journals",
                        "append",
                        "-l",
                        f"name={name}",
                        input=line,
                        env=env,
                    )
                else:
                    our_gazctl(
                        endpoint, "journals", "append", "-l", f"name={name}", input=line, env=env
                    )
                want[name] += line
            for endpoint in endpoints:
                for name in names:
                    got = go_gazctl(
                        go_bins, endpoint, "journals", "read", "-l", f"name={name}", env=env
                    )
                    assert got.stdout == want[name], (endpoint, name)
                    got = our_gazctl(endpoint, "journals", "read", "-l", f"name={name}", env=env)
                    assert got.stdout == want[name], (endpoint, name)

            listing = json.loads(
                go_gazctl(go_bins, endpoints[3], "journals", "list", "-o", "json", env=env).stdout
            )
            kinds = {b.suffix: "py" for b in cluster.brokers} | {g.suffix: "go" for g in gos}
            mixed = set()
            for j in listing["journals"]:
                route = j["route"]
                assert all(ep.startswith("https://") for ep in route["endpoints"]), route
                if {kinds[m["suffix"]] for m in route["members"]} == {"py", "go"}:
                    mixed.add(j["spec"]["name"])
            assert mixed, f"no journal has brokers of both kinds: {listing}"

            # Without a client certificate, either kind of broker refuses our gazctl. (Go's
            # gazctl isn't asked: it retries a refused handshake until its caller gives up.)
            no_cert = {"BROKER_TRUSTED_CA_FILE": str(certs.ca_file), "BROKER_AUTH_KEYS": KEYS}
            for endpoint in (endpoints[0], endpoints[2]):
                got = our_gazctl(endpoint, "journals", "list", env=no_cert, ok=False)
                assert got.returncode != 0 and b"UNAVAILABLE" in got.stderr, got.stderr
        finally:
            for g in gos:
                g.kill()
