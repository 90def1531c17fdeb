#!/usr/bin/env bash
# Builds gazette-msg (main.go: Go's go.gazette.dev/core/message publishing and
# reading our journals) once per version of its sources, and prints the
# binary's path on stdout.
#
# The binary goes to <repo>/.cache/go-gazette-msg/<hash>/gazette-msg (.cache/
# is git-ignored), where <hash> covers go.mod, go.sum, main.go, this script
# and `go version`: an unchanged tree reuses the binary without invoking the
# Go toolchain again. Modules come from the Go module proxy on first build.
#
# Built with CGO_ENABLED=0 and the `nozstd` tag: the only cgo dependency of
# the message and client packages is DataDog/zstd (broker/codecs), used to
# read zstd fragments straight from a store; this program always reads
# through brokers, which decompress.
#
# Usage: consumer/tests/interop/go/build.sh   (needs `go` on PATH)
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$src/../../../.." && pwd)"
go_version="$(go version)"
hash="$(
    { cat "$src/go.mod" "$src/go.sum" "$src/main.go" "$src/build.sh"; echo "$go_version"; } \
        | sha256sum | cut -c1-16
)"
out_dir="$repo/.cache/go-gazette-msg/$hash"
bin="$out_dir/gazette-msg"

if [[ ! -x "$bin" ]]; then
    mkdir -p "$out_dir"
    # Build beside the target and rename: concurrent builds (pytest-xdist
    # workers) never see a half-written binary.
    tmp="$(mktemp "$out_dir/.gazette-msg.XXXXXX")"
    trap 'rm -f "$tmp"' EXIT
    (
        cd "$src"
        CGO_ENABLED=0 go build -mod=readonly -trimpath -tags nozstd -o "$tmp" .
    ) >&2
    mv -f "$tmp" "$bin"
    trap - EXIT
fi
echo "$bin"
