"""Side by side with Gazette's own Go broker and gazctl (v0.103), on one etcd and one store.

* Go's gazctl drives our brokers: apply, list (YAML and JSON), append, read,
  fragments, edit (through a scripted editor), suspend and reset-head.
* Our gazctl drives a Go broker: the same, reset-head of a partially
  suspended journal (which must stay suspended), and store-health with a delete
  probe, which a v0.103 broker does not run (it must be reported, not taken as
  healthy).
* A mixed cluster (2 Go and 3 Python brokers under one etcd root, journals
  RF 3) takes appends through either kind and reads them back from either,
  loses a primary of each kind to SIGKILL without losing anything
  acknowledged; both kinds write the same etcd keys and values.
* Fragments one kind persisted to a shared ``file://`` store are read back
  byte for byte through the other kind.

Every test starts its own brokers under a fresh etcd root and kills them.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
import yaml
from go_gazette import (
    GoBroker,
    etcd_snapshot,
    go_gazctl,
    our_gazctl,
    put_fragment,
    store_fragments,
)

from gazette.broker import journals, testing
from gazette.broker import protocol as pb
from gazette.broker.protocol import dial
from gazette.broker.protocol import protocol_pb2_grpc as pb2_grpc
from gazette.keyspace import testing as ks_testing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SPECS = """
name: side/
replication: 1
labels:
- name: topic
  value: side
fragment:
  length: 4096
  compression_codec: GZIP
  stores:
  - file:///
  refresh_interval: 1s
  flush_interval: 1h0m0s
children:
- name: side/a
- name: side/b
"""

#: The editor both gazctls run (``$EDITOR <file>``): relabels ``topic: side`` as ``edited``.
EDITOR_SCRIPT = "#!/bin/sh\nsed -i 's/value: side$/value: edited/' \"$1\"\n"

Gazctl = Callable[..., Any]


def _until(what: str, check: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting until {what}")
        time.sleep(0.1)


def _writable(gazctl: Gazctl, broker: str, names: Iterable[str]) -> None:
    """Zero-byte appends until each journal takes one (it is assigned and synchronised)."""
    for name in names:
        _until(
            f"{name} is writable",
            lambda name=name: (
                gazctl(
                    broker, "journals", "append", "-l", f"name={name}", input=b"", ok=False
                ).returncode
                == 0
            ),
        )


def _specs_by_name(gazctl: Gazctl, broker: str) -> dict[str, dict[str, Any]]:
    """``journals list -o json`` as {name: spec}, Go's ``"suspend": null`` dropped."""
    listing = json.loads(gazctl(broker, "journals", "list", "-o", "json").stdout)
    out = {}
    for j in listing["journals"]:
        spec = {k: v for k, v in j["spec"].items() if v is not None}
        out[spec["name"]] = spec
    return out


def _topic(spec: dict[str, Any]) -> str:
    (topic,) = [label["value"] for label in spec["labels"]["labels"] if label["name"] == "topic"]
    return str(topic)


def _tree_names(node: dict[str, Any]) -> list[str]:
    """Leaf names of a ``journals list -o yaml`` hierarchy."""
    kids = node.get("children") or []
    return [node["name"]] if not kids else [n for k in kids for n in _tree_names(k)]


