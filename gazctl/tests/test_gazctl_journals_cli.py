"""gazctl journals as Gazette users expect it, against a real cluster (etcd + broker processes).

- ``append`` with Gazette's record contract: a partition-key record before each
  record under modulo / rendezvous / direct mapping, ``--base64`` keys,
  ``--framing fixed``, and errors for input that is not what the flags say;
- a progress line on stderr for runs longer than a second (``--progress``);
- ``read ... | head`` ends as Go's gazctl does: killed by SIGPIPE, silently;
- help examples name journals that ``make up`` creates (examples/journals.yaml);
- ``fragments`` shows each fragment's URL, and ``-o json`` is Go's JSON.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pathlib
import re
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner, Result

from gazette.broker import journalspace, testing
from gazette.broker import protocol as pb
from gazette.gazctl import cli, output
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]

SPECS = """\
name: cli/
replication: 2
fragment:
  length: 1048576
  compression_codec: NONE
  stores:
  - file:///
  refresh_interval: 1s
children:
- name: cli/big
- name: cli/fixed
- name: cli/misc
- name: cli/parts/
  labels:
  - name: topic
    value: parts
  children:
  - name: cli/parts/a
  - name: cli/parts/b
  - name: cli/parts/c
- name: cli/slow
"""
PARTS = ["cli/parts/a", "cli/parts/b", "cli/parts/c"]  # As brokers list them: sorted.

Gaz = Callable[..., Result]


@pytest.fixture(scope="module")
def cluster(
    etcd_server: ks_testing.EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[testing.BrokerCluster]:
    with testing.running_cluster(
        etcd_server.endpoint, tmp_path_factory.mktemp("brokers"), brokers=3
    ) as c:
        yield c


@pytest.fixture(scope="module")
def gaz(cluster: testing.BrokerCluster) -> Iterator[Gaz]:
    runner = CliRunner()
    env = {"BROKER_ADDRESS": cluster[0].endpoint}

    def invoke(*args: str, input: str | bytes | None = None, ok: bool = True) -> Result:
        result = runner.invoke(cli.gazctl, list(args), input=input, env=env)
        if ok:
            assert result.exit_code == 0, f"gazctl {' '.join(args)}: {result.output}"
        return result

    invoke("journals", "apply", input=SPECS)
    names = [*PARTS, "cli/fixed", "cli/big", "cli/misc", "cli/slow"]
    for name in names:
        for _ in range(100):  # Until assigned: appending nothing succeeds.
            if (
                invoke("journals", "append", "-l", f"name={name}", input=b"", ok=False).exit_code
                == 0
            ):
                break
    yield invoke


def _env(cluster: testing.BrokerCluster) -> dict[str, str]:
    return {**os.environ, "BROKER_ADDRESS": cluster[0].endpoint}


def _gazctl_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "gazette.gazctl", *args]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _contents(gaz: Gaz, names: list[str]) -> dict[str, bytes]:
    return {n: gaz("journals", "read", "-l", f"name={n}").stdout_bytes for n in names}


def _appended(before: dict[str, bytes], after: dict[str, bytes]) -> dict[str, bytes]:
    for name, content in after.items():
        assert content.startswith(before[name])
    return {name: after[name][len(before[name]) :] for name in after}


def _fnv1a32(data: bytes) -> int:
    # Written out here rather than imported, so the test checks the mapping
    # against Go's hash/fnv definition and not against itself.
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def _modulo(key: bytes) -> str:
    return PARTS[_fnv1a32(key) % len(PARTS)]


def _rendezvous(key: bytes) -> str:
    # Highest (key hash XOR journal-name hash); the first journal wins ties (Go's `>`).
    best, pick = 0, PARTS[0]
    for name in PARTS:
        w = _fnv1a32(key) ^ _fnv1a32(name.encode())
        if w > best:
            best, pick = w, name
    return pick


def _fixed(payload: bytes) -> bytes:
    return b"\x66\x33\x93\x36" + struct.pack("<I", len(payload)) + payload


def _expected(records: list[tuple[bytes, bytes]], mapping: Callable[[bytes], str]) -> dict:  # type: ignore[type-arg]
    want = dict.fromkeys(PARTS, b"")
    for key, record in records:
        want[mapping(key)] += record
    return want


# --- append: Gazette's record contract ------------------------------------------------


@pytest.mark.parametrize("mapping", ["modulo", "rendezvous"])
def test_append_lines_maps_on_the_key_line_before_each_record(gaz: Gaz, mapping: str) -> None:
    records = [(f"key-{i}".encode(), f'{{"n": {i}}}\n'.encode()) for i in range(40)]
    # A key line, then its record line (keys may end in \r\n: the key is trimmed).
    stdin = b"".join(k + (b"\r\n" if i % 2 else b"\n") + r for i, (k, r) in enumerate(records))
    before = _contents(gaz, PARTS)
    out = gaz("journals", "append", "-l", "topic=parts", "-f", "lines", "-m", mapping, input=stdin)
    assert "appended 40 lines to 3 journal(s)" in out.output
    got = _appended(before, _contents(gaz, PARTS))
    want = _expected(records, _modulo if mapping == "modulo" else _rendezvous)
    assert got == want
    assert all(want.values()), "40 keys should reach every one of 3 journals"
    assert b"key-" not in b"".join(got.values()), "keys are not appended"


def test_append_base64_keys(gaz: Gaz) -> None:
    # Binary keys (here: a newline and a NUL in them) travel as base64 lines.
    records = [(bytes([i, 10, 0, i * 7 % 256]), f"rec {i}\n".encode()) for i in range(30)]
    stdin = b"".join(base64.b64encode(k) + b"\n" + r for k, r in records)
    before = _contents(gaz, PARTS)
    gaz("journals", "append", "-l", "topic=parts", "-f", "lines", "-m", "modulo", "--base64",
        input=stdin)  # fmt: skip
    assert _appended(before, _contents(gaz, PARTS)) == _expected(records, _modulo)

    bad = gaz("journals", "append", "-l", "topic=parts", "-f", "lines", "-m", "modulo",
              "--base64", input=b"not base64!\nrecord\n", ok=False)  # fmt: skip
    assert bad.exit_code == 1
    assert "is not base64" in bad.output


def test_append_direct_names_the_journal_of_each_record(gaz: Gaz) -> None:
    stdin = b"cli/parts/c\nto c\ncli/parts/a\nto a\ncli/parts/c\nto c again\n"
    before = _contents(gaz, PARTS)
    gaz("journals", "append", "-l", "topic=parts", "-f", "lines", "-m", "direct", input=stdin)
    assert _appended(before, _contents(gaz, PARTS)) == {
        "cli/parts/a": b"to a\n",
        "cli/parts/b": b"",
        "cli/parts/c": b"to c\nto c again\n",
    }

    # A journal the selector doesn't select fails the command, after the records before it.
    before = _contents(gaz, PARTS)
    stdin = b"cli/parts/b\nfirst\ncli/misc\nnot selected\ncli/parts/b\nnever\n"
    bad = gaz("journals", "append", "-l", "topic=parts", "-f", "lines", "-m", "direct",
              input=stdin, ok=False)  # fmt: skip
    assert bad.exit_code == 1
    assert "'cli/misc' not found" in bad.output and "after 1 record(s)" in bad.output
    assert _appended(before, _contents(gaz, PARTS))["cli/parts/b"] == b"first\n"


def test_append_fixed_framing(gaz: Gaz) -> None:
    # Records keep their frame headers; payloads may hold anything, newlines included.
    frames = [_fixed(f"payload\n{i}".encode()) for i in range(5)] + [_fixed(b"")]
    before = _contents(gaz, ["cli/fixed"])
    out = gaz("journals", "append", "-l", "name=cli/fixed", "-f", "fixed", input=b"".join(frames))
    assert "appended 6 frames to 1 journal(s)" in out.output
    assert _appended(before, _contents(gaz, ["cli/fixed"]))["cli/fixed"] == b"".join(frames)

    # Keys are fixed frames too; the key's payload is what is hashed.
    records = [(f"k{i}".encode(), _fixed(f"v{i}".encode())) for i in range(20)]
    stdin = b"".join(_fixed(k) + r for k, r in records) + b"\n"  # One trailing newline is fine.
    before = _contents(gaz, PARTS)
    gaz("journals", "append", "-l", "topic=parts", "-f", "fixed", "-m", "rendezvous", input=stdin)
    assert _appended(before, _contents(gaz, PARTS)) == _expected(records, _rendezvous)


@pytest.mark.parametrize(
    ("framing", "stdin", "error"),
    [
        ("lines", b"whole\npartial", "unexpected EOF (the input ends in a line without"),
        ("fixed", _fixed(b"ok") + b"\x66\x33\x93", "ends inside a fixed-frame header"),
        ("fixed", _fixed(b"ok") + _fixed(b"cut short")[:-2], "ends inside a 17-byte fixed frame"),
        ("fixed", _fixed(b"ok") + b"garbage!" + _fixed(b"x"), "detected de-synchronization"),
    ],
)
def test_append_rejects_broken_input_after_appending_whole_records(
    gaz: Gaz, framing: str, stdin: bytes, error: str
) -> None:
    before = _contents(gaz, ["cli/misc"])
    bad = gaz("journals", "append", "-l", "name=cli/misc", "-f", framing, input=stdin, ok=False)
    assert bad.exit_code == 1
    assert error in bad.output and "after 1 record(s)" in bad.output
    assert len(bad.output.strip().splitlines()) == 1
    first = b"whole\n" if framing == "lines" else _fixed(b"ok")
    assert _appended(before, _contents(gaz, ["cli/misc"]))["cli/misc"] == first


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "modulo"],  # --framing none takes no mapping.
        ["-f", "lines", "--base64"],  # Random mapping has no keys to decode.
        ["-f", "fixed", "-m", "modulo", "--base64"],  # Only lines keys are base64.
    ],
)
def test_append_flag_combinations_gazette_refuses(gaz: Gaz, args: list[str]) -> None:
    result = gaz("journals", "append", "-l", "topic=parts", *args, input=b"x\ny\n", ok=False)
    assert result.exit_code == 2
    assert "Usage:" in result.output


# --- progress -----------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_line_waits_a_second_then_overwrites_itself() -> None:
    term, clock = _Terminal(), _Clock()
    p = output.Progress("appended", "auto", stream=term, clock=clock)
    p.add(2048, 2)
    clock.now += 0.5
    p.add(2048, 2)
    assert term.getvalue() == "", "nothing during the first second"
    clock.now += 0.5
    p.add(4096, 4)
    assert term.getvalue() == "\rappended 8.0 KiB, 8 records (8.0 KiB/s)   "
    p.done()
    assert term.getvalue().endswith("\n")

    # A quick run shows nothing at all; content on the terminal silences auto.
    for kwargs in ({}, {"content_on_terminal": True}):
        term, clock = _Terminal(), _Clock()
        p = output.Progress("read", "auto", stream=term, clock=clock, **kwargs)  # type: ignore[arg-type]
        p.add(10)
        clock.now += 0.5 if not kwargs else 5
        p.add(10)
        p.done()
        assert term.getvalue() == ""

    # auto stays off on a file or pipe; always writes a line per update there.
    p = output.Progress("read", "auto", stream=io.StringIO(), clock=clock)
    assert not p.enabled
    log, clock = io.StringIO(), _Clock()
    p = output.Progress("read", "always", stream=log, clock=clock)
    clock.now += 2
    p.add(1024)
    p.done()
    assert log.getvalue() == "read 1.0 KiB (512 B/s)\nread 1.0 KiB (512 B/s)\n"


def test_append_and_read_progress_on_stderr(gaz: Gaz, cluster: testing.BrokerCluster) -> None:
    # A writer that pauses: the append lasts over a second. Its first record is
    # appended while the input waits (the input is read off the event loop).
    proc = subprocess.Popen(
        _gazctl_argv(
            "journals", "append", "-l", "name=cli/slow", "-f", "lines", "--progress", "always"
        ),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(cluster),
    )
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(b"first\n")
    proc.stdin.flush()
    for _ in range(100):
        if _contents(gaz, ["cli/slow"])["cli/slow"] == b"first\n":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the first record was not appended while the input waited")
    time.sleep(1.1)
    proc.stdin.write(b"second\n")
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert re.search(r"^appended 13 B, 2 records \([\d.]+ \w*B/s\)$", err, re.M), err
    assert "appended 2 lines to 1 journal(s)" in err

    # A blocking read, fed again after a second, then interrupted. The child starts
    # with SIGINT at its default whatever this process inherited (a terminal's Ctrl-C;
    # a child of a process that ignores SIGINT would ignore it too), and dumps its
    # threads' stacks if it must be aborted (PYTHONFAULTHANDLER).
    read = subprocess.Popen(
        _gazctl_argv("journals", "read", "-l", "name=cli/slow", "--block", "--progress", "always"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**_env(cluster), "PYTHONFAULTHANDLER": "1"},
        preexec_fn=_default_sigint,
    )
    try:
        assert read.stdout is not None
        assert read.stdout.read(13) == b"first\nsecond\n"
        time.sleep(1.1)
        gaz("journals", "append", "-l", "name=cli/slow", input=b"third\n")
        assert read.stdout.read(6) == b"third\n"
        read.send_signal(signal.SIGINT)
        try:
            out, err_b = read.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            status = pathlib.Path(f"/proc/{read.pid}/status").read_text()
            masks = [line for line in status.splitlines() if line.startswith("Sig")]
            read.send_signal(signal.SIGABRT)
            _, dump = read.communicate(timeout=30)
            pytest.fail(f"Ctrl-C did not end the read ({masks}):\n{dump.decode()}")
    finally:
        if read.poll() is None:  # Don't leave it to later tests.
            read.kill()
            read.communicate()
    assert out == b""
    assert read.returncode == 130
    assert re.search(r"^read 19 B \(", err_b.decode(), re.M), err_b

    # Quick runs are silent even with --progress always.
    quick = subprocess.run(
        _gazctl_argv("journals", "read", "-l", "name=cli/slow", "--progress", "always"),
        env=_env(cluster),
        capture_output=True,
        check=True,
    )
    assert quick.stdout == b"first\nsecond\nthird\n"
    assert quick.stderr == b""


# --- read | head ----------------------------------------------------------------------


def test_read_into_a_closed_pipe_dies_quietly_of_sigpipe(
    gaz: Gaz, cluster: testing.BrokerCluster
) -> None:
    # Far more than a pipe buffers, so writes go on after `head` has left.
    gaz("journals", "append", "-l", "name=cli/big", input=b"0123456789abcdef\n" * 200_000)
    reader = subprocess.Popen(
        _gazctl_argv("journals", "read", "-l", "name=cli/big"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(cluster),
    )
    assert reader.stdout is not None and reader.stderr is not None
    head = subprocess.run(["head", "-c", "10"], stdin=reader.stdout, capture_output=True)
    reader.stdout.close()  # Only head holds the pipe's read end, as in a shell.
    assert head.stdout == b"0123456789"
    assert reader.wait(timeout=30) == -signal.SIGPIPE  # Exit status 141 in a shell, as Go's.
    assert reader.stderr.read() == b"", "no traceback, no message"
    reader.stderr.close()


# --- help examples ------------------------------------------------------------------------


def _help_texts() -> dict[str, str]:
    runner = CliRunner()
    texts = {}
    commands = ["list", "read", "append", "fragments", "apply", "edit", "prune", "suspend",
                "reset-head"]  # fmt: skip
    for argv in [[], ["journals"], *(["journals", c] for c in commands)]:
        result = runner.invoke(cli.gazctl, [*argv, "--help"])
        assert result.exit_code == 0, result.output
        texts[" ".join(argv) or "gazctl"] = result.output
    return texts


def test_help_examples_select_journals_of_make_up(gaz: Gaz) -> None:
    # `make up` applies examples/journals.yaml: apply it here (under this
    # cluster's own etcd prefix) and list what each example selects.
    made = journalspace.flatten(journalspace.load((REPO / "examples/journals.yaml").read_text()))
    assert any(ch.upsert.name == "examples/logs/api" for ch in made)
    gaz("journals", "apply", "--specs", str(REPO / "examples/journals.yaml"))

    selectors: dict[str, str] = {}
    for command, text in _help_texts().items():
        for line in text.splitlines():
            if "gazctl " not in line or "-l " not in line:
                continue
            selector = re.search(r"-l\s+('[^']*'|\S+)", line)
            assert selector is not None
            selectors[selector.group(1).strip("'")] = command
    assert "name=examples/logs/api" in selectors
    for selector, command in selectors.items():
        listed = gaz("journals", "list", "-l", selector).output.splitlines()[1:]
        assert listed, f"`{command} --help`: -l {selector} selects no journal of `make up`"


# --- fragments ------------------------------------------------------------------------


def test_fragments_show_each_fragment_url_and_go_json(gaz: Gaz) -> None:
    gaz("journals", "append", "-l", "name=cli/misc", input=b"for the fragment listing\n")
    table = gaz("journals", "fragments", "-l", "name=cli/misc").output.splitlines()
    assert table[0].split() == ["Journal", "Offsets", "Length", "Codec", "Persisted", "URL"]

    lines = gaz("journals", "fragments", "-l", "name=cli/misc", "-o", "json").output.splitlines()
    frags = [json.loads(line) for line in lines]
    assert frags
    for line, f in zip(lines, frags, strict=True):
        # Go's encoding/json: compact, numbers as numbers, codec as its enum number.
        assert line == json.dumps(f, separators=(",", ":"))
        spec = f["spec"]
        assert list(spec)[:1] == ["journal"] and spec["journal"] == "cli/misc"
        assert isinstance(spec["end"], int) and spec["compression_codec"] == pb.NONE
        assert set(spec["sum"]) <= {"part1", "part2", "part3"}
        assert all(isinstance(v, int) for v in spec["sum"].values())
        assert "begin" not in spec or spec["begin"] > 0, "zero values are left out"

    # Each persisted fragment's row shows its file in the store. Fill a fragment
    # past its length: the next append rolls it, and it is persisted.
    gaz("journals", "append", "-l", "name=cli/misc", input=b"x" * 1_100_000)
    gaz("journals", "append", "-l", "name=cli/misc", input=b"roll\n")
    persisted: list[dict] = []  # type: ignore[type-arg]
    for _ in range(100):
        lines = gaz("journals", "fragments", "-l", "name=cli/misc", "-o", "json").output
        frags = [json.loads(line) for line in lines.splitlines()]
        persisted = [f["spec"] for f in frags if f["spec"].get("backing_store")]
        if persisted:
            break
        time.sleep(0.2)
    assert persisted
    spec = persisted[0]
    name = f"{spec.get('begin', 0):016x}-{spec['end']:016x}-"
    table_text = gaz("journals", "fragments", "-l", "name=cli/misc").output
    (row,) = [r for r in table_text.splitlines() if name in r]
    url = row.split()[-1]
    assert url.startswith("file:///cli/misc/" + name) and url.endswith(".raw")

    proto = gaz("journals", "fragments", "-l", "name=cli/misc", "-o", "proto").output
    assert 'journal: "cli/misc"' in proto
