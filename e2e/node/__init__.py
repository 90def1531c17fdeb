"""Tier 3 of the chart's end-to-end tests: a real node on this machine (``make e2e-node``).

:mod:`node.cluster` runs containerd, kubelet and kube-proxy beside the e2e control
plane; :mod:`node.images` builds the sandbox and stand-in images and puts them into
containerd; :mod:`node.dns` is the cluster DNS; ``python -m node.cleanup`` (from e2e/)
undoes what a killed run left. e2e/test_node.py is the suite.
"""
