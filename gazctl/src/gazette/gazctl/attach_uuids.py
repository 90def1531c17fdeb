"""``gazctl attach-uuids``: give each line of text input a Gazette message UUID.

Gazette's ``cmd/gazctl/gazctlcmd/attach_uuids.go``, restated: every line of
each input (stdin without arguments) is written to stdout through
``--template`` with a version 1 UUID of one random producer per run, a clock
that follows wall time and ticks per line, and the committed flag
(``OUTSIDE_TXN``), so that readers take the records at once and consumers
de-duplicate a re-appended file exactly once.

Lines are bytes: a trailing ``\\r`` is dropped with the ``\\n`` (as Go's
``bufio.ScanLines`` does), and whatever else a line holds passes through
unchanged, valid UTF-8 or not. A line longer than ``--max-length`` stops the
command with an error, as Go's scanner does.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

import click

from gazette.broker import protocol as pb
from gazette.broker.protocol.postfix_template import GoTemplate
from gazette.message import uuids

__all__ = ["attach_uuids", "attach_uuids_cmd"]

DEFAULT_TEMPLATE = "{{.UUID}},{{.Line}}\n"
DEFAULT_MAX_LENGTH = 4 << 20
# The clock follows wall time at most this often (Go: a 100 ms ticker).
_CLOCK_UPDATE_S = 0.1


# Input is read in blocks of this many bytes (or a line's worth, if longer).
_READ_BYTES = 1 << 20


def _blocks(f: BinaryIO, max_length: int, name: str) -> Iterator[list[bytes]]:
    """Lines of ``f`` without their ``\n`` or ``\r\n``, a block's worth at a time."""
    rest = b""
    while True:
        block = f.read(max(_READ_BYTES, max_length + 2))
        if not block:
            break
        lines = (rest + block).replace(b"\r\n", b"\n").split(b"\n")
        rest = lines.pop()
        if len(rest) > max_length + 1:  # (+1: it may end in the \r of a \r\n.)
            raise _too_long(name, max_length)
        if lines:
            if max(map(len, lines)) > max_length:
                raise _too_long(name, max_length)
            yield lines
    if rest.endswith(b"\r"):  # As Go's scanner, also at the end of the input.
        rest = rest[:-1]
    if rest:
        if len(rest) > max_length:
            raise _too_long(name, max_length)
        yield [rest]


def _too_long(name: str, max_length: int) -> click.ClickException:
    return click.ClickException(f"{name}: a line is longer than --max-length ({max_length} bytes)")


def attach_uuids(
    inputs: Sequence[tuple[str, BinaryIO]],
    out: BinaryIO,
    *,
    template: str = DEFAULT_TEMPLATE,
    max_length: int = DEFAULT_MAX_LENGTH,
    skip_header: bool = False,
) -> int:
    """Write each line of ``inputs`` ((name, file) pairs) through ``template``; returns the count.

    Lines go a block at a time through comprehensions: the clock of a block's
    UUIDs rises by one tick a line, as one :meth:`Clock.tick` per line would.
    """
    tpl = GoTemplate(template, "root")
    records = _record_maker(tpl)
    producer, flags = uuids.new_producer_id(), int(uuids.Flags.OUTSIDE_TXN)
    clock = uuids.Clock.from_unix_ns(time.time_ns())
    next_update = time.monotonic() + _CLOCK_UPDATE_S
    tick = uuids.CLOCK_TICK
    count = 0
    for name, f in inputs:
        skip = skip_header
        for lines in _blocks(f, max_length, name):
            if skip:
                skip = False
                del lines[0]
            if (now := time.monotonic()) >= next_update:
                clock.update(time.time_ns())
                next_update = now + _CLOCK_UPDATE_S
            texts = uuids.uuid_texts(producer, flags, clock.value + tick, len(lines))
            clock.value = (clock.value + tick * len(lines)) & ((1 << 64) - 1)
            out.write(records(texts, lines))
            count += len(lines)
    out.flush()
    return count


