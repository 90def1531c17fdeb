#!/usr/bin/env bash
# Builds fake-gcs-server (a GCS emulator, pinned by go.mod/go.sum) once per
# version of this module and prints the binary's path. Cached under
# fake-gcs-server/<hash>/ of the tool cache outside the checkout
# (e2e/cache-root.sh: $GAZETTE_CACHE, else ~/.cache/gazette), keyed by go.mod, go.sum,
# tools.go, this script and `go version`.
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$src/../../../../.." && pwd)"
hash="$(cat "$src/go.mod" "$src/go.sum" "$src/tools.go" "$src/build.sh" <(go version) | sha256sum | cut -c1-16)"
bin="$("$repo/e2e/cache-root.sh" fake-gcs-server)/$hash/fake-gcs-server"
if [[ ! -x "$bin" ]]; then
    mkdir -p "$(dirname "$bin")"
    tmp="$(mktemp "$bin.XXXXXX")"
    trap 'rm -f "$tmp"' EXIT
    (cd "$src" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$tmp" github.com/fsouza/fake-gcs-server) >&2
    mv -f "$tmp" "$bin"
    trap - EXIT
fi
echo "$bin"
