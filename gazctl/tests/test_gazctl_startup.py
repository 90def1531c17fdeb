"""gazctl's start-up: what a one-shot command imports (gazette.gazctl.lazy).

Each case runs gazctl as a user does, in a process of its own, and lists the
modules it had imported when it exited.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click

from gazette.gazctl import cli, lazy, shards

# Runs gazctl's console entry point with the given arguments, then prints the
# top-level names of the modules imported (also when gazctl exits non-zero).
_PROBE = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules))))
sys.argv = ["gazctl", *sys.argv[1:]]
from gazette.gazctl import cli
cli.main()
"""


def _modules_after(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc, set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_help_imports_no_client_grpc_or_protobuf() -> None:
    proc, modules = _modules_after("--help")
    assert proc.returncode == 0, proc.stderr
    assert "journals" in proc.stdout and "shards" in proc.stdout
    for heavy in ("grpc", "google.protobuf", "gazette.broker.client", "gazette.consumer", "yaml"):
        assert heavy not in modules, f"`gazctl --help` imported {heavy}"


def test_append_imports_what_appending_needs_only() -> None:
    # Nothing listens on port 1: the command fails at its first RPC, after
    # importing everything it would have used.
    proc, modules = _modules_after(
        "journals", "append", "-l", "name=a/b", "--broker.address", "http://127.0.0.1:1"
    )
    assert proc.returncode == 1, proc.stderr
    assert "UNAVAILABLE" in proc.stderr or "unavailable" in proc.stderr.lower(), proc.stderr
    assert "gazette.broker.client" in modules and "grpc" in modules
    for unneeded in (
        "prometheus_client",  # The client's counters: nobody scrapes a one-shot process.
        "yaml",
        "gazette.message",
        "gazette.consumer",
        "gazette.gazctl.shards",
        "gazette.gazctl.journals.specs",
        "regex",  # Only for tokens and selectors beyond ASCII (gazette.broker.protocol.letters).
        "gazette.broker.protocol.postfix_template",
    ):
        assert unneeded not in modules, f"`gazctl journals append` imported {unneeded}"


def test_a_one_shot_command_imports_without_collecting_and_collects_after() -> None:
    probe = (
        "import gc; from gazette.gazctl import lazy; lazy.one_shot = True; "
        "lazy.Command('gazette.gazctl.journals.content:append_cmd').load(); "
        "print(gc.isenabled(), gc.get_freeze_count() > 10000)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    # Collection is on again, and what the import made is out of its way.
    assert out.stdout.split() == ["True", "True"], out.stderr


def test_lazy_short_help_is_the_commands_own() -> None:
    # cli.py repeats the shards group's one-line help so that --help needn't import it.
    assert isinstance(cli.gazctl, lazy.Group)
    entry = cli.gazctl.lazy_commands["shards"]
    loaded = entry.load()
    assert loaded is shards.group
    stand_in = click.Command("shards", help=entry.short_help)
    assert stand_in.get_short_help_str(1000) == loaded.get_short_help_str(1000)