def _record_maker(tpl: GoTemplate) -> Callable[[list[bytes], list[bytes]], bytes]:
    """The output of (UUID texts, lines) through ``tpl``."""
    layout = tpl.layout(frozenset(("UUID", "Line")))
    if layout is None:

        def render(texts: list[bytes], lines: list[bytes]) -> bytes:
            return b"".join(
                tpl.render(
                    {"UUID": u.decode(), "Line": line.decode("utf-8", "surrogateescape")}
                ).encode("utf-8", "surrogateescape")
                for u, line in zip(texts, lines, strict=True)
            )

        return render
    # The usual template: a bytes %-format of its fields (C does the work).
    fmt = b"".join(
        p.encode().replace(b"%", b"%%") if i % 2 == 0 else b"%s" for i, p in enumerate(layout)
    )
    fields = layout[1::2]
    if fields == ("UUID", "Line"):
        return lambda texts, lines: b"".join([fmt % r for r in zip(texts, lines, strict=True)])
    if fields == ("Line", "UUID"):
        return lambda texts, lines: b"".join([fmt % r for r in zip(lines, texts, strict=True)])
    return lambda texts, lines: b"".join(
        [
            fmt % tuple(u if f == "UUID" else line for f in fields)
            for u, line in zip(texts, lines, strict=True)
        ]
    )


def _check_template(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        tpl = GoTemplate(value, "root")
        tpl.render({"UUID": str(uuids.ZERO_UUID), "Line": ""})
    except pb.ValidationError as e:
        raise click.BadParameter(str(e), ctx, param) from None
    return value


@click.command(
    "attach-uuids",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--template",
    default=DEFAULT_TEMPLATE,
    show_default=repr(DEFAULT_TEMPLATE),
    callback=_check_template,
    help="Go text/template of each output record: {{.UUID}} and {{.Line}}, literal text.",
)
@click.option(
    "--max-length",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_LENGTH,
    show_default=True,
    help="Maximum byte-length of an input line.",
)
@click.option("--skip-header", is_flag=True, help="Omit the first line of each input file.")
@click.argument("paths", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
def attach_uuids_cmd(
    template: str, max_length: int, skip_header: bool, paths: tuple[str, ...]
) -> None:
    """Generate and attach UUIDs to text input records.

    For each line of each input file (stdin without any), generate a version 1
    UUID that Gazette authored (one random producer ID per run, a monotonic
    clock, flagged as committed) and write it with the line through --template
    to stdout. Exactly-once consumers need such UUIDs; append the output to a
    journal, e.g. with `gazctl journals append`.

    Attach UUIDs into a file first, then append that file: if either step fails
    and is run again, the records keep their UUIDs and are processed once.
    Avoid many small runs: each run is a new producer, and consumers keep a
    little state per producer.

    \b
    Prefix CSV rows with a UUID (the default template):
      gazctl attach-uuids one.csv two.csv
    Skip each file's header row:
      gazctl attach-uuids --skip-header one.csv two.csv
    Postfix instead:
      gazctl attach-uuids in.csv --template=$'{{.Line}},{{.UUID}}\\n'
    Wrap JSON records:
      gazctl attach-uuids in.json --template=$'{"uuid": "{{.UUID}}","record":{{.Line}}}\\n'
    """
    files: list[tuple[str, BinaryIO]] = []
    opened: list[BinaryIO] = []
    try:
        for path in paths or ("-",):
            if path == "-":
                files.append(("stdin", sys.stdin.buffer))
                continue
            try:
                opened.append(open(path, "rb"))  # noqa: SIM115 (closed below)
            except OSError as e:
                raise click.FileError(path, e.strerror) from e
            files.append((path, opened[-1]))
        attach_uuids(
            files,
            sys.stdout.buffer,
            template=template,
            max_length=max_length,
            skip_header=skip_header,
        )
    finally:
        for f in opened:
            f.close()
