"""The Makefile's promises that need no cluster: a cold install says what it does."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def _dry_install() -> str:
    """What `make up`/`make test` run first on a fresh clone (dry run: nothing executes)."""
    return subprocess.run(
        ["make", "--dry-run", "--always-make", ".venv/.installed"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def test_a_cold_install_shows_progress() -> None:
    out = _dry_install()
    assert "installing the virtualenv in .venv" in out
    install = next(line for line in out.splitlines() if "pip install" in line and "-r" in line)
    assert " -q " not in install, "uv's own progress must show on a cold install"


def test_make_help_documents_up_ports() -> None:
    out = subprocess.run(
        ["make", "help"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "--port-base" in out


def test_a_cold_install_builds_pyspark_once_outside_the_checkout() -> None:
    # A source-only package rebuilt per clone filled the disk (1.9 GB of uv's cache each).
    out = _dry_install()
    assert "e2e/pyspark-wheel.sh" in out
    install = next(line for line in out.splitlines() if "pip install" in line and "-r" in line)
    assert "--find-links" in install and "e2e/cache-root.sh wheels" in install


def test_bench_help_lists_the_benchmarks_and_runs_none() -> None:
    for argv in (["--help"], ["spark", "--help"]):
        done = subprocess.run(
            [sys.executable, "-m", "bench", *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "spark" in done.stdout and "Spark benchmark" in done.stdout
        assert "go " in done.stdout and "Go Gazette" in done.stdout
        assert "==" not in done.stdout, "a benchmark ran"
    unknown = subprocess.run(
        [sys.executable, "-m", "bench", "nosuch"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode == 2
    assert "no benchmark matches nosuch" in unknown.stderr


def test_ci_run_prints_its_time_when_make_test_fails(tmp_path: pathlib.Path) -> None:
    # .ci/run in a copy whose `make test` fails at once.
    (tmp_path / ".ci").mkdir()
    script = (REPO / ".ci" / "run").read_text()
    (tmp_path / ".ci" / "run").write_text(script)
    (tmp_path / "Makefile").write_text("test:\n\t@echo failing on purpose; exit 3\n")
    done = subprocess.run(
        ["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "make test failed" in done.stdout and "s\n" in done.stdout, done.stdout
