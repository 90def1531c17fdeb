"""``gazctl shards <command>``: consumer shards, through a consumer process's ``consumer.Shard`` API.

Gazette's ``cmd/gazctl/gazctlcmd/shards_*.go``:

- ``list``: shards as a table (id, status reduced over replicas, primary,
  replicas, label columns, ``--lag``), as JSON, or as the shard YAML that
  ``apply`` takes;
- ``apply`` and ``edit`` (:mod:`~gazette.gazctl.shards_specs`): create,
  update and delete ShardSpecs from that YAML (:mod:`~gazette.gazctl.shardspace`);
- ``recover`` and ``prune`` (:mod:`~gazette.gazctl.shards_recovery`): play a
  shard's recovery log into a directory; delete recovery-log fragments no
  hints need;
- ``unassign``: remove shards' primary (or only their FAILED) assignments so
  the allocator assigns them afresh.

Commands dial ``--consumer.address`` (any process of the application: it
answers from etcd, and a Stat goes on to the shard's primary); those that
check or read journals also dial ``--broker.address``. The flags and RPC
helpers they share are in :mod:`~gazette.gazctl.shards_api`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import click
from google.protobuf import json_format

from gazette.broker import protocol as pb
from gazette.consumer import protocol as pc
from gazette.gazctl import (
    options,
    output,
    runner,
    shards_api,
    shards_recovery,
    shards_specs,
    shardspace,
)

if TYPE_CHECKING:
    from gazette.consumer import lag as lag_

__all__ = ["group"]

_CODE_NAMES = {v: k for k, v in pc.ReplicaStatus.Code.items()}


@click.group("shards")
def group() -> None:
    """Interact with consumer shards: list, apply, edit, recover, prune, unassign."""


async def _list(address: str, selector: pb.LabelSelector) -> pc.ListResponse:
    async with shards_api.ShardClient(address) as sc:
        return await sc.list_shards(selector)


def _reduced(statuses: Sequence[pc.ReplicaStatus]) -> str:
    code = max((s.code for s in statuses), default=pc.ReplicaStatus.IDLE)
    return _CODE_NAMES.get(code, str(code))


#: Shards whose lag is fetched at once.
_LAG_CONCURRENCY = 16


async def _lags(
    address: str, broker: options.BrokerOptions, shards: Sequence[pc.ListResponse.Shard]
) -> dict[str, lag_.ShardLag]:
    """Each shard's lag (:mod:`gazette.consumer.lag`): its primary's read-through offsets,
    asked through the consumer at ``address``, against its sources' write heads (read
    once per journal, however many shards read it)."""
    # Here, not at the top: listing shards without --lag needs neither.
    from gazette.broker import client
    from gazette.consumer import lag as lag_

    limit = asyncio.Semaphore(_LAG_CONCURRENCY)
    async with (
        shards_api.ShardClient(address) as sc,
        client.JournalClient(broker.client_config()) as jc,
    ):
        heads = lag_.WriteHeads(jc)

        async def one(shard: pc.ListResponse.Shard) -> lag_.ShardLag:
            async def stat() -> pc.StatResponse:
                try:
                    return await sc.stat(shard.spec.id)
                except shards_api.ShardStatusError as e:
                    raise lag_.LagUnknown(pc.Status.Name(e.status)) from e  # type: ignore[arg-type]
                except shards_api.ShardRPCError as e:
                    raise lag_.LagUnknown(e.code.name) from e

            async with limit:
                return await lag_.shard_lag(stat, lag_.source_journals(shard.spec), heads)

        try:
            done = await asyncio.gather(*(one(sh) for sh in shards))
        finally:
            await heads.close()
    return {sh.spec.id: found for sh, found in zip(shards, done, strict=True)}


def _table(
    resp: pc.ListResponse,
    label_columns: Sequence[str],
    rf: bool,
    lags: Mapping[str, lag_.ShardLag] | None = None,
) -> str:
    header = ["ID", "Status", *(["RF"] if rf else []), "Primary", "Replicas", *label_columns]
    if lags is not None:
        header.append("Lag")
    rows = []
    for shard in resp.shards:
        route, statuses = shard.route, list(shard.status)
        primary = "<none>"
        replicas = []
        for i, (m, st) in enumerate(zip(route.members, statuses, strict=False)):
            text = f"{m.suffix}:{_CODE_NAMES.get(st.code, str(st.code))}"
            if i == route.primary:
                primary = text
            else:
                replicas.append(text)
        row = [shard.spec.id, _reduced(statuses)]
        if rf:
            row.append("0" if shard.spec.disable else str(shard.spec.hot_standbys + 1))
        row += [primary, ",".join(replicas)]
        row += [",".join(pb.values_of(shard.spec.labels, c)) for c in label_columns]
        if lags is not None:
            row.append(lags[shard.spec.id].column())
        rows.append(row)
    return output.table(header, rows)


@group.command("list")
@shards_api.consumer_address
@shards_api.shard_selector_option(required=False)
@click.option(
    "-o",
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option(
    "-L", "--label-columns", default="", help="Labels to show as columns, comma separated."
)
@click.option("--rf", is_flag=True, help="Show each shard's replication factor.")
@click.option(
    "--lag",
    is_flag=True,
    help="Show the bytes each shard has yet to read of each source journal (its "
    "primary's committed read offset against the journal's write head): a Lag column, "
    "a comment per shard with -o yaml, a 'lag' member of each shard with -o json "
    "(read_through, write_head and lag per source, and their total). Asks every selected shard's primary and "
    "every source's broker: narrow it with -l on many shards.",
)
@options.broker_options
def list_cmd(
    broker: options.BrokerOptions,
    address: str,
    selector: str,
    fmt: str,
    label_columns: str,
    rf: bool,
    lag: bool,
) -> None:
    """List shards, optionally restricted by a label selector (on their labels and 'id').

    `-o yaml` prints the shard YAML that `gazctl shards apply` takes, with each
    shard's revision: edit it and apply it back.

    \b
    Examples:
      gazctl shards list --consumer.address http://localhost:8090
      gazctl shards list -l app=word-count --lag
      gazctl shards list -l id=chunks-part-000 -o json
      gazctl shards list -l app=word-count -o yaml > shards.yaml
    """
    sel = options.parse_selector(selector)

    async def go() -> None:
        resp = await _list(address, sel)
        lags = await _lags(address, broker, resp.shards) if lag else None
        if fmt == "json" and lags is not None:
            # Gazette's -o json is the ListResponse alone; with --lag each shard gains a
            # "lag" member beside its spec, route and status (outside the proto message:
            # a parser of ListResponse must ignore unknown fields to read it back).
            doc = json_format.MessageToDict(
                resp,
                preserving_proto_field_name=True,
                always_print_fields_with_no_presence=True,
            )
            for listed, out in zip(resp.shards, doc.get("shards", []), strict=True):
                out["lag"] = lags[listed.spec.id].as_json()
            click.echo(json.dumps(doc, indent=2))
        elif fmt == "json":
            click.echo(
                json_format.MessageToJson(
                    resp,
                    preserving_proto_field_name=True,
                    always_print_fields_with_no_presence=True,
                )
            )
        elif fmt == "yaml":
            space = shardspace.from_list_response(resp)
            if lags is not None:  # A comment is the field `apply` ignores.
                for sh in space.shards:
                    sh.comment = lags[sh.spec.id].comment()
            click.echo(shardspace.dump(space), nl=False)
        else:
            columns = [c for c in label_columns.split(",") if c]
            click.echo(_table(resp, columns, rf, lags), nl=False)

    runner.run(go())


@group.command("unassign")
@shards_api.consumer_address
@shards_api.shard_selector_option(required=True)
@click.option("--failed", is_flag=True, help="Only remove FAILED assignments.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed, remove nothing.")
def unassign_cmd(address: str, selector: str, failed: bool, dry_run: bool) -> None:
    """Remove the primary (or, with --failed, the FAILED) assignments of the selected shards.

    The allocator then assigns them again: a way to restart a failed shard.
    """
    sel = options.parse_selector(selector)

    async def go() -> None:
        resp = await _list(address, sel)
        ids = [s.spec.id for s in resp.shards]
        if failed:
            ids = [
                s.spec.id
                for s in resp.shards
                if any(st.code == pc.ReplicaStatus.FAILED for st in s.status)
            ]
        done: list[str] = []
        async with shards_api.ShardClient(address) as sc:
            for i in range(0, len(ids), 100):
                out = await sc.unassign(ids[i : i + 100], only_failed=failed, dry_run=dry_run)
                done += list(out.shards)
        verb = "would unassign" if dry_run else "unassigned"
        click.echo(f"{verb} {len(done)} shard(s): {', '.join(done) or '-'}")

    runner.run(go())


for _command in (
    shards_specs.apply_cmd,
    shards_specs.edit_cmd,
    shards_recovery.recover_cmd,
    shards_recovery.prune_cmd,
):
    group.add_command(_command)
