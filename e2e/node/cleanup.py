"""Undo what a killed ``make e2e-node`` left on this machine (``make e2e-node-cleanup``).

Reads the state file the node wrote before it changed anything (node.cluster.STATE) and
stops the node's processes and containers, unmounts its mounts, removes the network
namespaces and bridge it made and kube-proxy's iptables chains, and puts back the kernel
settings it found. Does nothing when no state file is left.
"""

from __future__ import annotations

import sys

from .cluster import STATE, cleanup


def main() -> int:
    if not cleanup():
        print(f"nothing to clean up: no {STATE / 'state.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
