"""``python -m gazette.gazctl`` (and the ``gazctl`` console script)."""

from __future__ import annotations

from gazette.gazctl import cli


def main() -> None:
    cli.main()


if __name__ == "__main__":
    main()
