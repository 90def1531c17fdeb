#!/usr/bin/env bash
# Builds pyspark's wheel once into the tool cache (e2e/cache-root.sh wheels), where
# `make install` finds it (--find-links) instead of the index's source archive.
#
#   e2e/pyspark-wheel.sh PYTHON VERSION
#
# pyspark is published as a source archive only (~480 MB). The index this machine uses
# answers without caching headers, so uv took every fresh clone's install for a new
# revision: it built the archive again and kept both the build and the unpacked wheel,
# ~1.9 GB of its cache per clone, until a CI run found the disk full. Built here once per
# version, the wheel is a file uv unpacks once and links from then on.
set -euo pipefail
python=$1
version=$2
if [ -z "$version" ]; then
  echo "pyspark-wheel.sh: no pyspark==VERSION line in constraints.txt" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
dir=$("$here/cache-root.sh" wheels)
if ls "$dir"/pyspark-"$version"-*.whl >/dev/null 2>&1; then
  exit 0
fi
mkdir -p "$dir"
# Built beside the cache, then renamed in: a concurrent or interrupted build never
# leaves a partial wheel under the name the install looks for.
work=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "building pyspark $version's wheel once into $dir (a minute or two; later installs reuse it)"
"$python" -m pip wheel -q --disable-pip-version-check --no-cache-dir --no-deps \
  "pyspark==$version" -w "$work"
for wheel in "$work"/pyspark-"$version"-*.whl; do
  mv -f "$wheel" "$dir/"
done
