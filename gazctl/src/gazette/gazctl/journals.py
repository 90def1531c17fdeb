"""``gazctl journals ...``: the journal commands (broker.md §12.2)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import json
import os
import pathlib
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import IO, Any, TypeVar

import click
from google.protobuf import json_format

from gazette.broker import client, journalspace
from gazette.broker import protocol as pb
from gazette.gazctl import cli, output

__all__ = [
    "append_cmd",
    "apply_cmd",
    "edit_cmd",
    "fragments_cmd",
    "list_cmd",
    "prune_cmd",
    "read_cmd",
    "reset_head_cmd",
    "store_health_cmd",
    "suspend_cmd",
]

F = TypeVar("F", bound=Callable[..., Any])

_SELECTOR_HELP = (
    "Label selector of journals, e.g. 'topic=logs', 'name=examples/foo', "
    "'name:prefix=examples/', 'region in (us, eu), !deprecated'."
)


def _selector(text: str) -> pb.LabelSelector:
    try:
        return pb.parse_selector(text)
    except pb.ValidationError as e:
        raise click.BadParameter(str(e), param_hint="'--selector'") from None


def _selector_option(required: bool) -> Callable[[F], F]:
    return click.option("-l", "--selector", required=required, default="", help=_SELECTOR_HELP)


async def _list(jc: client.JournalClient, selector: str) -> pb.ListResponse:
    return await client.list_journals(jc, _selector(selector))


def _is_fully_suspended(spec: pb.JournalSpec) -> bool:
    return spec.HasField("suspend") and spec.suspend.level == pb.JournalSpec.Suspend.FULL


# --- list ----------------------------------------------------------------------


def _member_name(m: pb.ProcessSpec.ID) -> str:
    return f"{m.zone}/{m.suffix}"


def _table(
    resp: pb.ListResponse,
    label_columns: Sequence[str],
    primary: bool,
    replicas: bool,
    rf: bool,
    stores: bool,
) -> str:
    header = ["Name", *label_columns]
    if primary:
        header.append("Primary")
    if replicas:
        header.append("Replicas")
    if rf:
        header.append("RF")
    if stores:
        header.append("Stores")
    rows = []
    for j in resp.journals:
        name = j.spec.name + (" <S>" if j.spec.suspend.level else "")
        row = [name]
        row += [",".join(pb.values_of(j.spec.labels, c)) for c in label_columns]
        members = j.route.members
        if primary:
            row.append(_member_name(members[j.route.primary]) if j.route.primary >= 0 else "<none>")
        if replicas:
            row.append(
                ",".join(_member_name(m) for i, m in enumerate(members) if i != j.route.primary)
            )
        if rf:
            row.append(str(j.spec.replication))
        if stores:
            row.append(",".join(j.spec.fragment.stores))
        rows.append(row)
    return output.table(header, rows)


@cli.journals.command("list")
@_selector_option(required=False)
@click.option(
    "-o",
    "--format",
    "fmt",
    type=click.Choice(["table", "yaml", "json", "proto"]),
    default="table",
    show_default=True,
    help="Output format. yaml is the hierarchy `journals apply` reads.",
)
@click.option(
    "-L", "--label-columns", default="", help="Labels to show as columns, comma-separated."
)
@click.option("-p", "--primary", is_flag=True, help="Show the primary broker.")
@click.option("-r", "--replicas", is_flag=True, help="Show the replica brokers.")
@click.option("--rf", is_flag=True, help="Show the replication factor.")
@click.option("--stores", is_flag=True, help="Show the fragment stores.")
@click.option("--watch", is_flag=True, help="Print the listing again whenever it changes.")
@cli.broker_options
def list_cmd(
    broker: cli.BrokerOptions,
    selector: str,
    fmt: str,
    label_columns: str,
    primary: bool,
    replicas: bool,
    rf: bool,
    stores: bool,
    watch: bool,
) -> None:
    """List journals, optionally restricted by a label selector.

    \b
    Examples:
      gazctl journals list
      gazctl journals list -l topic=logs --primary --replicas
      gazctl journals list -l name:prefix=examples/ -o yaml > journals.yaml
    """
    columns = [c for c in label_columns.split(",") if c]

    def render(resp: pb.ListResponse) -> str:
        if fmt == "yaml":
            return journalspace.dump(journalspace.from_list_response(resp))
        if fmt == "json":
            return (
                json_format.MessageToJson(
                    resp,
                    preserving_proto_field_name=True,
                    always_print_fields_with_no_presence=True,
                )
                + "\n"
            )
        if fmt == "proto":
            from google.protobuf import text_format

            return text_format.MessageToString(resp)
        return _table(resp, columns, primary, replicas, rf, stores)

    async def go() -> None:
        async with client.JournalClient(broker.client_config()) as jc:
            if not watch:
                click.echo(render(await _list(jc, selector)), nl=False)
                return
            async for resp in client.WatchedList(jc, _selector(selector)).updates():
                click.echo(render(resp), nl=False)
                click.echo("")

    cli.run(go())


# --- apply / edit ----------------------------------------------------------------


def _apply_request(tree: journalspace.Node) -> pb.ApplyRequest:
    return pb.ApplyRequest(changes=journalspace.flatten(tree))


def _describe_changes(req: pb.ApplyRequest) -> str:
    lines = []
    for ch in req.changes:
        if ch.HasField("upsert"):
            what = "create" if ch.expect_mod_revision == 0 else "update"
            lines.append(f"  {what} {ch.upsert.name}")
        else:
            lines.append(f"  delete {ch.delete}")
    return "\n".join(lines)


@cli.journals.command("apply")
@click.option(
    "--specs",
    type=click.File("r"),
    default="-",
    show_default=True,
    help="YAML journal hierarchy to apply ('-' for stdin).",
)
@click.option("--dry-run", is_flag=True, help="Validate and show the changes, but apply nothing.")
@click.option(
    "--max-txn-size",
    type=int,
    default=0,
    show_default=True,
    help="Changes per etcd transaction (0: all in one).",
)
@cli.broker_options
def apply_cmd(broker: cli.BrokerOptions, specs: IO[str], dry_run: bool, max_txn_size: int) -> None:
    """Apply a YAML hierarchy of journal specs (as `list -o yaml` prints).

    Each journal node is created when it has no `revision`, updated when its
    revision matches the current one, and deleted when it has `delete: true`.

    \b
    Example:
      gazctl journals apply --specs examples/journals.yaml
    """
    text = specs.read()

    async def go() -> None:
        req = _apply_request(journalspace.load(text))
        if dry_run:
            click.echo(f"would apply {len(req.changes)} change(s) (--dry-run):")
            click.echo(_describe_changes(req))
            return
        async with client.JournalClient(broker.client_config()) as jc:
            resp = await client.apply_journals(jc, req, max_txn_size=max_txn_size)
        click.echo(f"applied {len(req.changes)} change(s) at revision {resp.header.etcd.revision}")

    cli.run(go())


def _edit_loop(text: str, try_apply: Any) -> bool:
    """Open ``text`` in the editor until ``try_apply(new_text)`` succeeds; False if unchanged."""
    editor = os.environ.get("GAZ_EDITOR") or os.environ.get("EDITOR") or "vi"
    original = text
    error = ""
    while True:
        with tempfile.NamedTemporaryFile(
            "w+", suffix=".yaml", prefix="gazctl-edit-", delete=False
        ) as f:
            if error:
                f.write("".join(f"# {line}\n" for line in ["ERROR:", *error.splitlines(), ""]))
            f.write(text)
            path = f.name
        try:
            rc = subprocess.call([*shlex.split(editor), path])
            if rc != 0:
                raise click.ClickException(f"editor {editor!r} exited with status {rc}")
            edited = pathlib.Path(path).read_text()
        finally:
            os.unlink(path)
        body = "".join(
            line for line in edited.splitlines(keepends=True) if not line.startswith("#")
        )
        if body.strip() == original.strip():
            return False
        try:
            try_apply(body)
            return True
        except (client.errors.ClientError, pb.ValidationError, journalspace.JournalSpaceError) as e:
            error = str(e)
            text = body
            click.echo(f"error: {error} (re-opening the editor)", err=True)


@cli.journals.command("edit")
@_selector_option(required=True)
@click.option(
    "--max-txn-size", type=int, default=0, show_default=True, help="Changes per etcd transaction."
)
@cli.broker_options
def edit_cmd(broker: cli.BrokerOptions, selector: str, max_txn_size: int) -> None:
    """Edit journal specs in $GAZ_EDITOR (or $EDITOR), then apply them.

    The selected journals open as a YAML hierarchy with their revisions, so a
    concurrent change is caught. An invalid edit re-opens the editor with the
    error at the top; saving it unchanged applies nothing.
    """

    async def listing() -> str:
        async with client.JournalClient(broker.client_config()) as jc:
            resp = await _list(jc, selector)
        if not resp.journals:
            raise click.ClickException(f"no journals match the selector {selector!r}")
        return journalspace.dump(journalspace.from_list_response(resp))

    text = cli.run(listing())

    def try_apply(body: str) -> None:
        async def go() -> None:
            req = _apply_request(journalspace.load(body))
            async with client.JournalClient(broker.client_config()) as jc:
                await client.apply_journals(jc, req, max_txn_size=max_txn_size)

        asyncio.run(go())

    if _edit_loop(text, try_apply):
        click.echo("applied")
    else:
        click.echo("no changes")


# --- read ----------------------------------------------------------------------


def _safe_file_name(journal: str) -> str:
    return journal.replace("/", "%2F") if journal.startswith(".") else journal


@cli.journals.command("read")
@_selector_option(required=True)
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
@cli.broker_options
def read_cmd(
    broker: cli.BrokerOptions,
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
            resp = await _list(jc, selector)
            journals = [j.spec.name for j in resp.journals if not _is_fully_suspended(j.spec)]
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

    finals = cli.run(go())
    if offsets_out:
        merged = {**starts, **{k: v for k, v in finals.items() if v >= 0}}
        tmp = offsets_out + ".temp"
        with open(tmp, "w") as f:
            json.dump(merged, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, offsets_out)


def _progress(verb: str, quiet: bool) -> output.Progress:
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


@cli.journals.command("append")
@_selector_option(required=True)
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
@cli.broker_options
def append_cmd(
    broker: cli.BrokerOptions, selector: str, input_file: IO[bytes], framing: str, mapping: str
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
            resp = await _list(jc, selector)
            journals = [j.spec.name for j in resp.journals]
            if not journals:
                raise click.ClickException(f"no journals match the selector {selector!r}")
            if framing == "none":
                if len(journals) != 1:
                    raise click.ClickException(
                        f"the selector matches {len(journals)} journals; --framing none appends "
                        "to exactly one (narrow it with -l name=..., or use --framing lines)"
                    )

                def chunks() -> Any:
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

    cli.run(go())


# --- fragments / prune -----------------------------------------------------------


async def _fragments(
    jc: client.JournalClient, journal: str, begin: int, end: int, url_ttl: float
) -> AsyncIterator[pb.FragmentsResponse._Fragment]:
    req = pb.FragmentsRequest(journal=journal, begin_mod_time=begin, end_mod_time=end)
    if url_ttl:
        req.signatureTTL.CopyFrom(pb.duration_from_seconds(url_ttl))
    async for f in client.list_all_fragments(jc, req):
        yield f


def _mod_time(t: int) -> str:
    if not t:
        return "(local)"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@cli.journals.command("fragments")
@_selector_option(required=False)
@click.option(
    "-o",
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "--from",
    "from_unix",
    type=int,
    default=0,
    help="Only fragments persisted at or after this Unix time.",
)
@click.option(
    "--to",
    "to_unix",
    type=int,
    default=0,
    help="Only fragments persisted at or before this Unix time.",
)
@click.option(
    "--url-ttl",
    default="0s",
    callback=cli._duration,
    help="Sign fragment URLs valid this long (e.g. 1h).",
)
@cli.broker_options
def fragments_cmd(
    broker: cli.BrokerOptions, selector: str, fmt: str, from_unix: int, to_unix: int, url_ttl: float
) -> None:
    """List the fragments of the selected journals (with signed URLs given --url-ttl)."""

    async def go() -> None:
        rows: list[list[str]] = []
        records: list[dict[str, Any]] = []
        async with client.JournalClient(broker.client_config()) as jc:
            resp = await _list(jc, selector)
            for j in resp.journals:
                if _is_fully_suspended(j.spec):
                    continue
                async for f in _fragments(jc, j.spec.name, from_unix, to_unix, url_ttl):
                    s = f.spec
                    if fmt == "json":
                        records.append(
                            json_format.MessageToDict(f, preserving_proto_field_name=True)
                        )
                        continue
                    rows.append(
                        [
                            s.journal,
                            f"{s.begin}-{s.end}",
                            output.human_bytes(s.end - s.begin),
                            pb.enum_text(pb.CompressionCodec, s.compression_codec),
                            _mod_time(s.mod_time),
                            f.signed_url or s.backing_store or "",
                        ]
                    )
        if fmt == "json":
            click.echo(json.dumps(records, indent=2))
        else:
            click.echo(
                output.table(
                    ["Journal", "Offsets", "Length", "Codec", "Persisted", "Location"], rows
                ),
                nl=False,
            )

    cli.run(go())


@cli.journals.command("prune")
@_selector_option(required=True)
@click.option("--dry-run", is_flag=True, help="Show what would be deleted, delete nothing.")
@click.option(
    "--file-root", default="", help="Root of file:// stores (the brokers' --broker.file-root)."
)
@cli.broker_options
def prune_cmd(broker: cli.BrokerOptions, selector: str, dry_run: bool, file_root: str) -> None:
    """Delete persisted fragments older than their journal's retention, straight from the stores."""
    from gazette.broker.fragment import stores

    async def go() -> None:
        now = time.time()
        pruned = kept = 0
        registry = stores.StoreRegistry(
            stores.StoresConfig(file_root=file_root or stores.UNCONFIGURED_FILE_ROOT)
        )
        async with client.JournalClient(broker.client_config()) as jc:
            resp = await _list(jc, selector)
            for j in resp.journals:
                retention = pb.duration_seconds(j.spec.fragment.retention)
                if retention <= 0:
                    continue
                async for f in _fragments(jc, j.spec.name, 0, 0, 0):
                    s = f.spec
                    if not s.mod_time or not s.backing_store or s.mod_time > now - retention:
                        kept += 1
                        continue
                    path = pb.fragment_path(s)
                    click.echo(f"{'would prune' if dry_run else 'pruning'} {s.backing_store}{path}")
                    if not dry_run:
                        await registry.get(s.backing_store).remove(path)
                    pruned += 1
        click.echo(
            f"{'would prune' if dry_run else 'pruned'} {pruned} fragment(s), kept {kept}", err=True
        )

    cli.run(go())


