"""``python -m gazette.operator.crds DIR [--check]``: write (or check) ``DIR/*.yaml``.

The CRDs come from :func:`gazette.operator.crd.render`; this is ``make crds``, and
with ``--check`` the freshness check of ``make lint``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gazette.operator import crd


def main(argv: list[str] | None = None) -> int:
    """Write the CRDs into a folder, or with ``--check`` report whether it is stale."""
    parser = argparse.ArgumentParser(prog="python -m gazette.operator.crds", description=__doc__)
    parser.add_argument("out", type=Path, help="folder of the CRD YAML files (e.g. crds)")
    parser.add_argument("--check", action="store_true", help="fail when the folder is stale")
    args = parser.parse_args(argv)
    out: Path = args.out
    stale = []
    for name, text in crd.render().items():
        path = out / name
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(str(path))
        if not args.check:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print("stale CRDs: " + ", ".join(stale) + "; run 'make crds' and commit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
