#!/usr/bin/env bash
# Build Helm 3 (`helm`) from the helm.sh/helm/v3 module pinned in go.mod beside this
# script, kwok (fake nodes for the tier-1 suite) from the sigs.k8s.io/kwok module
# pinned in kwok/go.mod, kind (the tier-2 suite's clusters) from the sigs.k8s.io/kind
# module pinned in e2e/kind/go.mod, and promtool (the chart's PrometheusRule check) from
# the github.com/prometheus/prometheus module pinned in promtool/go.mod, each once per
# version, and print the binaries' paths:
#
#   e2e/helm/build.sh [OUT_ROOT [TOOL...]]
#
# TOOLs are helm (the default), kwok, kind and promtool. OUT_ROOT defaults to the tool cache
# outside the checkout (`e2e/cache-root.sh`: $GAZETTE_CACHE, else ~/.cache/gazette); a tool
# goes to OUT_ROOT/<tool>/<version>/<tool> and is not rebuilt when present. Modules
# are pinned by `tool` directives (`go install pkg@version` is not used). helm's
# ldflags are those of its Makefile: its version, and the Kubernetes version that
# `helm lint`/`helm template` assume (.Capabilities.KubeVersion), from the
# k8s.io/client-go it links. Builds are niced and serial (GOFLAGS=-p=1): the machine
# is shared (2 cores). Needs `go`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_root="${1:-$("$repo/e2e/cache-root.sh")}"
shift || true
tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
  tools=(helm)
fi

# pinned MODDIR MODULE: the version of MODULE required by MODDIR/go.mod.
pinned() {
  local escaped="${2//./\\.}"
  escaped="${escaped//\//\\/}"
  sed -n "s/^[[:space:]]*${escaped} \\(v[^ ]*\\).*/\\1/p" "$1/go.mod" | head -n1
}

for tool in "${tools[@]}"; do
  case "$tool" in
    helm)
      dir="$here"; module=helm.sh/helm/v3; pkg=helm.sh/helm/v3/cmd/helm ;;
    kwok)
      dir="$here/kwok"; module=sigs.k8s.io/kwok; pkg=sigs.k8s.io/kwok/cmd/kwok ;;
    kind)
      dir="$repo/e2e/kind"; module=sigs.k8s.io/kind; pkg=sigs.k8s.io/kind ;;
    promtool)
      dir="$here/promtool"; module=github.com/prometheus/prometheus
      pkg=github.com/prometheus/prometheus/cmd/promtool ;;
    *)
      echo "build.sh: unknown tool $tool (helm, kwok, kind, promtool)" >&2; exit 2 ;;
  esac
  version="$(pinned "$dir" "$module")"
  if [[ -z "$version" ]]; then
    echo "build.sh: no $module version in $dir/go.mod" >&2
    exit 2
  fi
  out="$out_root/$tool/$version"
  if [[ -x "$out/$tool" ]]; then
    echo "$out/$tool"
    continue
  fi
  mkdir -p "$out"
  ldflags="-s -w"
  if [[ "$tool" == helm ]]; then
    ldflags+=" -X helm.sh/helm/v3/internal/version.version=$version"
    ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    # client-go v0.M.N is Kubernetes 1.M: helm's Makefile turns it into major 1, minor M.
    k8s="$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$dir/go.mod" | head -n1)"
    if [[ -n "$k8s" ]]; then
      for p in pkg/lint/rules pkg/chartutil; do
        ldflags+=" -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$k8s"
      done
    fi
  fi
  echo "build.sh: building $tool $version (slow the first time)" >&2
  # Build to a temporary name, then rename: an interrupted build leaves no half binary.
  (cd "$dir" && GOFLAGS="-p=1 -mod=readonly ${GOFLAGS:-}" CGO_ENABLED=0 nice -n 19 \
    go build -trimpath -ldflags "$ldflags" -o "$out/.$tool.tmp" "$pkg")
  mv -f "$out/.$tool.tmp" "$out/$tool"
  echo "$out/$tool"
done
