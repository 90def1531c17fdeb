"""The Makefile's promises that need no cluster: a cold install says what it does."""

from __future__ import annotations

import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_a_cold_install_shows_progress() -> None:
    # What `make up`/`make test` run first on a fresh clone (dry run: nothing executes).
    out = subprocess.run(
        ["make", "--dry-run", "--always-make", ".venv/.installed"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "installing the virtualenv in .venv" in out
    install = next(line for line in out.splitlines() if "pip install" in line and "-r" in line)
    assert " -q " not in install, "uv's own progress must show on a cold install"


def test_make_help_documents_up_ports() -> None:
    out = subprocess.run(
        ["make", "help"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "--port-base" in out
