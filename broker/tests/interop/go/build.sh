#!/usr/bin/env bash
# Builds Gazette's own Go broker (`gazette`) and CLI (`gazctl`), v0.103 as
# pinned by go.mod/go.sum, once per version of this module, and prints the
# directory holding both on stdout.
#
# Binaries go to <repo>/.cache/go-gazette-bin/<hash>/ (.cache/ is
# git-ignored), where <hash> covers go.mod, go.sum, tools.go, this script and
# `go version`: an unchanged tree reuses them without invoking Go again.
# Modules come from the Go module proxy on first build. `go install
# pkg@version` does not work here (the proxy's version list), hence a module
# that requires go.gazette.dev/core and builds its commands. CGO on: the
# broker links DataDog/zstd for zstd fragments.
#
# Usage: broker/tests/interop/go/build.sh   (needs `go` and a C compiler)
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$src/../../../.." && pwd)"
hash="$(cat "$src/go.mod" "$src/go.sum" "$src/tools.go" "$src/build.sh" <(go version) | sha256sum | cut -c1-16)"
out="$repo/.cache/go-gazette-bin/$hash"

if [[ ! -x "$out/gazette" || ! -x "$out/gazctl" ]]; then
    mkdir -p "$out"
    tmp="$(mktemp -d "$out/.build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    (
        cd "$src"
        for cmd in gazette gazctl; do
            CGO_ENABLED=1 go build -mod=readonly -trimpath -o "$tmp/$cmd" "go.gazette.dev/core/cmd/$cmd"
        done
    ) >&2
    mv -f "$tmp/gazette" "$out/gazette"
    mv -f "$tmp/gazctl" "$out/gazctl"
fi
echo "$out"
