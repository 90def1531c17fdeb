"""Init container of zone.from=node: write the zone label of this pod's Node to a file.

The downward API does not expose Node labels (before the PodTopologyLabels admission
of Kubernetes 1.33+), so this reads the Node itself with the pod's service-account
token, which the chart mounts into this init container only: the broker or consumer
that runs next never holds a credential. Its ClusterRole grants `get` on nodes and
nothing else. Standard library only (it runs in the gazette images, as they are).

Environment: NODE_NAME (downward API spec.nodeName), ZONE_LABEL (default
topology.kubernetes.io/zone, then the deprecated failure-domain label), ZONE_FILE,
and SERVICE_ACCOUNT_DIR (default: where the token is mounted; tests point it elsewhere).
Exits non-zero, naming the node and the label, when the node has no zone label:
a broker must not announce a zone it made up.
"""

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

SA = os.environ.get("SERVICE_ACCOUNT_DIR") or "/var/run/secrets/kubernetes.io/serviceaccount"
LEGACY_LABEL = "failure-domain.beta.kubernetes.io/zone"


def main() -> int:
    node = os.environ["NODE_NAME"]
    label = os.environ.get("ZONE_LABEL") or "topology.kubernetes.io/zone"
    out = os.environ.get("ZONE_FILE") or "/run/gazette/zone/zone"
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    with open(f"{SA}/token", encoding="utf-8") as f:
        token = f.read().strip()
    ctx = ssl.create_default_context(cafile=f"{SA}/ca.crt")
    request = urllib.request.Request(
        f"https://{host}:{port}/api/v1/nodes/{node}",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    # The API server may be briefly unreachable while the node's network comes up.
    for attempt in range(10):
        try:
            with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
                labels = json.load(resp).get("metadata", {}).get("labels", {})
            break
        except urllib.error.HTTPError as e:
            print(f"node-zone: GET node {node}: HTTP {e.code} {e.reason}", file=sys.stderr)
            if e.code in (401, 403, 404):
                return 1
        except OSError as e:
            print(f"node-zone: GET node {node}: {e}", file=sys.stderr)
        time.sleep(min(2**attempt, 10))
    else:
        return 1
    zone = labels.get(label) or labels.get(LEGACY_LABEL)
    if not zone:
        print(f"node-zone: node {node} has no {label} label", file=sys.stderr)
        return 1
    with open(out, "w", encoding="utf-8") as f:
        f.write(zone)
    print(f"node-zone: node {node} is in zone {zone}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
