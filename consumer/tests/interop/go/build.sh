#!/usr/bin/env bash
# Builds the Go interop programs of this module once per version of their
# sources, and prints the path of the requested one on stdout:
#
#   gazette-msg   (main.go)      Go's go.gazette.dev/core/message publishing
#                                and reading our journals;
#   gazette-rlog  (rlog/main.go) Go's consumer/recoverylog recording and
#                                playing our recovery logs;
#   gazette-consumer (consumer/main.go) Go's consumer process (runconsumer)
#                                whose shards are disabled: its Shard API and
#                                token checks.
#
# Binaries go to go-gazette-msg/<hash>/<program> of the tool cache outside
# the checkout (e2e/cache-root.sh: $GAZETTE_CACHE, else ~/.cache/gazette), where <hash> covers go.mod, go.sum, every .go file of the
# module, this script and `go version`: an unchanged tree reuses the binary
# without invoking the Go toolchain again. Modules come from the Go module
# proxy on first build.
#
# Built with CGO_ENABLED=0 and the `nozstd` tag: the only cgo dependency of
# the packages used is DataDog/zstd (broker/codecs), used to read zstd
# fragments straight from a store; these programs always read through
# brokers, which decompress.
#
# Usage: consumer/tests/interop/go/build.sh [gazette-msg|gazette-rlog|gazette-consumer]
#        (default gazette-msg; needs `go` on PATH)
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$src/../../../.." && pwd)"
program="${1:-gazette-msg}"
case "$program" in
    gazette-msg) pkg="." ;;
    gazette-rlog) pkg="./rlog" ;;
    gazette-consumer) pkg="./consumer" ;;
    *) echo "build.sh: unknown program $program (want gazette-msg, gazette-rlog or gazette-consumer)" >&2; exit 2 ;;
esac

go_version="$(go version)"
hash="$(
    {
        cat "$src/go.mod" "$src/go.sum" "$src/build.sh"
        # Each source's path too: moving a file changes the build.
        (cd "$src" && find . -name '*.go' -type f | LC_ALL=C sort | while read -r f; do
            echo "$f"; cat "$f"
        done)
        echo "$go_version"
    } | sha256sum | cut -c1-16
)"
out_dir="$("$repo/e2e/cache-root.sh" go-gazette-msg)/$hash"
bin="$out_dir/$program"

if [[ ! -x "$bin" ]]; then
    mkdir -p "$out_dir"
    # Build beside the target and rename: concurrent builds (pytest-xdist
    # workers) never see a half-written binary.
    tmp="$(mktemp "$out_dir/.$program.XXXXXX")"
    trap 'rm -f "$tmp"' EXIT
    (
        cd "$src"
        CGO_ENABLED=0 go build -mod=readonly -trimpath -tags nozstd -o "$tmp" "$pkg"
    ) >&2
    mv -f "$tmp" "$bin"
    trap - EXIT
fi
echo "$bin"
