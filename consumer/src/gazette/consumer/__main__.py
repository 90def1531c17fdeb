"""``python -m gazette.consumer``: run a consumer application (see ``--help``)."""

import sys

from gazette.consumer.runtime import process

sys.exit(process.run())
