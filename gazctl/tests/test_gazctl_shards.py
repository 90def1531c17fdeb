"""gazctl shards apply / edit / recover / prune against real servers.

Real parts: etcd, an in-process broker with a ``file://`` store, and an
in-process consumer process serving the ``consumer.Shard`` API. Shards are
``disable: true``, so no replica ever plays or takes their recovery logs: the
test records the log itself (a :class:`~gazette.consumer.recoverylog.Recorder`
after a player's hand-off) and writes the hints into etcd where the shard's
primary and backups would. gazctl runs as a user runs it (click), in a worker
thread, as its commands run their own event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import stat
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gazette.broker import client, testing
from gazette.broker import protocol as pb
from gazette.broker.server import testing as server_testing
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer import testing as consumer_testing
from gazette.gazctl import cli, shards_api, shards_recovery
from gazette.keyspace import testing as ks_testing

integration = pytest.mark.integration

NDJSON = pb.CONTENT_TYPE_JSON_LINES
SOURCES = ["gs/in/part-000", "gs/in/part-001"]
OCTETS = "gs/blobs"  # A journal of a content type no message framing reads.
LOG_PREFIX = "gs/logs"
REC = "shard-rec"
LOG = f"{LOG_PREFIX}/{REC}"
HINT_PREFIX = "/gazette/hints/gs"
CONSUMERS = "/gazette/consumers/gazctl-shards"

SHARDS_YAML = """\
common:
  max_txn_duration: 1s
  disable: true
shards:
- id: shard-000
  sources:
  - journal: gs/in/part-000
- id: shard-001
  sources:
  - journal: gs/in/part-001
  labels:
  - name: tier
    value: gold
