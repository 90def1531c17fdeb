"""``gazctl shards apply`` and ``edit``: change ShardSpecs from the shard YAML.

Both read and write the document of :mod:`gazette.gazctl.shardspace` (what
``shards list -o yaml`` prints), check it, check that the journals its shards
name exist with a content type they can use, and send it as Apply RPCs of
``--max-txn-size`` changes. Gazette's ``cmd/gazctl/gazctlcmd/shards_apply.go``
and ``shards_edit.go``.
"""

from __future__ import annotations

import asyncio
from typing import IO

import click

from gazette import message
from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.gazctl import options, runner, shards_api, shardspace
from gazette.gazctl.journals import specs as journal_specs

__all__ = ["apply_cmd", "edit_cmd", "verify_referenced_journals"]

_MAX_TXN_HELP = (
    "Changes per etcd transaction (0: all in one). Batches are separate transactions:"
    " a failure leaves the batches before it applied."
)


def _load(text: str) -> pc.ApplyRequest:
    """The ApplyRequest of a shard YAML document."""
    return shardspace.apply_request(shardspace.load(text))


async def verify_referenced_journals(jc: client.JournalClient, req: pc.ApplyRequest) -> None:
    """Check each upserted shard's journals, as Gazette's ``VerifyReferencedJournals``.

    Sources must exist and have a content type that a message framing reads;
    a recovery log (``<recovery_log_prefix>/<id>``) must exist and have the
    recovery-log content type. A shard failing either would fail on every
    assignment, so the apply is refused up front.
    """
    cache: dict[str, pb.JournalSpec | None] = {}

    async def lookup(name: str) -> pb.JournalSpec | None:
        if name not in cache:
            try:
                cache[name] = await client.get_journal(jc, name)
            except client.errors.JournalNotFound:
                cache[name] = None
        return cache[name]

    for change in req.changes:
        if not change.HasField("upsert"):
            continue
        spec = change.upsert
        for i, src in enumerate(spec.sources):
            field = f"sources[{i}].journal"
            journal = await lookup(src.journal)
            if journal is None:
                raise shards_api.JournalReferenceError(
                    spec.id, field, f"journal {src.journal!r} does not exist"
                )
            content_type = pb.value_of(journal.labels, pb.LABEL_CONTENT_TYPE)
            try:
                message.framing_for(content_type)
            except message.errors.UnknownContentType:
                raise shards_api.JournalReferenceError(
                    spec.id,
                    field,
                    f"journal {src.journal!r} has {pb.LABEL_CONTENT_TYPE} {content_type!r},"
                    " which no message framing reads",
                ) from None
        log = pc.recovery_log(spec)
        if not log:
            continue
        journal = await lookup(log)
        if journal is None:
            raise shards_api.JournalReferenceError(
                spec.id,
                "recovery_log_prefix",
                f"the recovery log {log!r} (recovery_log_prefix/id) does not exist",
            )
        content_type = pb.value_of(journal.labels, pb.LABEL_CONTENT_TYPE)
        if content_type != pb.CONTENT_TYPE_RECOVERYLOG:
            raise shards_api.JournalReferenceError(
                spec.id,
                "recovery_log_prefix",
                f"the recovery log {log!r} has {pb.LABEL_CONTENT_TYPE} {content_type!r},"
                f" expected {pb.CONTENT_TYPE_RECOVERYLOG!r}",
            )


def describe_changes(req: pc.ApplyRequest) -> str:
    """One line per change: ``create``, ``update``, ``upsert`` (revision -1) or ``delete``."""
    lines = []
    for ch in req.changes:
        if ch.HasField("upsert"):
            what = {0: "create", -1: "upsert"}.get(ch.expect_mod_revision, "update")
            lines.append(f"  {what} {ch.upsert.id}")
        else:
            lines.append(f"  delete {ch.delete}")
    return "\n".join(lines)


async def _apply(
    broker: options.BrokerOptions, address: str, req: pc.ApplyRequest, max_txn_size: int
) -> pc.ApplyResponse:
    async with client.JournalClient(broker.client_config()) as jc:
        await verify_referenced_journals(jc, req)
    async with shards_api.ShardClient(address) as sc:
        return await sc.apply(req, max_txn_size)


