"""``python -m gazette.broker``: parse flags (see ``--help``) and serve a broker."""

from __future__ import annotations

import sys

from gazette.broker.server import config


def main(argv: list[str] | None = None) -> int:
    cfg = config.parse(argv)
    # Imported after the flags are parsed, so that --help stays fast.
    from gazette.broker.server import process

    return process.run(cfg)


if __name__ == "__main__":
    sys.exit(main())