"""


@dataclasses.dataclass
class Env:
    jc: client.JournalClient
    etcd: Any
    file_root: pathlib.Path
    broker: str
    consumer: str

    async def gaz(self, *args: str, input: str | None = None, ok: bool = True) -> Result:
        env = {"BROKER_ADDRESS": self.broker, "CONSUMER_ADDRESS": self.consumer}
        result = await asyncio.to_thread(
            CliRunner().invoke, cli.gazctl, list(args), input=input, env=env
        )
        if ok:
            assert result.exit_code == 0, f"gazctl {' '.join(args)}: {result.output}"
        else:
            assert result.exit_code != 0, f"gazctl {' '.join(args)} succeeded: {result.output}"
        return result


@pytest.fixture
async def env(
    etcd: Any, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> AsyncIterator[Env]:
    async with (
        server_testing.InProcessCluster(etcd_server.endpoint, work_dir=tmp_path, brokers=1) as c,
        client.JournalClient(client.ClientConfig(address=c[0].endpoint)) as jc,
    ):
        specs = [
            testing.journal_spec(name, labels=[(pb.LABEL_CONTENT_TYPE, NDJSON)]) for name in SOURCES
        ]
        specs.append(
            testing.journal_spec(
                OCTETS, labels=[(pb.LABEL_CONTENT_TYPE, "application/octet-stream")]
            )
        )
        # Small fragments, each persisted when full: the log has several to prune.
        specs.append(
            testing.journal_spec(
                LOG,
                stores=[c.store_url],
                length=1024,
                labels=[(pb.LABEL_CONTENT_TYPE, pb.CONTENT_TYPE_RECOVERYLOG)],
            )
        )
        await client.apply_journals(
            jc, pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=s) for s in specs])
        )
        async with asyncio.timeout(30):
            for spec in specs:
                while True:
                    try:
                        await asyncio.wait_for(client.append(jc, spec.name, b""), 5)
                        break
                    except (client.errors.ClientError, TimeoutError):
                        await asyncio.sleep(0.1)

        args = consumer_testing.argv(
            etcd=etcd_server.endpoint, broker=c[0].endpoint, prefix=CONSUMERS, zone="zone-a"
        )
        async with consumer_testing.serving(args, consumer_testing.DisabledShards()) as srv:
            yield Env(jc, etcd, c.file_root, c[0].endpoint, srv.endpoint)


# --- apply and edit -------------------------------------------------------------------------


@integration
async def test_apply_creates_updates_and_deletes_with_revision_checks(env: Env) -> None:
    out = (await env.gaz("shards", "apply", "--dry-run", input=SHARDS_YAML)).output
    assert "would apply 2 change(s)" in out and "create shard-000" in out
    assert "shard-000" not in (await env.gaz("shards", "list")).output

    out = (await env.gaz("shards", "apply", "--max-txn-size", "1", input=SHARDS_YAML)).output
    assert "create shard-000\n  create shard-001\napplied 2 change(s)" in out
    listed = (await env.gaz("shards", "list", "-o", "yaml")).output
    assert "  max_txn_duration: 1s\n  disable: true\n" in listed  # Shared: hoisted into common.
    assert "value: gold" in listed and listed.count("revision:") == 2

    # Creating them again fails the revision check, and says why.
    result = await env.gaz("shards", "apply", input=SHARDS_YAML, ok=False)
    assert "ETCD_TRANSACTION_FAILED" in result.output and "revision" in result.output

    # What list -o yaml prints applies back as a checked update; once applied, the
    # same (now stale) revisions are refused.
    edited = listed.replace("  max_txn_duration: 1s\n", "  max_txn_duration: 2s\n")
    assert "update shard-000" in (await env.gaz("shards", "apply", input=edited)).output
    assert (
        "ETCD_TRANSACTION_FAILED"
        in (await env.gaz("shards", "apply", input=edited, ok=False)).output
    )
    assert "max_txn_duration: 2s" in (await env.gaz("shards", "list", "-o", "yaml")).output
    # An unconditional update (revision -1), then a delete at the current revision.
    forced = "common: {}\nshards:\n- id: shard-001\n  sources:\n  - journal: gs/in/part-001\n"
    forced += "  max_txn_duration: 3s\n  disable: true\n  revision: -1\n"
    assert "upsert shard-001" in (await env.gaz("shards", "apply", input=forced)).output
    listed = (await env.gaz("shards", "list", "-l", "id=shard-001", "-o", "yaml")).output
    assert "max_txn_duration: 3s" in listed and "tier" not in listed
    deleting = listed.replace("- id: shard-001", "- delete: true\n  id: shard-001")
    assert "delete shard-001" in (await env.gaz("shards", "apply", input=deleting)).output
    table = (await env.gaz("shards", "list")).output
    assert "shard-000" in table and "shard-001" not in table


@integration
@pytest.mark.parametrize(
    ("doc", "says"),
    [
        (
            SHARDS_YAML + "  hot_standby: 1\n",
            "shards[1] (shard-001): hot_standby: unknown key 'hot_standby'",
        ),
        (
            SHARDS_YAML.replace("max_txn_duration: 1s", "max_txn_duration: 1 second"),
            "common: max_txn_duration: not a duration ('1 second')",
        ),
        (
            SHARDS_YAML.replace("  max_txn_duration: 1s\n", ""),
            "shard-000: max_txn_duration: invalid MaxTxnDuration (0; expected > 0)",
        ),
        (
            SHARDS_YAML.replace("gs/in/part-001", "gs/in/missing"),
            "shard-001: sources[0].journal: journal 'gs/in/missing' does not exist",
        ),
        (
            SHARDS_YAML.replace("gs/in/part-001", OCTETS),
            "shard-001: sources[0].journal: journal 'gs/blobs' has content-type"
            " 'application/octet-stream', which no message framing reads",
        ),
        (
            SHARDS_YAML.replace(
                "common:\n", "common:\n  recovery_log_prefix: gs/in\n  hint_prefix: /h\n"
            ),
            "shard-000: recovery_log_prefix: the recovery log 'gs/in/shard-000' (recovery_log_prefix/id) does not exist",
        ),
        (
            SHARDS_YAML.replace("- id: shard-001\n", "- id: shard-001\n  delete: true\n"),
            "shard-001: revision: invalid ExpectModRevision (0; expected > 0 or -1)",
        ),
    ],
)
async def test_apply_errors_name_the_shard_field_and_rule(env: Env, doc: str, says: str) -> None:
    result = await env.gaz("shards", "apply", "--dry-run", input=doc, ok=False)
    assert says in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@integration
async def test_edit_reopens_on_error_then_applies(env: Env, tmp_path: pathlib.Path) -> None:
    await env.gaz("shards", "apply", input=SHARDS_YAML)
    # An "editor" that first sets an invalid value, then (seeing the error) fixes it
    # and adds a label.
    script = tmp_path / "editor.py"
    script.write_text(
        "import sys, pathlib\n"
        "p = pathlib.Path(sys.argv[1]); t = p.read_text()\n"
        "if '# ERROR' not in t:\n"
        "    p.write_text(t.replace('  revision:', '  hot_standbys: -1\\n  revision:', 1))\n"
        "else:\n"
        "    body = ''.join(l for l in t.splitlines(True) if not l.startswith('#'))\n"
        "    body = body.replace('  hot_standbys: -1\\n', '')\n"
        "    p.write_text(body.replace('- id: shard-000\\n', "
        "'- id: shard-000\\n  labels:\\n  - name: edited\\n    value: \"yes\"\\n', 1))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    os.environ["GAZ_EDITOR"] = f"{sys.executable} {script}"
    try:
        result = await env.gaz("shards", "edit", "-l", "id=shard-000")
    finally:
        del os.environ["GAZ_EDITOR"]
    assert "hot_standbys: -1 is out of range" in result.output
    assert "re-opening the editor" in result.output
    assert "update shard-000" in result.output and "applied" in result.output
    assert "shard-000" in (await env.gaz("shards", "list", "-l", "edited=yes")).output

    # Saving unchanged cancels.
    os.environ["GAZ_EDITOR"] = "true"
    try:
        assert "no changes" in (await env.gaz("shards", "edit", "-l", "id=shard-000")).output
    finally:
        del os.environ["GAZ_EDITOR"]


# --- recover and prune ----------------------------------------------------------------------


REC_YAML = f"""\
common:
  recovery_log_prefix: {LOG_PREFIX}
  hint_prefix: {HINT_PREFIX}
  hint_backups: 1
  max_txn_duration: 1s
  disable: true