# --- suspend / reset-head / store-health ------------------------------------------


@cli.journals.command("suspend")
@_selector_option(required=True)
@click.option(
    "-f",
    "--force",
    is_flag=True,
    help="Suspend even journals whose fragments aren't persisted yet.",
)
@cli.broker_options
def suspend_cmd(broker: cli.BrokerOptions, selector: str, force: bool) -> None:
    """Suspend the selected journals (they release their brokers until next written)."""
    mode = pb.AppendRequest.SUSPEND_NOW if force else pb.AppendRequest.SUSPEND_IF_FLUSHED

    async def go() -> None:
        async with client.JournalClient(broker.client_config()) as jc:
            resp = await _list(jc, selector)
            for j in resp.journals:
                if _is_fully_suspended(j.spec):
                    continue
                with contextlib.suppress(client.errors.Suspended):
                    await client.append(
                        jc, pb.AppendRequest(journal=j.spec.name, suspend=mode), b""
                    )
                click.echo(f"suspended {j.spec.name}")

    cli.run(go())


@cli.journals.command("reset-head")
@_selector_option(required=True)
@cli.broker_options
def reset_head_cmd(broker: cli.BrokerOptions, selector: str) -> None:
    """Reset the write heads of the selected journals to the largest offset in their stores.

    Use after fragments were removed from, or restored into, a store by hand.
    """

    async def go() -> None:
        async with client.JournalClient(broker.client_config()) as jc:
            resp = await _list(jc, selector)
            for j in resp.journals:
                if _is_fully_suspended(j.spec):
                    continue
                reader = client.Reader(
                    jc, pb.ReadRequest(journal=j.spec.name, offset=-1, metadata_only=True)
                )
                try:
                    await reader.read()
                    head = reader.request.offset
                except client.errors.OffsetJump as jump:
                    head = jump.to_offset
                except client.errors.OffsetNotYetAvailable:
                    head = reader.response.offset
                finally:
                    await reader.close()
                req = pb.AppendRequest(
                    journal=j.spec.name, offset=head, suspend=pb.AppendRequest.SUSPEND_KEEP
                )
                # WRONG_APPEND_OFFSET: raced with an append; the head moved on, which is fine.
                with contextlib.suppress(client.errors.WrongAppendOffset):
                    await client.append(jc, req, b"")
                click.echo(f"reset {j.spec.name} head to {head}")

    cli.run(go())


@cli.journals.command("store-health")
@click.argument("store_url")
@click.option(
    "--check-delete-prefix",
    default="",
    help="Also check deletes under this prefix (ending in '/').",
)
@cli.broker_options
def store_health_cmd(broker: cli.BrokerOptions, store_url: str, check_delete_prefix: str) -> None:
    """Ask a broker to check the health of a fragment store, e.g. `file:///` or `s3://bucket/path/`."""

    async def go() -> None:
        async with client.JournalClient(broker.client_config()) as jc:
            await client.fragment_store_health(
                jc, store_url, check_delete_prefix=check_delete_prefix
            )
        click.echo(f"{store_url} is healthy")

    cli.run(go())
