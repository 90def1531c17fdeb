"""``gazctl journals read`` and ``append``: journal content to and from files.

``read`` pumps every selected journal concurrently (one task each, in one
``asyncio.TaskGroup``) to stdout, a file or a directory of per-journal files,
and can resume from and record a JSON offsets map. ``append`` writes its input
as one atomic append, or as records (lines or fixed frames) mapped over the
selected journals through an ``AppendService``, each record preceded by its
partition key (or journal name) unless the mapping is random. Gazette's
``cmd/gazctl/gazctlcmd/journals_read.go`` and ``journals_append.go``.

Both show a progress line on stderr when they run longer than a second
(``--progress``, see :class:`gazette.gazctl.output.Progress`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import logging
import os
import struct
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import IO

import click

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.gazctl import options, output, runner

# gazette.message (framing, mappings) is imported where records are framed or
# mapped: a plain `append` or `read` shouldn't pay for the message layer at start-up.

__all__ = ["append_cmd", "read_cmd"]

log = logging.getLogger(__name__)

_PROGRESS_HELP = (
    "Show bytes, records and rate on stderr when the command runs longer than a second: "
    "auto (when stderr is a terminal), always, never."
)


def _progress_option(fn: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--progress",
        type=click.Choice(output.PROGRESS_MODES),
        default="auto",
        show_default=True,
        help=_PROGRESS_HELP,
    )(fn)


def _safe_file_name(journal: str) -> str:
    return journal.replace("/", "%2F") if journal.startswith(".") else journal


@click.command("read")
@options.selector_option(required=True)
@click.option(
    "-b", "--block", is_flag=True, help="At the write head, wait for new content (until Ctrl-C)."
)
@click.option("--tail", is_flag=True, help="Start at the write head rather than offset 0.")
@click.option("--offset", type=int, default=None, help="Start every journal at this byte offset.")
@click.option(
    "-o",
    "--output",
    default="-",
    show_default=True,
    help="File to write to ('-' for stdout), or a directory: one file per journal.",
)
@click.option(
    "--offsets",
    "offsets_path",
    type=click.Path(dir_okay=False),
    help="JSON journal->offset map to start from.",
)
@click.option(
    "--offsets-out",
    "offsets_out",
    type=click.Path(dir_okay=False),
    help="Where to write the final offsets as JSON.",
)
@click.option(
    "--file-root",
    default="",
    help="Directory of the brokers' file:// store, to read its fragments directly.",
)
@click.option(
    "--from",
    "from_unix",
    type=int,
    default=0,
    help="Skip fragments persisted before this Unix time.",
)
@_progress_option
@options.broker_options
def read_cmd(
    broker: options.BrokerOptions,
    selector: str,
    block: bool,
    tail: bool,
    offset: int | None,
    output: str,
    offsets_path: str | None,
    offsets_out: str | None,
    file_root: str,
    from_unix: int,
    progress: str,
) -> None:
    """Read the content of the selected journals, to stdout, a file or a directory.

    Journals are read concurrently up to their write heads (with --block, for
    ever). With --broker.cache.size > 0 reads go straight to the journals'
    brokers and persisted fragments are read from their stores (--file-root
    maps a file:// store).

    If the reader of stdout goes away (`gazctl journals read ... | head`),
    gazctl ends silently, killed by SIGPIPE as Gazette's gazctl is.

    \b
    Examples (journals of `make up`):
      gazctl journals read -l name=examples/logs/api
      gazctl journals read -l topic=logs --block --tail
      gazctl journals read -l topic=logs -o out/ --offsets-out offsets.json
    """
    starts: dict[str, int] = {}
    if offsets_path:
        with open(offsets_path) as f:
            starts = {str(k): int(v) for k, v in json.load(f).items()}
        if offsets_out == offsets_path:
            os.replace(offsets_path, offsets_path + ".previous")

    to_dir = output != "-" and (output.endswith("/") or os.path.isdir(output))
    content_on_terminal = output == "-" and sys.stdout.isatty()
    progress_mode = progress

    async def go() -> dict[str, int]:
        progress = _progress("read", progress_mode, content_on_terminal)
        cfg = broker.client_config(file_root=file_root)
        finals: dict[str, int] = {}
        async with client.JournalClient(cfg) as jc:
            journals = await options.live_names(jc, selector)
            if not journals:
                click.echo(f"warning: no journals match the selector {selector!r}", err=True)
                return finals
            sink: IO[bytes] | None = None
            files: dict[str, IO[bytes]] = {}
            if to_dir:
                os.makedirs(output, exist_ok=True)
            elif output == "-":
                sink = sys.stdout.buffer
            else:
                sink = open(output, "wb")  # noqa: ASYNC230, SIM115
            try:

                async def pump(journal: str) -> None:
                    start = starts.get(
                        journal, offset if offset is not None else (-1 if tail else 0)
                    )
                    req = pb.ReadRequest(
                        journal=journal,
                        offset=start,
                        block=block,
                        begin_mod_time=from_unix,
                        do_not_proxy=not jc.is_noop_router,
                    )
                    out = sink
                    if out is None:
                        path = os.path.join(output, _safe_file_name(journal))
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        out = files[journal] = open(path, "ab")  # noqa: ASYNC230, SIM115
                    async with client.RetryReader(jc, req) as rr:
                        try:
                            async for chunk in rr:
                                out.write(chunk)
                                if sink is not None:
                                    out.flush()
                                progress.add(len(chunk))
                        finally:
                            finals[journal] = rr.offset

                async with asyncio.TaskGroup() as tg:
                    for journal in journals:
                        tg.create_task(pump(journal))
            finally:
                progress.done()
                for f in files.values():
                    f.close()
                if sink is not None and sink is not sys.stdout.buffer:
                    sink.close()
        return finals

    finals = runner.run(go())
    if offsets_out:
        merged = {**starts, **{k: v for k, v in finals.items() if v >= 0}}
        tmp = offsets_out + ".temp"
        with open(tmp, "w") as f:
            json.dump(merged, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, offsets_out)


def _progress(verb: str, mode: str, content_on_terminal: bool = False) -> output.Progress:
    # Out here because read_cmd's ``output`` parameter (--output) hides the module.
    return output.Progress(verb, mode, content_on_terminal=content_on_terminal)


# --- append --------------------------------------------------------------------


class _InputError(Exception):
    """The append input is not what --framing / --mapping say it is."""


class _Input:
    """The append input, read by a thread so that the event loop never waits on it.

    With ``--input`` a FIFO that stays open for hours (Gazette's long-lived
    ``append`` daemon), a blocking read on the loop would hold back the appends
    of records already read. The thread is a daemon: a read still blocked when
    the command ends (Ctrl-C) must not keep the process alive.
    """

    _CHUNK = 1 << 16
    _AHEAD = 8  # Chunks read ahead of the records being appended.

    def __init__(self, f: IO[bytes]) -> None:
        self._buf = bytearray()
        self._eof = False
        # The thread hands chunks over with call_soon_threadsafe (a plain call,
        # unlike a coroutine that a closed loop would leave un-awaited) and
        # takes a slot of _room for each, so it reads at most _AHEAD ahead.
        self._chunks: asyncio.Queue[bytes | OSError] = asyncio.Queue()
        self._room = threading.Semaphore(self._AHEAD)
        loop = asyncio.get_running_loop()
        threading.Thread(
            target=self._pump, args=(f, loop), name="gazctl append input", daemon=True
        ).start()

    def _pump(self, f: IO[bytes], loop: asyncio.AbstractEventLoop) -> None:
        read: Callable[[int], bytes]
        try:
            # The file descriptor itself, not the buffered file: a read still
            # blocked when the command ends would hold the file's lock, and
            # closing stdin at interpreter exit would then abort the process
            # ("could not acquire lock ... possibly due to daemon threads").
            # Like read1, os.read returns what a pipe has now.
            fd = f.fileno()
            read = functools.partial(os.read, fd)
        except (OSError, ValueError):  # Not a real file (an in-memory one, in tests).
            read = getattr(f, "read1", f.read)
        while True:
            self._room.acquire()
            data: bytes | OSError
            try:
                data = read(self._CHUNK)
            except OSError as e:
                data = e
            try:
                loop.call_soon_threadsafe(self._chunks.put_nowait, data)
            except RuntimeError:
                return  # The loop is closed: the command is over.
            if not data or isinstance(data, OSError):
                return

    async def _fill(self) -> bool:
        """Read more input into the buffer; False at the end of the input."""
        if self._eof:
            return False
        data = await self._chunks.get()
        self._room.release()
        if isinstance(data, OSError):
            raise data
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    async def chunks(self) -> AsyncIterator[bytes]:
        """All (remaining) input, as it comes."""
        if self._buf:
            yield bytes(self._buf)
            self._buf.clear()
        while await self._fill():
            yield bytes(self._buf)
            self._buf.clear()

    async def line(self) -> bytes:
        """The next line with its newline; what is left at the end of input; b"" after it."""
        start = 0
        while (i := self._buf.find(b"\n", start)) < 0:
            start = len(self._buf)
            if not await self._fill():
                i = len(self._buf) - 1
                break
        out = bytes(self._buf[: i + 1])
        del self._buf[: i + 1]
        return out

    async def peek(self, n: int) -> bytes:
        """The next ``n`` bytes, left in the input (fewer only at its end)."""
        while len(self._buf) < n and await self._fill():
            pass
        return bytes(self._buf[:n])

    async def take(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer only at the end of input)."""
        out = await self.peek(n)
        del self._buf[: len(out)]
        return out


# Unpacking records and partition keys, as Gazette's gazctl does (its
# message.UnpackLine and message.UnpackFixedFrame). Each returns None at a clean
# end of input, between records; input ending inside one is an error.

_FIXED_LENGTH = struct.Struct("<I")


async def _unpack_line(inp: _Input) -> bytes | None:
    line = await inp.line()
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise _InputError("unexpected EOF (the input ends in a line without its newline)")
    return line


async def _unpack_fixed(inp: _Input) -> bytes | None:
    from gazette.message import fixed_framing

    header = await inp.peek(fixed_framing.HEADER_LENGTH)
    if len(header) < fixed_framing.HEADER_LENGTH:
        # Go forgives one trailing newline after the last frame.
        if header in (b"", b"\n"):
            return None
        raise _InputError("unexpected EOF (the input ends inside a fixed-frame header)")
    if not header.startswith(fixed_framing.MAGIC):
        raise _InputError(
            f"detected de-synchronization (expected the fixed-frame magic word "
            f"{fixed_framing.MAGIC.hex()}, not {header[:4].hex()})"
        )
    size = fixed_framing.HEADER_LENGTH + _FIXED_LENGTH.unpack_from(header, 4)[0]
    frame = await inp.take(size)
    if len(frame) < size:
        raise _InputError(f"unexpected EOF (the input ends inside a {size}-byte fixed frame)")
    return frame


async def _unpack_key_line(inp: _Input) -> bytes | None:
    line = await _unpack_line(inp)
    return None if line is None else line.rstrip(b"\r\n")


async def _unpack_key_line_base64(inp: _Input) -> bytes | None:
    line = await _unpack_key_line(inp)
    if line is None:
        return None
    try:
        return base64.b64decode(line, validate=True)
    except binascii.Error as e:
        raise _InputError(f"partition key {line!r} is not base64: {e}") from None


async def _unpack_key_fixed(inp: _Input) -> bytes | None:
    from gazette.message import fixed_framing

    frame = await _unpack_fixed(inp)
    return None if frame is None else frame[fixed_framing.HEADER_LENGTH :]


_Unpack = Callable[[_Input], Awaitable[bytes | None]]
_Mapping = Callable[[bytes], str]


def _mapping(name: str, listing: pb.ListResponse) -> _Mapping:
    """The journal of a record, given its partition key (ignored by ``random``)."""
    if name == "direct":
        names = {j.spec.name for j in listing.journals}

        def direct(key: bytes) -> str:
            journal = key.decode("utf-8", "replace")
            if journal not in names:
                raise _InputError(f"journal {journal!r} not found (among the selected journals)")
            return journal

        return direct

    from gazette import message

    def partitions() -> pb.ListResponse:
        return listing  # Selected once, for the whole command.

    m: Callable[[bytes], tuple[str, str]]
    if name == "modulo":
        m = message.ModuloMapping(bytes, partitions)
    elif name == "rendezvous":
        m = message.RendezvousMapping(bytes, partitions)
    else:
        m = message.RandomMapping[bytes](partitions)
    return lambda key: m(key)[0]


@click.command("append")
@options.selector_option(required=True)
@click.option(
    "-i",
    "--input",
    "input_file",
    type=click.File("rb"),
    default="-",
    show_default=True,
    help="Input file ('-' for stdin).",
)
@click.option(
    "-f",
    "--framing",
    type=click.Choice(["none", "lines", "fixed"]),
    default="none",
    show_default=True,
    help="Framing of the records of the input. none: the whole input is one atomic append. "
    "lines: each line is a record. fixed: each record is a fixed frame (magic word "
    "66 33 93 36, little-endian uint32 length, payload); the header is appended too.",
)
@click.option(
    "-m",
    "--mapping",
    type=click.Choice(["random", "modulo", "rendezvous", "direct"]),
    default="random",
    show_default=True,
    help="How records are mapped to journals. random: each to a random selected journal. "
    "modulo, rendezvous: by hashing a partition key that precedes each record, in the same "
    "framing. direct: a journal name precedes each record.",
)
@click.option(
    "--base64",
    "use_base64",
    is_flag=True,
    help="Partition keys of --framing lines are base64 (so they can be any bytes).",
)
@_progress_option
@options.broker_options
def append_cmd(
    broker: options.BrokerOptions,
    selector: str,
    input_file: IO[bytes],
    framing: str,
    mapping: str,
    use_base64: bool,
    progress: str,
) -> None:
    """Append the input (stdin by default) to the selected journal(s).

    With --framing none (the default) the whole input is one atomic append to
    the one journal the selector matches.

    With --framing lines or fixed, the input is a stream of records, each
    appended whole (atomically) to the journal --mapping picks; records of one
    journal keep their input order. Unless --mapping is random, each record is
    preceded by its partition key written in the same framing (a key line,
    then a record line), which modulo or rendezvous hashing maps to a journal;
    with --mapping direct the key is a journal name. Keys are not appended;
    newlines and frame headers of records are. --log.level debug logs each
    mapping decision.

    \b
    Examples (journals of `make up`):
      echo hello | gazctl journals append -l name=examples/logs/api
      gazctl journals append -l topic=logs --framing lines -i events.jsonl
    \b
      # Two records, mapped on their keys (base64 of "Key1" and "Key2"):
      printf 'S2V5MQ==\\n{"msg": 1}\\nS2V5Mg==\\n{"msg": 2}\\n' |
        gazctl journals append -l topic=logs -f lines -m modulo --base64
    \b
      # Records to journals named before each of them:
      printf 'examples/logs/api\\n{"msg": 1}\\nexamples/logs/web\\n{"msg": 2}\\n' |
        gazctl journals append -l topic=logs -f lines -m direct
    """
    if framing == "none" and mapping != "random":
        raise click.UsageError("--framing none appends the whole input: --mapping must be random")
    if use_base64 and (framing != "lines" or mapping == "random"):
        raise click.UsageError("--base64 needs --framing lines and a --mapping other than random")
    progress_mode = progress

    async def go() -> None:
        progress = _progress("appended", progress_mode)
        async with client.JournalClient(broker.client_config()) as jc:
            listing = await options.list_selected(jc, selector)
            journals = [j.spec.name for j in listing.journals]
            if not journals:
                raise click.ClickException(f"no journals match the selector {selector!r}")
            inp = _Input(input_file)
            if framing == "none":
                if len(journals) != 1:
                    raise click.ClickException(
                        f"the selector matches {len(journals)} journals; --framing none appends "
                        "to exactly one (narrow it with -l name=..., or use --framing lines)"
                    )

                async def chunks() -> AsyncIterator[bytes]:
                    async for data in inp.chunks():
                        progress.add(len(data))
                        yield data

                commit = await client.append(jc, journals[0], chunks())
                progress.done()
                click.echo(
                    f"appended {commit.commit.end - commit.commit.begin} bytes to {journals[0]} "
                    f"at [{commit.commit.begin}, {commit.commit.end})",
                    err=True,
                )
                return

            unpack_record: _Unpack = _unpack_line if framing == "lines" else _unpack_fixed
            unpack_key: _Unpack | None
            if mapping == "random":
                unpack_key = None  # Records only.
            elif framing == "fixed":
                unpack_key = _unpack_key_fixed
            else:
                unpack_key = _unpack_key_line_base64 if use_base64 else _unpack_key_line
            to_journal = _mapping(mapping, listing)

            failure: _InputError | None = None
            async with client.AppendService(jc) as svc:
                try:
                    await _append_records(svc, inp, unpack_key, unpack_record, to_journal, progress)
                except _InputError as e:
                    # Records read whole before the bad one are still appended
                    # (leaving the block waits for them); then the command fails.
                    failure = e
            progress.done()
            for j in journals:
                if (err := svc.journal_error(j)) is not None:
                    raise click.ClickException(f"append to {j} failed: {err}")
            if failure is not None:
                raise click.ClickException(
                    f"after {progress.records} record(s): {failure} (--framing {framing}, "
                    f"--mapping {mapping})"
                )
            what = "lines" if framing == "lines" else "frames"
            click.echo(
                f"appended {progress.records} {what} to {len(journals)} journal(s)", err=True
            )

    runner.run(go())


async def _append_records(
    svc: client.AppendService,
    inp: _Input,
    unpack_key: _Unpack | None,
    unpack_record: _Unpack,
    to_journal: _Mapping,
    progress: output.Progress,
) -> None:
    """Append each record of the input to its journal, until the input ends."""
    while True:
        key = b""
        if unpack_key is not None:
            k = await unpack_key(inp)
            if k is None:
                return
            key = k
        journal = to_journal(key)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("mapped partition key %r to journal %s", key, journal)
        record = await unpack_record(inp)
        if record is None:
            return  # As Go's gazctl: a key with no record after it is dropped.
        svc.append(journal, record)
        progress.add(len(record), 1)
        if progress.records % 1000 == 0:
            await asyncio.sleep(0)  # Let batches go out while the input is all buffered.
