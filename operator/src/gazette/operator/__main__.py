"""``python -m gazette.operator``: run the operator until SIGINT or SIGTERM.

Exits 0 when told to stop, 1 when this replica lost the leader Lease (it stopped
writing; restarted, it stands by) or etcd refused its login, and 2 on bad flags.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from gazette import keyspace
from gazette.operator import config, leader, runner

logger = logging.getLogger("gazette.operator")


def main(argv: list[str] | None = None) -> int:
    cfg = config.parse_args(argv)
    logging.basicConfig(
        level=cfg.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    lost: list[BaseException] = []
    refused: list[BaseException] = []
    try:
        asyncio.run(runner.run(cfg))
    except* leader.LeadershipLost as group:
        lost.extend(group.exceptions)
    except* keyspace.errors.EtcdAuthError as group:
        refused.extend(group.exceptions)
    if refused:
        # A wrong etcd user or password won't heal by retrying: say so in one line.
        logger.error("%s", refused[0])
        return 1
    if lost:
        logger.error("stopped serving: leadership lost (%s)", lost[0])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
