"""``gazctl journals read`` and ``append``: journal content to and from files.

``read`` pumps every selected journal concurrently (one task each, in one
``asyncio.TaskGroup``) to stdout, a file or a directory of per-journal files,
and can resume from and record a JSON offsets map. ``append`` writes its input
as one atomic append, or line by line spread over several journals through an
``AppendService``. Gazette's ``cmd/gazctl/gazctlcmd/journals_read.go`` and
``journals_append.go``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import sys
from collections.abc import Iterator, Sequence
from typing import IO

import click

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.gazctl import options, output, runner

__all__ = ["append_cmd", "read_cmd"]


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
) -> None:
    """Read the content of the selected journals, to stdout, a file or a directory.

    Journals are read concurrently up to their write heads (with --block, for
    ever). With --broker.cache.size > 0 reads go straight to the journals'
    brokers and persisted fragments are read from their stores (--file-root
    maps a file:// store).

    \b
    Examples:
      gazctl journals read -l name=examples/logs/one
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
    # Progress would garble content written to the same terminal.
    quiet = output == "-" and sys.stdout.isatty()

    async def go() -> dict[str, int]:
        progress = _progress("read", quiet)
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


def _progress(verb: str, quiet: bool) -> output.Progress:
    # Out here because read_cmd's ``output`` parameter (--output) hides the module.
    return output.Progress(verb, quiet=quiet)


# --- append --------------------------------------------------------------------


def _pick(journals: Sequence[str], line: bytes, mapping: str, rng: random.Random) -> str:
    if mapping == "random":
        return rng.choice(journals)
    if mapping == "modulo":
        digest = hashlib.sha1(line).digest()
        return journals[int.from_bytes(digest[:8], "big") % len(journals)]
    # rendezvous: the journal whose hash with the line is highest.
    return max(journals, key=lambda j: hashlib.sha1(j.encode() + b"\0" + line).digest())


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
    type=click.Choice(["none", "lines"]),
    default="none",
    show_default=True,
    help="none: the whole input is one atomic append. lines: each line is a record; "
    "lines are batched into atomic appends, never split.",
)
@click.option(
    "-m",
    "--mapping",
    type=click.Choice(["random", "modulo", "rendezvous"]),
    default="random",
    show_default=True,
    help="How --framing lines spreads records over several selected journals.",
)
@options.broker_options
def append_cmd(
    broker: options.BrokerOptions, selector: str, input_file: IO[bytes], framing: str, mapping: str
) -> None:
    """Append the input (stdin by default) to the selected journal(s).

    \b
    Examples:
      echo hello | gazctl journals append -l name=examples/logs/one
      gazctl journals append -l topic=logs --framing lines -i events.jsonl
    """
    quiet = False

    async def go() -> None:
        progress = _progress("appended", quiet)
        async with client.JournalClient(broker.client_config()) as jc:
            resp = await options.list_selected(jc, selector)
            journals = [j.spec.name for j in resp.journals]
            if not journals:
                raise click.ClickException(f"no journals match the selector {selector!r}")
            if framing == "none":
                if len(journals) != 1:
                    raise click.ClickException(
                        f"the selector matches {len(journals)} journals; --framing none appends "
                        "to exactly one (narrow it with -l name=..., or use --framing lines)"
                    )

                def chunks() -> Iterator[bytes]:
                    while data := input_file.read(1 << 17):
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
            rng = random.Random()
            async with client.AppendService(jc) as svc:
                n = 0
                for line in input_file:
                    if not line.endswith(b"\n"):
                        line += b"\n"
                    target = (
                        journals[0] if len(journals) == 1 else _pick(journals, line, mapping, rng)
                    )
                    svc.append(target, line)
                    n += 1
                    progress.add(len(line), 1)
                    if n % 1000 == 0:
                        await asyncio.sleep(0)  # Let batches go out while we read.
            failed = {j: e for j in journals if (e := svc.journal_error(j)) is not None}
            progress.done()
            if failed:
                j, e = next(iter(failed.items()))
                raise click.ClickException(f"append to {j} failed: {e}")
            click.echo(f"appended {n} lines to {len(journals)} journal(s)", err=True)

    runner.run(go())
