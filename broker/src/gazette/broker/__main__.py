"""``python -m gazette.broker``: parse flags (see ``--help``) and serve a broker."""

from __future__ import annotations

import importlib
import sys

from gazette.broker.server import config


def main(argv: list[str] | None = None) -> int:
    cfg = config.parse(argv)
    try:
        # Imported after the flags are parsed, so that --help stays fast.
        process = importlib.import_module("gazette.broker.server.process")
    except ModuleNotFoundError:
        print(
            "gazette.broker: serving is not implemented yet (gazette.broker.server.process)",
            file=sys.stderr,
        )
        return 2
    return int(process.run(cfg))


if __name__ == "__main__":
    sys.exit(main())
