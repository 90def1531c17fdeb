#!/bin/sh
# Where the tools the tests build or download once are kept: the Kubernetes binaries,
# helm, kwok, kind, Go Gazette, fake-gcs-server, Azurite. Outside any checkout, so a
# fresh clone (CI's) reuses what an earlier one built instead of building it again;
# each tool keys its folder by version (or by a hash of its sources), so checkouts of
# different versions share the cache without mixing builds.
#
#   e2e/cache-root.sh [TOOL [VERSION]]
#
# prints $GAZETTE_CACHE (else ${XDG_CACHE_HOME:-~/.cache}/gazette), with /TOOL and
# /VERSION appended when given. It creates nothing. Every user resolves the root here:
# e2e/apiserver (k8s), e2e/helm (helm, kwok), e2e/kind (kind),
# broker/tests/interop/go (go-gazette-bin), consumer/tests/interop/go
# (go-gazette-msg), broker/tests/fragment (fake-gcs-server, azurite), e2e/pyspark-wheel.sh
# (wheels). The Spark jars live beside them (gazette/spark-jars, spark/jars/fetch.py).
set -eu
root="${GAZETTE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gazette}"
for part in "$@"; do
  root="$root/$part"
done
printf '%s\n' "$root"
