"""``python -m gazette.operator``: run the operator until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import sys

from gazette.operator import config, runner


def main(argv: list[str] | None = None) -> int:
    cfg = config.parse_args(argv)
    logging.basicConfig(
        level=cfg.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(runner.run(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
