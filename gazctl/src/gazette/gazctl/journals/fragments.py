"""``gazctl journals fragments``, ``prune`` and ``store-health``: fragments and their stores.

``fragments`` lists what the brokers' fragment indexes hold; ``prune`` deletes
fragment files older than their journal's retention straight from the stores
(the one command that touches stores itself, as Gazette's does);
``store-health`` asks a broker to check a store. ``fragments -o json`` prints
what Go's gazctl prints, byte for byte (see :func:`_go_fragment`). Gazette's
``cmd/gazctl/gazctlcmd/journals_fragments.go``, ``journals_prune.go`` and
``journals_store_health.go``.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import AsyncIterator
from typing import Any

import click
from google.protobuf import text_format

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


def _go_fragment(f: pb.FragmentsResponse._Fragment) -> dict[str, Any]:
    """A fragment as Go's ``encoding/json`` renders Gazette's ``FragmentsResponse__Fragment``.

    Go's gazctl prints ``fragments -o json`` with ``json.Encoder`` over its
    gogo-protobuf structs, not with jsonpb: so the keys are the structs' json
    tags (``signed_url``, ``compression_codec``), int64 and uint64 values are
    numbers (not jsonpb's strings), the codec is its enum number, and empty
    fields are left out (``omitempty``), except ``spec`` and ``sum``, which
    have no omitempty. Keys go in the structs' field order.
    """
    s = f.spec
    sha1 = {
        k: v
        for k, v in (("part1", s.sum.part1), ("part2", s.sum.part2), ("part3", s.sum.part3))
        if v
    }
    fields: list[tuple[str, Any]] = [
        ("journal", s.journal),
        ("begin", s.begin),
        ("end", s.end),
        ("sum", sha1),
        ("compression_codec", s.compression_codec),
        ("backing_store", s.backing_store),
        ("mod_time", s.mod_time),
        ("path_postfix", s.path_postfix),
    ]
    spec = {key: value for key, value in fields if value or key == "sum"}
    out: dict[str, Any] = {"spec": spec}
    if f.signed_url:
        out["signed_url"] = f.signed_url
    return out


def _location(f: pb.FragmentsResponse._Fragment) -> str:
    """Where a fragment can be read: its signed URL, else its URL in its store ("" if not persisted)."""
    if f.signed_url:
        return f.signed_url
    if f.spec.backing_store:
        return f.spec.backing_store + pb.fragment_path(f.spec)
    return ""


@click.command("fragments")
@options.selector_option(required=False)
@click.option(
    "-o",
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "proto"]),
    default="table",
    show_default=True,
    help="table: one row a fragment. json: one JSON object a line, as Gazette's gazctl prints "
    "them (numbers as numbers). proto: a FragmentsResponse a journal, in protobuf text format.",
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
    """List the fragments of the selected journals.

    The URL column is where each fragment can be read: its signed URL with
    --url-ttl, else its file in its fragment store (store URL and path,
    e.g. file:///examples/logs/api/<begin>-<end>-<sha1>.gz); empty for
    fragments not yet persisted.

    \b
    Examples (journals of `make up`):
      gazctl journals fragments -l topic=logs
      gazctl journals fragments -l name=examples/logs/api -o json --url-ttl 1h
    """

    async def go() -> None:
        rows: list[list[str]] = []
        async with client.JournalClient(broker.client_config()) as jc:
            for journal in await options.live_names(jc, selector):
                fragments = [f async for f in _fragments(jc, journal, from_unix, to_unix, url_ttl)]
                if fmt == "json":
                    for f in fragments:
                        click.echo(output.go_json(_go_fragment(f)))
                elif fmt == "proto":
                    resp = pb.FragmentsResponse(fragments=fragments)
                    click.echo(text_format.MessageToString(resp), nl=False)
                else:
                    rows.extend(_row(f) for f in fragments)
        if fmt == "table":
            click.echo(
                output.table(["Journal", "Offsets", "Length", "Codec", "Persisted", "URL"], rows),
                nl=False,
            )

    runner.run(go())


def _row(f: pb.FragmentsResponse._Fragment) -> list[str]:
    s = f.spec
    return [
        s.journal,
        f"{s.begin}-{s.end}",
        output.human_bytes(s.end - s.begin),
        pb.enum_text(pb.CompressionCodec, s.compression_codec),
        _mod_time(s.mod_time),
        _location(f),
    ]


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