@click.command("apply")
@shards_api.consumer_address
@click.option(
    "--specs",
    type=click.File("r"),
    default="-",
    show_default=True,
    help="Shard YAML to apply ('-' for stdin).",
)
@click.option(
    "--dry-run", is_flag=True, help="Check the shards and their journals, but apply nothing."
)
@click.option("--max-txn-size", type=int, default=0, show_default=True, help=_MAX_TXN_HELP)
@options.broker_options
def apply_cmd(
    broker: options.BrokerOptions, address: str, specs: IO[str], dry_run: bool, max_txn_size: int
) -> None:
    """Create, update and delete shards from shard YAML (as `shards list -o yaml` prints).

    \b
    The document has a `common:` ShardSpec, whose values each shard takes where
    it leaves a field unset, and a `shards:` list:
      common:
        recovery_log_prefix: examples/recovery-logs
        hint_prefix: /gazette/hints
        max_txn_duration: 1s
      shards:
      - id: shard-000
        sources:
        - journal: examples/in/part-000
        revision: 1234

    A shard without a `revision` (or with 0) is created, and must not exist yet;
    one with a revision is updated only if that is still its etcd revision, so
    a concurrent change is caught and the whole apply fails. Revision -1
    applies regardless (for shards kept in version control). `delete: true`
    deletes a shard. Source journals and recovery logs must exist (checked
    through --broker.address).

    \b
    Example:
      gazctl shards apply --specs shards.yaml --consumer.address http://localhost:8090
    """
    text = specs.read()
    try:
        req = _load(text)
    except shardspace.ShardSpaceError as e:
        raise click.ClickException(f"{specs.name}: {e}") from None
    if not req.changes:
        click.echo("no shards to apply")
        return

    async def go() -> None:
        if dry_run:
            async with client.JournalClient(broker.client_config()) as jc:
                await verify_referenced_journals(jc, req)
            click.echo(f"would apply {len(req.changes)} change(s) (--dry-run):")
            click.echo(describe_changes(req))
            return
        resp = await _apply(broker, address, req, max_txn_size)
        click.echo(describe_changes(req))
        click.echo(f"applied {len(req.changes)} change(s) at revision {resp.header.etcd.revision}")

    runner.run(go())


@click.command("edit")
@shards_api.consumer_address
@shards_api.shard_selector_option(required=True)
@click.option("--max-txn-size", type=int, default=0, show_default=True, help=_MAX_TXN_HELP)
@options.broker_options
def edit_cmd(broker: options.BrokerOptions, address: str, selector: str, max_txn_size: int) -> None:
    """Edit the selected shards in $GAZ_EDITOR (or $EDITOR, or vi), then apply them.

    The shards open as shard YAML (see `gazctl shards apply --help`) with their
    revisions, so a concurrent change is caught. An edit that is invalid or
    fails to apply re-opens the editor with the error at the top. Saving the
    file unchanged or empty cancels.

    \b
    Examples:
      gazctl shards edit -l id=shard-000
      GAZ_EDITOR=nano gazctl shards edit -l "id in (shard-000, shard-001)"
    """
    sel = options.parse_selector(selector)

    async def listing() -> str:
        async with shards_api.ShardClient(address) as sc:
            resp = await sc.list_shards(sel)
        if not resp.shards:
            raise click.ClickException(f"no shards match the selector {selector!r}")
        return shardspace.dump(shardspace.from_list_response(resp))

    text = runner.run(listing())

    def try_apply(body: str) -> None:
        req = _load(body)
        asyncio.run(_apply(broker, address, req, max_txn_size))
        click.echo(describe_changes(req))

    retry_on = (*journal_specs.EDIT_ERRORS, shardspace.ShardSpaceError, shards_api.ShardsError)
    if journal_specs.edit_loop(text, try_apply, retry_on=retry_on, prefix="gazctl-shards-edit-"):
        click.echo("applied")
    else:
        click.echo("no changes")
