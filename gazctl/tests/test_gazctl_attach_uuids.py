"""``gazctl attach-uuids``: Gazette message UUIDs for lines of text, as Go's gazctl attaches them."""

from __future__ import annotations

import io
import pathlib
import shutil
import subprocess
import sys
import uuid

import pytest
from click.testing import CliRunner

from gazette.gazctl import attach_uuids, cli
from gazette.message import uuids

REPO = pathlib.Path(__file__).parents[2]


def _run(inputs: list[bytes], **options: object) -> list[bytes]:
    out = io.BytesIO()
    files = [(f"in-{i}", io.BytesIO(b)) for i, b in enumerate(inputs)]
    attach_uuids.attach_uuids(files, out, **options)  # type: ignore[arg-type]
    return out.getvalue().splitlines(keepends=True)


def _uuid_and_rest(record: bytes) -> tuple[uuid.UUID, bytes]:
    text, rest = record.split(b",", 1)
    return uuids.parse_uuid(text.decode()), rest


def test_each_line_gets_a_committed_uuid_of_one_producer_in_clock_order() -> None:
    records = _run([b"a,b\nc,d\r\n\nlast without newline", b"second file\n"])
    got = [_uuid_and_rest(r) for r in records]
    assert [rest for _, rest in got] == [
        b"a,b\n",
        b"c,d\n",  # The \r goes with the \n, as Go's scanner drops it.
        b"\n",
        b"last without newline\n",
        b"second file\n",
    ]
    ids = [u for u, _ in got]
    assert all(u.version == 1 for u in ids)
    assert len({uuids.get_producer(u) for u in ids}) == 1
    assert uuids.get_producer(ids[0])[0] & 0x01  # A multicast (never a real) MAC.
    assert all(uuids.get_flags(u) == uuids.Flags.OUTSIDE_TXN for u in ids)
    clocks = [uuids.get_clock(u) for u in ids]
    assert clocks == sorted(clocks) and len(set(clocks)) == len(clocks)


def test_templates_headers_and_bytes_that_are_not_utf8() -> None:
    records = _run(
        [b"header\n\xff\xfe raw\n", b'header\n{"k": 1}\n'],
        template='{"uuid": "{{.UUID}}", "record": {{.Line}}}\n',
        skip_header=True,
    )
    assert len(records) == 2
    assert records[0].endswith(b'"record": \xff\xfe raw}\n')  # Passed through as bytes.
    assert records[1].endswith(b'"record": {"k": 1}}\n')
    assert records[1].startswith(b'{"uuid": "')


def test_a_line_past_max_length_stops_with_an_error() -> None:
    with pytest.raises(Exception, match=r"in-0: a line is longer than --max-length \(4 bytes\)"):
        _run([b"1234\n12345\n"], max_length=4)


def test_the_command_checks_its_template_and_reads_files_or_stdin(tmp_path: pathlib.Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(cli.gazctl, ["attach-uuids", "--template", "{{.Nope}}"], input=b"")
    assert bad.exit_code == 2
    assert "--template" in bad.output and 'executing "root" at <.Nope>' in bad.output
    bad = runner.invoke(cli.gazctl, ["attach-uuids", "--template", "{{if .Line}}"], input=b"")
    assert bad.exit_code == 2 and "template: root:1:" in bad.output

    path = tmp_path / "in.csv"
    path.write_bytes(b"x\ny\n")
    ok = runner.invoke(cli.gazctl, ["attach-uuids", str(path), "-"], input=b"z\n")
    assert ok.exit_code == 0, ok.output
    assert [line.split(",", 1)[1] for line in ok.output.splitlines()] == ["x", "y", "z"]
    missing = runner.invoke(cli.gazctl, ["attach-uuids", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "No such file" in missing.output


def test_the_same_records_as_gos_gazctl() -> None:
    # Gazette's own gazctl (v0.103) over the same input: the records differ only in
    # their UUIDs (another producer and clock), whose layout is the same.
    if shutil.which("go") is None:
        pytest.skip("`go` is not on PATH: the Go interop tests need a Go toolchain")
    build = subprocess.run(
        [str(REPO / "broker/tests/interop/go/build.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    go_gazctl = pathlib.Path(build.stdout.strip().splitlines()[-1]) / "gazctl"
    data = b"id,name\n1,\xc3\xa9t\xc3\xa9\r\n2,two\n\nno newline"
    template = "{{.Line}}|{{.UUID}}\n"
    args = ["attach-uuids", "--skip-header", f"--template={template}"]
    theirs = subprocess.run(
        [str(go_gazctl), *args], input=data, capture_output=True, timeout=60, check=True
    ).stdout
    ours = subprocess.run(
        [sys.executable, "-m", "gazette.gazctl", *args],
        input=data,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    split = [[line.rsplit(b"|", 1) for line in out.splitlines()] for out in (theirs, ours)]
    assert [line for line, _ in split[0]] == [line for line, _ in split[1]]
    for go_rec, py_rec in zip(*split, strict=True):
        go_id, py_id = (uuids.parse_uuid(r[1].decode()) for r in (go_rec, py_rec))
        assert go_id.version == py_id.version == 1
        assert uuids.get_flags(go_id) == uuids.get_flags(py_id) == uuids.Flags.OUTSIDE_TXN
