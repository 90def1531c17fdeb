#!/usr/bin/env bash
# Build kube-apiserver and kubectl (then kube-controller-manager and kube-scheduler)
# from the k8s.io/kubernetes module pinned in go.mod, into a folder keyed by
# that version, so later runs reuse the binaries:
#
#   e2e/apiserver/build.sh [OUT_ROOT [COMMAND...]]
#
# OUT_ROOT defaults to <repo>/.cache/k8s; COMMANDs (default: all four) name what to
# build, e.g. `build.sh "" kube-apiserver kubectl` for what the tests need.
# Prints the bin folder (OUT_ROOT/<version>/bin). Binaries already present are
# not rebuilt. The build is niced and serial (GOFLAGS=-p=1): the machine is shared.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_root="${1:-$repo/.cache/k8s}"
shift || true
commands=("$@")
if [[ ${#commands[@]} -eq 0 ]]; then
  commands=(kube-apiserver kubectl kube-controller-manager kube-scheduler)
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

cd "$here"
for cmd in "${commands[@]}"; do
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
