"""gazctl journals commands against a real broker cluster (etcd + broker processes)."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from gazette.broker import testing
from gazette.gazctl import cli
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.integration

SPECS = """\
name: demo/
replication: 2
fragment:
  length: 1048576
  compression_codec: NONE
  stores:
  - file:///
  refresh_interval: 1s
  retention: 1s
children:
- name: demo/logs/
  labels:
  - name: topic
    value: logs
  children:
  - name: demo/logs/a
  - name: demo/logs/b
- name: demo/other
"""


@pytest.fixture(scope="module")
def cluster(
    etcd_server: ks_testing.EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[testing.BrokerCluster]:
    with testing.running_cluster(
        etcd_server.endpoint, tmp_path_factory.mktemp("brokers"), brokers=3
    ) as c:
        yield c


@pytest.fixture(scope="module")
def gaz(cluster: testing.BrokerCluster) -> Iterator[object]:
    runner = CliRunner()
    env = {"BROKER_ADDRESS": cluster[0].endpoint}

    def invoke(*args: str, input: str | bytes | None = None, ok: bool = True) -> object:
        result = runner.invoke(cli.gazctl, list(args), input=input, env=env)
        if ok:
            assert result.exit_code == 0, f"gazctl {' '.join(args)}: {result.output}"
        return result

    # The journals every test uses.
    invoke("journals", "apply", input=SPECS)
    for name in ("demo/logs/a", "demo/logs/b", "demo/other"):
        for _ in range(100):  # Until assigned: appending nothing succeeds.
            if (
                invoke("journals", "append", "-l", f"name={name}", input=b"", ok=False).exit_code
                == 0
            ):
                break
    yield invoke


def test_apply_dry_run_changes_nothing(gaz) -> None:  # type: ignore[no-untyped-def]
    out = gaz(
        "journals", "apply", "--dry-run", input=SPECS.replace("demo/other", "demo/zzz")
    ).output
    assert "would apply 3 change(s)" in out and "create demo/zzz" in out
    assert "demo/zzz" not in gaz("journals", "list").output


def test_list_formats(gaz) -> None:  # type: ignore[no-untyped-def]
    table = gaz("journals", "list", "-l", "topic=logs", "-p", "-r", "--rf", "--stores").output
    lines = table.splitlines()
    assert lines[0].split() == ["Name", "Primary", "Replicas", "RF", "Stores"]
    assert [ln.split()[0] for ln in lines[1:]] == ["demo/logs/a", "demo/logs/b"]
    assert all(" 2 " in ln and "file:///" in ln for ln in lines[1:])

    doc = json.loads(gaz("journals", "list", "-l", "topic=logs", "-o", "json").output)
    assert [j["spec"]["name"] for j in doc["journals"]] == ["demo/logs/a", "demo/logs/b"]

    yaml_out = gaz("journals", "list", "-l", "name:prefix=demo/", "-o", "yaml").output
    assert "name: demo/logs/" in yaml_out and "revision:" in yaml_out
    # What list -o yaml prints, apply takes back (revisions make it a checked update).
    assert "applied 3 change(s)" in gaz("journals", "apply", input=yaml_out).output


def test_append_and_read(gaz, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    gaz("journals", "append", "-l", "name=demo/logs/a", input=b"one\ntwo\n")
    assert gaz("journals", "read", "-l", "name=demo/logs/a").output == "one\ntwo\n"
    assert gaz("journals", "read", "-l", "name=demo/logs/a", "--offset", "4").output == "two\n"

    # Lines framing spreads whole lines over every selected journal. (Random
    # mapping: modulo and rendezvous read a partition-key line before each
    # record, see test_gazctl_journals_cli.py.)
    lines = "".join(f"line {i}\n" for i in range(200))
    out = gaz("journals", "append", "-l", "topic=logs", "-f", "lines", "-m", "random", input=lines)
    assert "appended 200 lines to 2 journal(s)" in out.output

    out_dir = tmp_path / "out"
    offsets = tmp_path / "offsets.json"
    gaz("journals", "read", "-l", "topic=logs", "-o", f"{out_dir}/", "--offsets-out", str(offsets))
    a = (out_dir / "demo/logs/a").read_text()
    b = (out_dir / "demo/logs/b").read_text()
    assert a.startswith("one\ntwo\n")
    got = a.removeprefix("one\ntwo\n").splitlines() + b.splitlines()
    assert sorted(got) == sorted(lines.splitlines())
    assert json.loads(offsets.read_text()) == {
        "demo/logs/a": len(a.encode()),
        "demo/logs/b": len(b.encode()),
    }

    # Starting from --offsets, only newer content is read.
    gaz("journals", "append", "-l", "name=demo/logs/b", input=b"newer\n")
    out = gaz(
        "journals", "read", "-l", "name=demo/logs/b", "--offsets", str(offsets), "--offsets-out",
        str(offsets),
    ).output  # fmt: skip
    assert out == "newer\n"
    assert (tmp_path / "offsets.json.previous").exists()


def test_append_none_framing_needs_one_journal(gaz) -> None:  # type: ignore[no-untyped-def]
    result = gaz("journals", "append", "-l", "topic=logs", input=b"x", ok=False)
    assert result.exit_code == 1
    assert "matches 2 journals" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_errors_are_one_line(gaz) -> None:  # type: ignore[no-untyped-def]
    result = gaz("journals", "list", "-l", "bad selector ((", ok=False)
    assert result.exit_code != 0
    result = CliRunner().invoke(
        cli.gazctl,
        ["journals", "list", "--broker.address", "http://127.0.0.1:1"],
    )
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert "UNAVAILABLE" in line and "is a broker running there?" in line


def test_fragments_prune_reset_head_store_health(  # type: ignore[no-untyped-def]
    gaz, cluster: testing.BrokerCluster
) -> None:
    gaz("journals", "append", "-l", "name=demo/other", input=b"payload\n")
    out = gaz("journals", "fragments", "-l", "name=demo/other").output
    assert out.splitlines()[0].split()[:3] == ["Journal", "Offsets", "Length"]
    assert "demo/other" in out
    # One JSON object a line, as Gazette's gazctl prints them.
    out = gaz("journals", "fragments", "-l", "name=demo/other", "-o", "json").output
    data = [json.loads(line) for line in out.splitlines()]
    assert data and all(f["spec"]["journal"] == "demo/other" for f in data)

    out = gaz("journals", "prune", "-l", "name=demo/other", "--dry-run", "--file-root",
              str(cluster.file_root)).output  # fmt: skip
    assert "fragment(s)" in out

    out = gaz("journals", "reset-head", "-l", "name=demo/other").output
    assert out.startswith("reset demo/other head to ")

    assert "is healthy" in gaz("journals", "store-health", "file:///").output


def test_edit_reopens_on_error_then_applies(  # type: ignore[no-untyped-def]
    gaz, tmp_path: pathlib.Path
) -> None:
    # An "editor" that first breaks the YAML, then (seeing the error) sets a label.
    script = tmp_path / "editor.py"
    script.write_text(
        "import sys, pathlib\n"
        "p = pathlib.Path(sys.argv[1]); t = p.read_text()\n"
        "if '# ERROR' not in t:\n"
        "    p.write_text(t + 'bogus_key: 1\\n')\n"
        "else:\n"
        "    body = ''.join(l for l in t.splitlines(True) if not l.startswith('#'))\n"
        "    body = body.replace('bogus_key: 1\\n', '')\n"
        "    p.write_text(body.replace('name: demo/other\\n', "
        "'name: demo/other\\nlabels:\\n- name: edited\\n  value: \"yes\"\\n', 1))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    os.environ["GAZ_EDITOR"] = f"{sys.executable} {script}"
    try:
        result = gaz("journals", "edit", "-l", "name=demo/other")
    finally:
        del os.environ["GAZ_EDITOR"]
    assert "re-opening the editor" in result.output
    assert "applied" in result.output
    assert "demo/other" in gaz("journals", "list", "-l", "edited=yes").output
