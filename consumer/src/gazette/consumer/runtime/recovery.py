"""Recovery of a shard's local store from its recovery log, and the hints that speed it up.

Gazette's ``consumer/recovery.go``. A shard whose spec names a recovery log
(``recovery_log_prefix``) keeps its store in a local directory whose every
file operation is recorded into that log. A new primary:

1. fetches hints from etcd (``<hint_prefix>/<id>.primary``, else the first
   backup, else none: the whole log is read);
2. plays the log into a fresh directory and hands it off to a new random
   author — from then on only this primary can append to the log;
3. records on from there (:class:`~gazette.consumer.recoverylog.Recorder`),
   and stores the hints it recovered with as ``.backup.0`` (older backups
   shift down).

The primary stores its current hints as ``.primary`` periodically, guarded
by its assignment, so a later recovery reads only the live part of the log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pathlib
import random
import tempfile
from typing import Any

from gazette import allocator
from gazette.allocator import txn as etcd_txn
from gazette.broker import client
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer.runtime import errors

__all__ = ["Playback", "fetch_hints", "play", "start_recording", "store_hints"]

log = logging.getLogger(__name__)

#: How often a primary stores its hints (Gazette: 5 minutes).
HINTS_INTERVAL_S = 300.0


async def fetch_hints(etcd: Any, spec: pc.ShardSpec) -> rl.FSMHints:
    """The hints to recover ``spec``'s shard with: primary, else the first backup, else none."""
    journal = pc.recovery_log(spec)
    for key in (pc.hint_primary_key(spec), *pc.hint_backup_keys(spec)):
        resp = await etcd_txn.commit(etcd, [], [etcd_txn.get(key)])
        kvs = resp.responses[0].response_range.kvs
        if not kvs or not kvs[0].value:
            continue
        hints = rl.hints_from_value(bytes(kvs[0].value))
        if hints.log != journal:
            raise errors.ConsumerError(
                f"hints at {key} are of log {hints.log!r}, not the shard's {journal!r}"
            )
        rl.FSM(hints)  # Validates them.
        return hints
    return rl.FSMHints(log=journal)


async def store_hints(
    etcd: Any, key: str, hints: rl.FSMHints, assignment: allocator.keys.KeyValue
) -> bool:
    """Write ``hints`` at ``key`` while ``assignment`` is still ours; whether it was."""
    resp = await etcd_txn.commit(
        etcd,
        [etcd_txn.create_revision_is(assignment.key, assignment.create_revision)],
        [etcd_txn.put(key, rl.hints_to_json(hints))],
    )
    return bool(resp.succeeded)


async def store_recovered_hints(
    etcd: Any, spec: pc.ShardSpec, hints: rl.FSMHints, assignment: allocator.keys.KeyValue
) -> None:
    """Shift the backups down one and store ``hints`` as ``.backup.0``."""
    keys = pc.hint_backup_keys(spec)
    if not keys:
        return
    values: list[bytes] = []
    for key in keys[:-1]:
        resp = await etcd_txn.commit(etcd, [], [etcd_txn.get(key)])
        kvs = resp.responses[0].response_range.kvs
        if not kvs:
            break
        values.append(bytes(kvs[0].value))
    ops = [etcd_txn.put(keys[0], rl.hints_to_json(hints))]
    ops += [etcd_txn.put(keys[i + 1], v) for i, v in enumerate(values)]
    await etcd_txn.commit(
        etcd,
        [etcd_txn.create_revision_is(assignment.key, assignment.create_revision)],
        ops,
    )


def new_dir(shard_id: str) -> pathlib.Path:
    """A fresh local directory for a shard's store (``<id with / as _>-<random>``)."""
    return pathlib.Path(os.path.realpath(tempfile.mkdtemp(prefix=shard_id.replace("/", "_") + "-")))


@dataclasses.dataclass
class Playback:
    """A recovery log played into ``directory`` and handed off to ``author``."""

    fsm: rl.FSM
    author: int
    directory: pathlib.Path
    hints: rl.FSMHints  # What it recovered with (to store as a backup).


async def play(
    etcd: Any,
    jc: client.JournalClient,
    spec: pc.ShardSpec,
    directory: pathlib.Path,
    *,
    tailing: asyncio.Event | None = None,
    promoted: asyncio.Event | None = None,
) -> Playback:
    """Play ``spec``'s recovery log into ``directory`` (a standby follows it until
    ``promoted``), then hand it off to a new random author."""
    hints = await fetch_hints(etcd, spec)
    author = random.randint(1, (1 << 32) - 2)
    fsm = await rl.Player(jc, hints, directory).play(
        handoff_author=author, tailing=tailing, tail_until=promoted
    )
    return Playback(fsm, author, directory, fsm.build_hints(fsm.last_log))


async def start_recording(
    etcd: Any,
    appends: client.AppendService,
    spec: pc.ShardSpec,
    playback: Playback,
    assignment: allocator.keys.KeyValue,
) -> rl.Recorder:
    """The Recorder a primary's store records into, from where the playback ended."""
    journal = pc.recovery_log(spec)
    recorder = rl.Recorder(playback.fsm, playback.author, playback.directory, appends, journal)
    await recorder.start()
    if playback.hints.log == journal:
        try:
            await store_recovered_hints(etcd, spec, playback.hints, assignment)
        except allocator.errors.EtcdError as e:
            log.warning("shard %s: storing recovered hints: %s", spec.id, e)
    log.info(
        "shard %s: recovered %s into %s (author %d)",
        spec.id,
        journal,
        playback.directory,
        playback.author,
    )
    return recorder
