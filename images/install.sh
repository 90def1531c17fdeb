#!/bin/sh
# Install gazette members, and nothing else, into a fresh virtualenv, pinned by the
# repository's constraints.txt: the one install command of every image
# (images/*/Dockerfile), which e2e/test_helm_images.py runs as well, so that what an
# image would hold is checked where no container engine runs.
#
#   images/install.sh VENV SRC MEMBER[EXTRAS]...
#
# VENV is created (uv venv) with $PYTHON (default python3); SRC is a checkout (or the
# build context) holding constraints.txt and the members' folders; each MEMBER is a
# folder name with optional extras, e.g. `broker[gcs,azure]`. A member that depends on
# another (consumer on broker) must be given it too: members are not on any index,
# and a bare `gazette-broker` requirement must never be resolved from one.
#
# uv is $UV (default: uv on PATH). Its cache is its own business: images set
# UV_NO_CACHE=1 and UV_COMPILE_BYTECODE=1 (read-only root filesystems write no .pyc);
# the test shares one cache between its venvs.
set -eu

if [ "$#" -lt 3 ]; then
  echo "usage: $0 VENV SRC MEMBER[EXTRAS]..." >&2
  exit 2
fi
venv="$1"
src="$2"
shift 2
uv="${UV:-uv}"

"$uv" venv --quiet --python "${PYTHON:-python3}" "$venv"
# Rotate the arguments into paths: each MEMBER becomes SRC/MEMBER (extras kept).
for member do
  shift
  set -- "$@" "$src/$member"
done
"$uv" pip install --quiet --python "$venv/bin/python" -c "$src/constraints.txt" "$@"
