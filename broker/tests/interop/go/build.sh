#!/usr/bin/env bash
# Builds Gazette's own Go broker (`gazette`) and CLI (`gazctl`), v0.103 as
# pinned by go.mod/go.sum, and this module's small-record load generator
# (`gazette-loadgen`, loadgen/main.go, Go's client library; used by
# bench/bench_go.py), once per version of this module, and prints the
# directory holding all three on stdout.
#
# Binaries go to go-gazette-bin/<hash>/ of the tool cache outside the
# checkout (e2e/cache-root.sh: $GAZETTE_CACHE, else ~/.cache/gazette), where <hash> covers go.mod, go.sum, tools.go, loadgen/main.go,
# this script and `go version`: an unchanged tree reuses them without invoking Go again.
# Modules come from the Go module proxy on first build. `go install
# pkg@version` does not work here (the proxy's version list), hence a module
# that requires go.gazette.dev/core and builds its commands. CGO on: the
# broker links DataDog/zstd for zstd fragments.
#
# Usage: broker/tests/interop/go/build.sh   (needs `go` and a C compiler)
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$src/../../../.." && pwd)"
hash="$(cat "$src/go.mod" "$src/go.sum" "$src/tools.go" "$src/loadgen/main.go" "$src/build.sh" <(go version) | sha256sum | cut -c1-16)"
out="$("$repo/e2e/cache-root.sh" go-gazette-bin)/$hash"

if [[ ! -x "$out/gazette" || ! -x "$out/gazctl" || ! -x "$out/gazette-loadgen" ]]; then
    mkdir -p "$out"
    tmp="$(mktemp -d "$out/.build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    (
        cd "$src"
        for cmd in gazette gazctl; do
            CGO_ENABLED=1 go build -mod=readonly -trimpath -o "$tmp/$cmd" "go.gazette.dev/core/cmd/$cmd"
        done
        CGO_ENABLED=1 go build -mod=readonly -trimpath -o "$tmp/gazette-loadgen" ./loadgen
    ) >&2
    mv -f "$tmp/gazette" "$out/gazette"
    mv -f "$tmp/gazctl" "$out/gazctl"
    mv -f "$tmp/gazette-loadgen" "$out/gazette-loadgen"
fi
echo "$out"