def _fragments_json(
    gazctl: Gazctl, broker: str, name: str, ok: bool = True
) -> list[dict[str, Any]]:
    """``journals fragments -o json``; ``ok=False``: none while the journal is unassigned."""
    proc = gazctl(broker, "journals", "fragments", "-l", f"name={name}", "-o", "json", ok=ok)
    if proc.returncode != 0:
        return []
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def _extents(frags: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What two listings taken moments apart agree on (a spool may persist in between)."""
    keys = ("journal", "begin", "end", "compression_codec")
    return [(*(f["spec"].get(k) for k in keys), json.dumps(f["spec"]["sum"])) for f in frags]


def _inject_after_head(
    gazctl: Gazctl, broker: str, file_root: pathlib.Path, name: str, head: int, content: bytes
) -> None:
    """Restore a fragment [head, head+len) into the store, and wait until the broker lists it."""
    put_fragment(file_root, name, head, content)
    end = head + len(content)
    _until(
        f"the broker indexes the fragment ending at {end}",
        lambda: any(f["spec"].get("end") == end for f in _fragments_json(gazctl, broker, name)),
    )


def _go(bins: pathlib.Path) -> Gazctl:
    """Go's gazctl with :func:`our_gazctl`'s signature."""
    return lambda broker, *args, **kw: go_gazctl(bins, broker, *args, **kw)


# -- 1. Go's gazctl against our brokers ------------------------------------------------


def test_go_gazctl_drives_our_brokers(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    go = _go(go_bins)
    editor = tmp_path / "editor.sh"
    editor.write_text(EDITOR_SCRIPT)
    editor.chmod(0o755)

    with testing.running_cluster(etcd_server.endpoint, tmp_path, brokers=2) as cluster:
        broker = cluster[0].endpoint
        go(broker, "journals", "apply", input=SPECS.encode())

        # list -o yaml: the hoisted hierarchy Go's apply reads, as ours prints it.
        tree = yaml.safe_load(go(broker, "journals", "list", "-o", "yaml").stdout)
        assert tree["name"] == "side/" and tree["replication"] == 1, tree
        assert tree["fragment"]["compression_codec"] == "GZIP", tree
        assert tree["labels"] == [{"name": "topic", "value": "side"}], tree
        assert _tree_names(tree) == ["side/a", "side/b"], tree
        assert tree == yaml.safe_load(our_gazctl(broker, "journals", "list", "-o", "yaml").stdout)
        # list -o json: protobuf JSON of the ListResponse, the same specs ours reads.
        go_specs = _specs_by_name(go, broker)
        assert sorted(go_specs) == ["side/a", "side/b"], go_specs
        assert go_specs["side/a"]["fragment"]["refresh_interval"] == "1s", go_specs
        assert go_specs == _specs_by_name(our_gazctl, broker)

        # append and read, through either gazctl.
        _writable(go, broker, ["side/a", "side/b"])
        go(broker, "journals", "append", "-l", "name=side/a", input=b"one\ntwo\n")
        our_gazctl(broker, "journals", "append", "-l", "name=side/a", input=b"three\n")
        content = b"one\ntwo\nthree\n"
        assert go(broker, "journals", "read", "-l", "name=side/a").stdout == content

        # fragments: the open spool covers every byte; both gazctls print the same JSON.
        frags = _fragments_json(go, broker, "side/a")
        assert frags, "no fragments listed"
        assert {f["spec"]["journal"] for f in frags} == {"side/a"}
        assert max(f["spec"]["end"] for f in frags) == len(content), frags
        assert _extents(frags) == _extents(_fragments_json(our_gazctl, broker, "side/a"))

        # edit: Go's gazctl runs $EDITOR on the hoisted YAML, then applies it.
        go(broker, "journals", "edit", "-l", "name=side/b", env={"EDITOR": str(editor)})
        specs = _specs_by_name(our_gazctl, broker)
        assert _topic(specs["side/b"]) == "edited", specs["side/b"]
        assert _topic(specs["side/a"]) == "side", specs["side/a"]

        # suspend: an empty journal is suspended fully.
        go(broker, "journals", "suspend", "-l", "name=side/b", "--force")
        _until(
            "side/b is fully suspended",
            lambda: (
                _specs_by_name(our_gazctl, broker)["side/b"].get("suspend", {}).get("level")
                == "FULL"
            ),
        )

        # reset-head: a fragment restored into the store beyond the write head; Go's
        # gazctl moves the head to its end, and appends continue after it.
        restored = b"restored\n"
        _inject_after_head(go, broker, cluster.file_root, "side/a", len(content), restored)
        go(broker, "journals", "reset-head", "-l", "name=side/a")
        go(broker, "journals", "append", "-l", "name=side/a", input=b"four\n")
        want = content + restored + b"four\n"
        assert go(broker, "journals", "read", "-l", "name=side/a").stdout == want
        assert our_gazctl(broker, "journals", "read", "-l", "name=side/a").stdout == want
        assert not cluster.exited_on_their_own(), cluster.logs()


# -- 2. Our gazctl against a Go broker -------------------------------------------------


def test_our_gazctl_drives_a_go_broker(go_broker: GoBroker, tmp_path: pathlib.Path) -> None:
    broker = go_broker.endpoint
    editor = tmp_path / "editor.sh"
    editor.write_text(EDITOR_SCRIPT)
    editor.chmod(0o755)

    our_gazctl(broker, "journals", "apply", input=SPECS.encode())
    tree = yaml.safe_load(our_gazctl(broker, "journals", "list", "-o", "yaml").stdout)
    assert _tree_names(tree) == ["side/a", "side/b"], tree
    assert tree["labels"] == [{"name": "topic", "value": "side"}], tree
    table = our_gazctl(broker, "journals", "list", "-l", "topic=side").stdout.decode()
    assert "side/a" in table and "side/b" in table, table
    assert _specs_by_name(our_gazctl, broker) == _specs_by_name(_go(go_broker.bins), broker)

    _writable(our_gazctl, broker, ["side/a", "side/b"])
    our_gazctl(broker, "journals", "append", "-l", "name=side/a", input=b"hello, go\n")
    our_gazctl(broker, "journals", "append", "-l", "name=side/a", input=b"again\n")
    content = b"hello, go\nagain\n"
    assert our_gazctl(broker, "journals", "read", "-l", "name=side/a").stdout == content
    frags = _fragments_json(our_gazctl, broker, "side/a")
    assert max(f["spec"]["end"] for f in frags) == len(content), frags
    assert _extents(frags) == _extents(_fragments_json(_go(go_broker.bins), broker, "side/a"))

    our_gazctl(broker, "journals", "edit", "-l", "name=side/b", env={"EDITOR": str(editor)})
    specs = _specs_by_name(_go(go_broker.bins), broker)
    assert (_topic(specs["side/a"]), _topic(specs["side/b"])) == ("side", "edited"), specs

    # suspend: side/a holds content, so it is suspended partially (it keeps one replica).
    our_gazctl(broker, "journals", "suspend", "-l", "name=side/a", "--force")
    our_gazctl(broker, "journals", "suspend", "-l", "name=side/b", "--force")
    specs = _specs_by_name(our_gazctl, broker)
    assert specs["side/a"]["suspend"]["level"] == "PARTIAL", specs["side/a"]
    assert specs["side/b"]["suspend"]["level"] == "FULL", specs["side/b"]

    # reset-head of the partially suspended journal, past a restored fragment. Our
    # gazctl asks for SUSPEND_KEEP, which v0.103 does not define ("invalid Suspend
    # variant (4)"): whatever it sends instead must still reset the head, and leave
    # the journal as suspended as it was (ours keeps it so, and Gazette's newer KEEP).
    restored = b"restored\n"
    _inject_after_head(our_gazctl, broker, go_broker.file_root, "side/a", len(content), restored)
    out = our_gazctl(broker, "journals", "reset-head", "-l", "name=side/a")
    assert f"reset side/a head to {len(content) + len(restored)}".encode() in out.stdout, out
    level = _specs_by_name(our_gazctl, broker)["side/a"].get("suspend", {}).get("level")
    assert level == "PARTIAL", (
        "our `gazctl journals reset-head` resumed a partially suspended journal on a Go"
        f" v0.103 broker (suspend level now {level}): it fell back from SUSPEND_KEEP (4) to"
        " SUSPEND_RESUME; SUSPEND_NO_RESUME resets the head and keeps the suspension"
    )
    # The next ordinary append resumes the journal at the new head.
    our_gazctl(broker, "journals", "append", "-l", "name=side/a", input=b"after\n")
    want = content + restored + b"after\n"
    assert our_gazctl(broker, "journals", "read", "-l", "name=side/a").stdout == want

    # store-health: healthy; but v0.103 ignores check_delete, so a request for the
    # delete probe must not come back as "healthy".
    health = our_gazctl(broker, "journals", "store-health", "file:///")
    assert b"is healthy" in health.stdout, health
    probe = our_gazctl(
        broker, "journals", "store-health", "file:///", "--check-delete-prefix", "probe/", ok=False
    )
    assert probe.returncode != 0 and b"is healthy" not in probe.stdout, (
        "store-health --check-delete-prefix reported a Go v0.103 broker healthy, yet it"
        f" never ran the delete probe: {probe}"
    )
    assert b"delete permission is untested" in probe.stderr + probe.stdout, probe
    assert not list(go_broker.file_root.glob("probe/*")), "a v0.103 broker ran a probe?"
    # Telling the brokers apart without an extension of ours: a prefix without
    # check_delete is invalid to ours (protocol/rpc.py) and to Gazette's brokers that
    # have the probe (rpc_extensions.go), while v0.103 never reads the fields.
    assert asyncio.run(_store_health_raw(broker, check_delete_prefix="probe/")) == pb.OK


async def _store_health_raw(broker: str, **fields: Any) -> int:
    """FragmentStoreHealth of ``file:///`` with ``fields``, unvalidated: its status."""
    async with dial.channel(broker) as ch:
        req = pb.FragmentStoreHealthRequest(fragment_store="file:///", **fields)
        resp = await pb2_grpc.JournalStub(ch).FragmentStoreHealth(req, timeout=30)
        return int(resp.status)


# -- 3. A mixed cluster ----------------------------------------------------------------


def _members(listing: dict[str, Any], name: str) -> tuple[list[str], str]:
    """(member suffixes, primary suffix) of journal ``name`` in a ``list -o json``."""
    for j in listing["journals"]:
        if j["spec"]["name"] == name:
            route = j["route"]
            members = [m["suffix"] for m in route.get("members", [])]
            primary = route.get("primary", -1)
            return members, members[primary] if primary >= 0 else ""
    raise KeyError(name)


def _decode_keyspace(root: str, kvs: dict[str, bytes]) -> dict[str, Any]:
    """Decode an etcd root as our brokers do: every key must parse, every value validate."""
    decoder = journals.JournalDecoder()
    members, items, assignments = {}, {}, {}
    for key, value in kvs.items():
        rest = key.removeprefix(root)
        if rest.startswith("/members/"):
            zone, suffix = rest.removeprefix("/members/").split("#")
            members[suffix] = decoder.decode_member(zone, suffix, value).spec
        elif rest.startswith("/items/"):
            name = rest.removeprefix("/items/")
            items[name] = decoder.decode_item(name, value).spec
        elif rest.startswith("/assign/"):
            name, zone, suffix, slot = rest.removeprefix("/assign/").split("#")
            route = decoder.decode_assignment(name, zone, suffix, int(slot), value)
            assignments[(name, suffix, int(slot))] = (value, route)
        else:
            raise AssertionError(f"a key of no known shape: {key}")
    return {"members": members, "items": items, "assignments": assignments}


def test_a_mixed_cluster_replicates_and_survives_either_kind_of_primary(
    go_bins: pathlib.Path, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    """3 Python and 2 Go brokers, journals RF 3: appends through either kind read back
    through either; a primary of each kind SIGKILLed (leaving 3) loses nothing acknowledged."""
    go = _go(go_bins)
    names = ["side/a", "side/b", "side/c", "side/d"]
    specs = SPECS.replace("replication: 1", "replication: 3").replace(
        "- name: side/b", "- name: side/b\n- name: side/c\n- name: side/d"
    )
    specs = specs.replace("length: 4096", "length: 1024")  # Fragments roll, and persist.
    with testing.running_cluster(
        etcd_server.endpoint, tmp_path / "py", brokers=3, zones=("zone-a", "zone-b")
    ) as cluster:
        gos = [
            GoBroker(
                go_bins,
                etcd_server.endpoint,
                cluster.etcd_prefix,
                zone=zone,
                suffix=f"go-broker-{i}",
                file_root=cluster.file_root,
                log_path=tmp_path / f"go-{i}.log",
            )
            for i, zone in enumerate(("zone-a", "zone-b"))
        ]
        kinds = {b.suffix: ("py", b) for b in cluster.brokers}
        kinds.update({g.suffix: ("go", g) for g in gos})
        try:
            for g in gos:
                g.start()
            our_gazctl(cluster[0].endpoint, "journals", "apply", input=specs.encode())
            _writable(our_gazctl, cluster[0].endpoint, names)

            # Through each broker, by either gazctl; each append is acknowledged.
            want = dict.fromkeys(names, b"")
            endpoints = [b.endpoint for b in cluster.brokers] + [g.endpoint for g in gos]
            for i in range(40):
                name, endpoint = names[i % 4], endpoints[(i // 4) % len(endpoints)]
                line = f"{name} line {i} via {endpoint} {'x' * 200}\n".encode()
                gazctl = go if i % 2 else our_gazctl
                gazctl(endpoint, "journals", "append", "-l", f"name={name}", input=line)
                want[name] += line
            for endpoint in endpoints:
                for name in names:
                    got = go(endpoint, "journals", "read", "-l", f"name={name}").stdout
                    assert got == want[name], (endpoint, name)
                    got = our_gazctl(endpoint, "journals", "read", "-l", f"name={name}").stdout
                    assert got == want[name], (endpoint, name)

            # etcd: members, items and assignments of both kinds decode as ours do;
            # every replica of a journal, of either kind, writes the same Route bytes.
            def converged() -> bool:
                ks = _decode_keyspace(
                    cluster.etcd_prefix,
                    etcd_snapshot(etcd_server.endpoint, cluster.etcd_prefix + "/"),
                )
                by_journal: dict[str, set[bytes]] = {}
                for (name, _, _), (value, _) in ks["assignments"].items():
                    by_journal.setdefault(name, set()).add(value)
                return len(ks["assignments"]) == 3 * len(names) and all(
                    len(v) == 1 and b"" not in v for v in by_journal.values()
                )

            _until("every assignment holds its journal's route", converged)
            ks = _decode_keyspace(
                cluster.etcd_prefix, etcd_snapshot(etcd_server.endpoint, cluster.etcd_prefix + "/")
            )
            assert sorted(ks["members"]) == sorted(kinds), ks["members"]
            for suffix, spec in ks["members"].items():
                _, proc = kinds[suffix]
                assert spec.process_spec.endpoint == proc.endpoint, spec
                assert spec.journal_limit == 1024, spec
            assert sorted(ks["items"]) == names
            holders = {suffix for (_, suffix, _) in ks["assignments"]}
            assert {kinds[s][0] for s in holders} == {"py", "go"}, holders

            # The store: fragments rolled at 1 KiB were persisted by each journal's
            # primary; each decodes (by the standard library) to the journal's bytes.
            listing = json.loads(
                our_gazctl(cluster[0].endpoint, "journals", "list", "-o", "json").stdout
            )
            writers = {n: _members(listing, n)[1] for n in names}

            def persisted() -> bool:
                return all(
                    sum(f.end - f.begin for f in store_fragments(cluster.file_root, n)) >= 1024
                    for n in names
                )

            _until("primaries persisted rolled fragments", persisted)
            for name in names:
                for f in store_fragments(cluster.file_root, name):
                    assert f.codec == "GZIP", f
                    assert want[name][f.begin : f.end] == f.content, (name, f.path)

            # SIGKILL a primary of one kind, then, once routes moved, one of the other.
            killed: list[str] = []
            for kind in ("go", "py"):
                candidates = [
                    _members(listing, n)[1]
                    for n in names
                    if kinds[_members(listing, n)[1]][0] == kind
                ]
                # Spare broker-00: the survivor we check writability through.
                candidates = [c for c in candidates if c not in ("broker-00", *killed)]
                if not candidates:
                    continue
                kinds[candidates[0]][1].kill()
                killed.append(candidates[0])
                survivor = cluster[0].endpoint
                _until(
                    f"every journal is writable after {candidates[0]} was SIGKILLed",
                    lambda survivor=survivor: all(
                        our_gazctl(
                            survivor, "journals", "append", "-l", f"name={n}", input=b"", ok=False
                        ).returncode
                        == 0
                        for n in names
                    ),
                    within=60,
                )
                listing = json.loads(our_gazctl(survivor, "journals", "list", "-o", "json").stdout)
            assert killed, f"no primary could be killed: {listing}"

            alive = [p.endpoint for s, (_, p) in kinds.items() if s not in killed]
            for i in range(8):
                name, endpoint = names[i % 4], alive[i % len(alive)]
                line = f"{name} after {i}\n".encode()
                gazctl = go if i % 2 else our_gazctl
                gazctl(endpoint, "journals", "append", "-l", f"name={name}", input=line)
                want[name] += line
            for endpoint in alive:
                for name in names:
                    got = go(endpoint, "journals", "read", "-l", f"name={name}").stdout
                    assert got == want[name], (endpoint, name, killed)
                    got = our_gazctl(endpoint, "journals", "read", "-l", f"name={name}").stdout
                    assert got == want[name], (endpoint, name, killed)
            print(
                f"\nmixed cluster: fragments persisted by {writers}; SIGKILLed primaries"
                f" {killed}; read back through {alive}"
            )
        finally:
            for g in gos:
                g.kill()


# -- 4. Fragments persisted by one kind, read through the other ------------------------


@pytest.fixture
def shared_store(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    root = tmp_path / "shared-fragments"
    root.mkdir()
    yield root


def test_fragments_persisted_by_one_kind_are_read_by_the_other(
    go_bins: pathlib.Path,
    etcd_server: ks_testing.EtcdServer,
    tmp_path: pathlib.Path,
    shared_store: pathlib.Path,
) -> None:
    """A Go broker and a Python broker, each alone under its own etcd root, share one
    ``file://`` root. Each writes a journal and persists it (suspend); then the other
    is given the same journal, finds the fragments in the store, serves them byte for
    byte, and (after reset-head) takes appends after them."""
    go = _go(go_bins)
    go_root = f"/gazette/go-{uuid.uuid4().hex[:8]}"
    spec_go = SPECS.replace("- name: side/b\n", "").replace("side/a", "side/by-go")
    spec_py = SPECS.replace("- name: side/b\n", "").replace("side/a", "side/by-py")
    lines = [f"line {i} {'y' * (i % 50)}\n".encode() for i in range(300)]
    content = b"".join(lines)
    try:
        with (
            GoBroker(
                go_bins,
                etcd_server.endpoint,
                go_root,
                zone="zone-go",
                suffix="go-broker-0",
                file_root=shared_store,
                log_path=tmp_path / "go.log",
            ) as gb,
            testing.running_cluster(
                etcd_server.endpoint, tmp_path / "py", brokers=1, file_root=shared_store
            ) as cluster,
        ):
            pyb = cluster[0].endpoint
            writers = [
                (go, gb.endpoint, spec_go, "side/by-go"),
                (our_gazctl, pyb, spec_py, "side/by-py"),
            ]
            for gazctl, endpoint, spec, name in writers:
                gazctl(endpoint, "journals", "apply", input=spec.encode())
                _writable(gazctl, endpoint, [name])
                for i in range(0, len(lines), 30):
                    gazctl(
                        endpoint, "journals", "append", "-l", f"name={name}",
                        input=b"".join(lines[i : i + 30]),
                    )  # fmt: skip
                # Suspending rolls the spool, and the primary persists it.
                gazctl(endpoint, "journals", "suspend", "-l", f"name={name}", "--force")
                _until(
                    f"{name} is persisted",
                    lambda name=name: (
                        b"".join(f.content for f in store_fragments(shared_store, name)) == content
                    ),
                )

            # Each kind is given the other's journal: same name, same store.
            for gazctl, endpoint, spec, name in (
                (our_gazctl, pyb, spec_go, "side/by-go"),
                (go, gb.endpoint, spec_py, "side/by-py"),
            ):
                gazctl(endpoint, "journals", "apply", input=spec.encode())
                _until(
                    f"{endpoint} indexes {name}'s fragments",
                    lambda gazctl=gazctl, endpoint=endpoint, name=name: (
                        max(
                            (
                                f["spec"]["end"]
                                for f in _fragments_json(gazctl, endpoint, name, ok=False)
                            ),
                            default=0,
                        )
                        == len(content)
                    ),
                )
                for reader in (go, our_gazctl):
                    got = reader(endpoint, "journals", "read", "-l", f"name={name}").stdout
                    assert got == content, (endpoint, name, len(got), len(content))
                # Its own write head starts at 0: reset-head moves it past the store's end.
                gazctl(endpoint, "journals", "reset-head", "-l", f"name={name}")
                gazctl(endpoint, "journals", "append", "-l", f"name={name}", input=b"next\n")
                got = go(endpoint, "journals", "read", "-l", f"name={name}").stdout
                assert got == content + b"next\n", (endpoint, name)
    finally:
        ks_testing.wipe_prefix(etcd_server.endpoint, go_root + "/")
