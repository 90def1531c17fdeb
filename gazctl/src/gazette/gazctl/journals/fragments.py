"""``gazctl journals fragments``, ``prune`` and ``store-health``: fragments and their stores.

``fragments`` lists what the brokers' fragment indexes hold; ``prune`` deletes
fragment files older than their journal's retention straight from the stores
(the one command that touches stores itself, as Gazette's does);
``store-health`` asks a broker to check a store. Gazette's
``cmd/gazctl/gazctlcmd/journals_fragments.go``, ``journals_prune.go`` and
``journals_store_health.go``.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import click
from google.protobuf import json_format

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.gazctl import options, output, runner

__all__ = ["fragments_cmd", "prune_cmd", "store_health_cmd"]


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


@click.command("fragments")
@options.selector_option(required=False)
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
    callback=options.duration,
    help="Sign fragment URLs valid this long (e.g. 1h).",
)
@options.broker_options
def fragments_cmd(
    broker: options.BrokerOptions,
    selector: str,
    fmt: str,
    from_unix: int,
    to_unix: int,
    url_ttl: float,
) -> None:
    """List the fragments of the selected journals (with signed URLs given --url-ttl)."""

    async def go() -> None:
        rows: list[list[str]] = []
        records: list[dict[str, Any]] = []
        async with client.JournalClient(broker.client_config()) as jc:
            for journal in await options.live_names(jc, selector):
                async for f in _fragments(jc, journal, from_unix, to_unix, url_ttl):
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

    runner.run(go())


@click.command("prune")
@options.selector_option(required=True)
@click.option("--dry-run", is_flag=True, help="Show what would be deleted, delete nothing.")
@click.option(
    "--file-root", default="", help="Root of file:// stores (the brokers' --broker.file-root)."
)
@options.broker_options
def prune_cmd(broker: options.BrokerOptions, selector: str, dry_run: bool, file_root: str) -> None:
    """Delete persisted fragments older than their journal's retention, straight from the stores."""
    from gazette.broker.fragment import stores

    async def go() -> None:
        now = time.time()
        pruned = kept = 0
        registry = stores.StoreRegistry(
            stores.StoresConfig(file_root=file_root or stores.UNCONFIGURED_FILE_ROOT)
        )
        async with client.JournalClient(broker.client_config()) as jc:
            resp = await options.list_selected(jc, selector)
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

    runner.run(go())


@click.command("store-health")
@click.argument("store_url")
@click.option(
    "--check-delete-prefix",
    default="",
    help="Also check deletes under this prefix (ending in '/').",
)
@options.broker_options
def store_health_cmd(
    broker: options.BrokerOptions, store_url: str, check_delete_prefix: str
) -> None:
    """Ask a broker to check the health of a fragment store, e.g. `file:///` or `s3://bucket/path/`."""

    async def go() -> None:
        async with client.JournalClient(broker.client_config()) as jc:
            await client.fragment_store_health(
                jc, store_url, check_delete_prefix=check_delete_prefix
            )
        click.echo(f"{store_url} is healthy")

    runner.run(go())