shards:
- id: {REC}
  sources:
  - journal: gs/in/part-000
"""

OLD = b"old! " * 1000  # Each write fills a fragment (1 KiB) and more: fragments roll.
LIVE = b"live " * 1000
LATER = b"later" * 1000


@dataclasses.dataclass
class Recording:
    old: rl.FSMHints  # When old.txt was the live file.
    live: rl.FSMHints  # When live.txt was (and is).


async def _record(jc: client.JournalClient, work: pathlib.Path) -> Recording:
    """Record: old.txt, then live.txt replacing it, then a file made and removed.

    The hints of each step's live files are what a primary would have stored.
    """
    author = 0x5EED
    fsm = await rl.Player(jc, rl.FSMHints(log=LOG), work).play(handoff_author=author)
    async with client.AppendService(jc) as appends:
        rec = rl.Recorder(fsm, author, work, appends, LOG)
        await rec.start()
        fnode = rec.record_create("old.txt")
        rec.record_write_at(fnode, OLD, 0)
        old = await rec.build_hints()
        rec.record_remove("old.txt")
        fnode = rec.record_create("live.txt")
        rec.record_write_at(fnode, LIVE, 0)
        live = await rec.build_hints()
        # Written after the last hints: a prune must keep it (playback reads on to the head).
        fnode = rec.record_create("later.txt")
        rec.record_write_at(fnode, LATER, 0)
        rec.record_remove("later.txt")
        await rec.barrier()
    return Recording(old, live)


async def _persisted_fragments(jc: client.JournalClient) -> list[pb.Fragment]:
    """The log's fragments, once every one that will be persisted is.

    The last one may be a spool still open (never persisted until it fills): it
    is given a moment, so that no upload lands between the test's looks at the store.
    """
    settle = None
    frags: list[pb.Fragment] = []
    async with asyncio.timeout(30):
        while True:
            frags = [
                f.spec
                async for f in client.list_all_fragments(jc, pb.FragmentsRequest(journal=LOG))
            ]
            if len(frags) >= 3 and all(f.mod_time for f in frags[:-1]):
                if frags[-1].mod_time:
                    return frags
                settle = settle or time.monotonic() + 2.0
                if time.monotonic() > settle:
                    return frags
            await asyncio.sleep(0.2)


def _stored(file_root: pathlib.Path) -> set[str]:
    return {p.name for p in (file_root / LOG).iterdir()}


def _first_offset(hints: rl.FSMHints) -> int:
    return int(rl.live_log_segments(hints)[1][0].first_offset)


async def _indexed(jc: client.JournalClient, without: set[str]) -> list[pb.Fragment]:
    """The log's fragments, once the broker's index no longer lists those ``without``."""
    async with asyncio.timeout(30):
        while True:
            frags = [
                f.spec
                async for f in client.list_all_fragments(jc, pb.FragmentsRequest(journal=LOG))
            ]
            if not {pb.fragment_content_name(f) for f in frags} & without:
                return frags
            await asyncio.sleep(0.2)


async def _prune(env: Env, says: str, *args: str) -> None:
    out = (
        await env.gaz(
            "shards", "prune", "-l", f"id={REC}", "--file-root", str(env.file_root), *args
        )
    ).output
    assert says in out, out


async def _put_hints(env: Env, key: str, hints: rl.FSMHints) -> None:
    await env.etcd.put(key.encode(), rl.hints_to_json(hints))


@integration
async def test_recover_and_prune_a_recorded_log(env: Env, tmp_path: pathlib.Path) -> None:
    started = time.monotonic()
    assert "create shard-rec" in (await env.gaz("shards", "apply", input=REC_YAML)).output
    recorded = await _record(env.jc, tmp_path / "recorder")
    frags = await _persisted_fragments(env.jc)
    spec = pc.ShardSpec(id=REC, hint_prefix=HINT_PREFIX, hint_backups=1)
    primary, (backup,) = pc.hint_primary_key(spec), pc.hint_backup_keys(spec)

    # Without hints, the whole log is played.
    out = (await env.gaz("shards", "recover", "--id", REC, "--dir", str(tmp_path / "a"))).output
    assert "(hints: none): 1 file(s)" in out
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["live.txt"]
    assert (tmp_path / "a" / "live.txt").read_bytes() == LIVE
    result = await env.gaz("shards", "recover", "--id", REC, "--dir", str(tmp_path / "a"), ok=False)
    assert "is not an empty directory" in result.output
    result = await env.gaz(
        "shards", "recover", "--id", "shard-nope", "-d", str(tmp_path / "n"), ok=False
    )
    assert "no shard 'shard-nope'" in result.output

    # Until every hints slot of the shard is written, nothing is pruned.
    await _put_hints(env, primary, recorded.live)
    before = _stored(env.file_root)
    await _prune(env, f"skipping {LOG}: shard {REC} has not written its backup 0 hints yet")
    assert _stored(env.file_root) == before

    # The older backup hints still need old.txt: only what precedes its first op goes
    # (the player's hand-off no-op, in a fragment of its own).
    await _put_hints(env, backup, recorded.old)
    doomed = [f for f in frags if f.end <= _first_offset(recorded.old)]
    await _prune(env, f"{LOG}: pruned {len(doomed)} fragment(s)")
    gone = {pb.fragment_content_name(f) for f in doomed}
    assert _stored(env.file_root) == before - gone
    frags = await _indexed(env.jc, without=gone)

    # Once no hints name old.txt, the fragments wholly before live.txt's first op go;
    # those after the last hinted segment (later.txt's, dead) stay: playback reads on.
    await _put_hints(env, backup, recorded.live)
    doomed = [f for f in frags if f.end <= _first_offset(recorded.live)]
    assert doomed and len(doomed) < len(frags)
    # The last fragment holds only later.txt's ops: dead, but after the last hinted
    # segment, where playback reads on: kept.
    assert frags[-1].begin > _first_offset(recorded.live) and frags[-1] not in doomed
    await _prune(env, f"{LOG}: would prune {len(doomed)} fragment(s)", "--dry-run")
    assert _stored(env.file_root) == before - gone
    result = await env.gaz("shards", "prune", "-l", f"id={REC}", ok=False)
    assert "give --file-root" in result.output
    await _prune(env, f"{LOG}: pruned {len(doomed)} fragment(s)")
    gone |= {pb.fragment_content_name(f) for f in doomed}
    assert _stored(env.file_root) == before - gone
    assert {pb.fragment_content_name(f) for f in frags if f.mod_time} - gone <= _stored(
        env.file_root
    )

    # And the shard still recovers, from its primary hints.
    out = (await env.gaz("shards", "recover", "--id", REC, "-d", str(tmp_path / "b"))).output
    assert "(hints: primary): 1 file(s)" in out
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["live.txt"]
    assert (tmp_path / "b" / "live.txt").read_bytes() == LIVE
    print(f"recover and prune: {time.monotonic() - started:.1f}s")


# --- prune's rule, without servers ----------------------------------------------------------


def _seg(log: str, first: int, last: int, seq: int = 1) -> rl.Segment:
    return rl.Segment(
        log=log,
        author=1,
        first_seq_no=seq,
        last_seq_no=seq + 1,
        first_offset=first,
        last_offset=last,
    )


def _frag(begin: int, end: int, mod_time: int = 1) -> pb.Fragment:
    return pb.Fragment(
        journal="a/log", begin=begin, end=end, mod_time=mod_time, backing_store="file:///"
    )


def test_prune_keeps_what_any_hints_and_what_follows_their_last_segment() -> None:
    hints = rl.FSMHints(log="a/log")
    hints.live_nodes.add(fnode=1, segments=[_seg("", 100, 200, seq=1)])
    hints.live_nodes.add(fnode=5, segments=[_seg("", 500, 600, seq=5)])
    segments: dict[str, list[rl.Segment]] = {}
    shards_recovery.fold_hints(hints, segments)
    # The last segment is open-ended: playback reads on from it to the write head.
    assert [(s.first_offset, s.last_offset) for s in segments["a/log"]] == [(100, 200), (500, 0)]

    frags = [_frag(0, 100), _frag(100, 150), _frag(150, 300), _frag(300, 500), _frag(500, 550),
             _frag(550, 9000), _frag(9000, 9100, mod_time=0)]  # fmt: skip
    plan = shards_recovery.plan_log("a/log", segments["a/log"], frags)
    assert [(f.begin, f.end) for f in plan.prune] == [(0, 100), (300, 500)]
    assert len(plan.keep) == 5 and plan.pruned_bytes == 300

    # No segments: nothing is known, nothing goes.
    assert shards_recovery.overlaps_any([], _frag(0, 10))
    # A not yet persisted fragment that no hints cover: the selector missed a shard.
    with pytest.raises(shards_api.UncoveredFragmentError, match="not persisted yet"):
        shards_recovery.plan_log("a/log", segments["a/log"], [_frag(200, 300, mod_time=0)])
