"""``gazctl journals apply`` and ``edit``: change journal specs from a YAML hierarchy.

Both read and write the hierarchy of ``gazette.broker.journalspace`` (what
``list -o yaml`` prints) and send it as one Apply RPC, split into etcd
transactions of ``--max-txn-size`` changes. Gazette's
``cmd/gazctl/gazctlcmd/journals_apply.go`` and ``journals_edit.go``.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from typing import IO

import click

from gazette.broker import client, journalspace
from gazette.broker import protocol as pb
from gazette.gazctl import options, runner

__all__ = ["EDIT_ERRORS", "apply_cmd", "edit_cmd", "edit_loop"]


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


@click.command("apply")
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
@options.broker_options
def apply_cmd(
    broker: options.BrokerOptions, specs: IO[str], dry_run: bool, max_txn_size: int
) -> None:
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

    runner.run(go())


#: What a failed apply of an edit raises when the edit is at fault, so the editor re-opens.
EDIT_ERRORS: tuple[type[Exception], ...] = (
    client.errors.ClientError,
    pb.ValidationError,
    journalspace.JournalSpaceError,
)


def edit_loop(
    text: str,
    try_apply: Callable[[str], None],
    *,
    retry_on: tuple[type[Exception], ...] = EDIT_ERRORS,
    prefix: str = "gazctl-edit-",
) -> bool:
    """Open ``text`` in the editor until ``try_apply(edited)`` succeeds; False if cancelled.

    The editor is $GAZ_EDITOR, else $EDITOR, else vi. A ``retry_on`` error from
    ``try_apply`` re-opens the edited text with the error in comments at the
    top. Saving the text unchanged, or empty, cancels (Gazette's editor loop);
    after a failed attempt the edits are kept in their temp file, and its path
    is printed.
    """
    editor = os.environ.get("GAZ_EDITOR") or os.environ.get("EDITOR") or "vi"
    shown = text
    error = ""
    while True:
        with tempfile.NamedTemporaryFile("w+", suffix=".yaml", prefix=prefix, delete=False) as f:
            if error:
                f.write("".join(f"# {line}\n" for line in ["ERROR:", *error.splitlines(), ""]))
            f.write(shown)
            path = f.name
        keep = False
        try:
            rc = subprocess.call([*shlex.split(editor), path])
            if rc != 0:
                raise click.ClickException(f"editor {editor!r} exited with status {rc}")
            edited = pathlib.Path(path).read_text()
            body = "".join(
                line for line in edited.splitlines(keepends=True) if not line.startswith("#")
            )
            if not body.strip() or body.strip() == shown.strip():
                if error and body.strip():
                    keep = True
                    click.echo(f"cancelled: the failed edit is kept in {path}", err=True)
                return False
            try:
                try_apply(body)
                return True
            except retry_on as e:
                error = str(e)
                shown = body
                click.echo(f"error: {error} (re-opening the editor)", err=True)
        finally:
            if not keep:
                os.unlink(path)


@click.command("edit")
@options.selector_option(required=True)
@click.option(
    "--max-txn-size", type=int, default=0, show_default=True, help="Changes per etcd transaction."
)
@options.broker_options
def edit_cmd(broker: options.BrokerOptions, selector: str, max_txn_size: int) -> None:
    """Edit journal specs in $GAZ_EDITOR (or $EDITOR), then apply them.

    The selected journals open as a YAML hierarchy with their revisions, so a
    concurrent change is caught. An invalid edit re-opens the editor with the
    error at the top; saving it unchanged applies nothing.
    """

    async def listing() -> str:
        async with client.JournalClient(broker.client_config()) as jc:
            resp = await options.list_selected(jc, selector)
        if not resp.journals:
            raise click.ClickException(f"no journals match the selector {selector!r}")
        return journalspace.dump(journalspace.from_list_response(resp))

    text = runner.run(listing())

    def try_apply(body: str) -> None:
        async def go() -> None:
            req = _apply_request(journalspace.load(body))
            async with client.JournalClient(broker.client_config()) as jc:
                await client.apply_journals(jc, req, max_txn_size=max_txn_size)

        asyncio.run(go())

    if edit_loop(text, try_apply):
        click.echo("applied")
    else:
        click.echo("no changes")
