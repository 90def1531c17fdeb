"""JSONFileStore: small application state as one JSON file, committed with its checkpoint.

Gazette's ``consumer/store_json_file.go``, in a local directory. ``state.json``
holds three JSON values, each on its own line:

1. the read-through offsets (Gazette's legacy form: ``{"journal": offset}``);
2. the application's state (:attr:`JSONFileStore.state`, any JSON value);
3. the Checkpoint in Go's JSON (:func:`~gazette.consumer.runtime.checkpoints.to_go_json`).

A commit writes ``next.json``, syncs it, renames it over ``state.json`` and
syncs the directory: the state and its checkpoint replace the previous pair
at once, whatever happens to the process. The whole state is written at every
commit, so keep it small.

With a recorder (the shard's spec names a recovery log), every commit is
also recorded into the log — ``next.json`` created and written, renamed over
``state.json`` — after a log barrier on the transaction's appends, and the
commit is the log append that follows: a new primary replays the log and
finds the same file. Without one, the directory is the store: it must
outlive the process (a persistent volume).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
from collections.abc import Collection
from typing import Any

from gazette.broker.client import AsyncOperation
from gazette.consumer import protocol as pc
from gazette.consumer import recoverylog as rl
from gazette.consumer.runtime import checkpoints, errors, interfaces

__all__ = ["JSONFileStore"]


class JSONFileStore:
    """A :class:`~gazette.consumer.runtime.interfaces.Store` of one JSON state in ``directory``."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        state: Any,
        recorder: rl.Recorder | None = None,
    ) -> None:
        self.directory = pathlib.Path(directory)
        self.recorder = recorder
        self.directory.mkdir(parents=True, exist_ok=True)
        #: The application's state; written whole at every commit.
        self.state: Any = state
        self._checkpoint = pc.Checkpoint()
        current = self.directory / "state.json"
        if current.exists():
            self._load(current)

    def _load(self, path: pathlib.Path) -> None:
        text = path.read_text()
        decoder = json.JSONDecoder()
        values: list[Any] = []
        pos = 0
        while pos < len(text):
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos == len(text):
                break
            try:
                value, pos = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                raise errors.ConsumerError(f"{path}: not valid JSON at {e.pos}: {e.msg}") from e
            values.append(value)
        if len(values) < 2:
            raise errors.ConsumerError(f"{path}: expected offsets, state and checkpoint")
        offsets, self.state = values[0] or {}, values[1]
        self._checkpoint = checkpoints.from_go_json(values[2] if len(values) > 2 else None)
        # Gazette's legacy offsets win over the checkpoint's.
        for journal, offset in offsets.items():
            self._checkpoint.sources[journal].read_through = int(offset)

    async def restore_checkpoint(self, shard: interfaces.Shard) -> pc.Checkpoint:
        cp = pc.Checkpoint()
        cp.CopyFrom(self._checkpoint)
        return cp

    def start_commit(
        self,
        shard: interfaces.Shard,
        checkpoint: pc.Checkpoint,
        wait_for: Collection[AsyncOperation],
    ) -> AsyncOperation:
        body = "".join(
            json.dumps(v, separators=(",", ":")) + "\n"
            for v in (
                checkpoints.flatten_read_through(checkpoint),
                self.state,
                checkpoints.to_go_json(checkpoint),
            )
        ).encode()
        cp = pc.Checkpoint()
        cp.CopyFrom(checkpoint)

        rec = self.recorder
        if rec is None:

            async def commit() -> None:
                await interfaces.await_dependencies(wait_for, str(self.directory))
                await asyncio.to_thread(self._write, body)
                self._checkpoint = cp

            return shard.run_operation("json commit", commit())

        # Recorded: the ops queue behind a barrier on the transaction's appends (the log
        # is FIFO), and the commit is the barrier after them.
        rec.barrier(list(wait_for))
        self._write(body)
        nxt, current = self.directory / "next.json", self.directory / "state.json"
        fnode = rec.record_create(nxt)
        rec.record_write_at(fnode, body, 0)
        rec.record_rename(nxt, current)
        done = rec.barrier()

        async def recorded() -> None:
            await done
            self._checkpoint = cp

        return shard.run_operation("json commit (recorded)", recorded())

    def _write(self, body: bytes) -> None:
        nxt = self.directory / "next.json"
        with os.fdopen(os.open(nxt, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600), "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(nxt, self.directory / "state.json")
        dfd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    async def destroy(self) -> None:
        """Nothing to release: the directory stays (it is the store until recovery logs)."""
