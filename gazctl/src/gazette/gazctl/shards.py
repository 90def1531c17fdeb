"""``gazctl shards <command>``: consumer shards, through a consumer process's ``consumer.Shard`` API.

Gazette's ``cmd/gazctl/gazctlcmd/shards_*.go``:

- ``list``: shards as a table (id, status reduced over replicas, primary,
  replicas, label columns), as JSON, or as the shard YAML that ``apply`` takes;
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

from collections.abc import Sequence

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


def _table(resp: pc.ListResponse, label_columns: Sequence[str], rf: bool) -> str:
    header = ["ID", "Status", *(["RF"] if rf else []), "Primary", "Replicas", *label_columns]
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
def list_cmd(address: str, selector: str, fmt: str, label_columns: str, rf: bool) -> None:
    """List shards, optionally restricted by a label selector (on their labels and 'id').

    `-o yaml` prints the shard YAML that `gazctl shards apply` takes, with each
    shard's revision: edit it and apply it back.

    \b
    Examples:
      gazctl shards list --consumer.address http://localhost:8090
      gazctl shards list -l id=chunks-part-000 -o json
      gazctl shards list -l app=word-count -o yaml > shards.yaml
    """
    sel = options.parse_selector(selector)

    async def go() -> None:
        resp = await _list(address, sel)
        if fmt == "json":
            click.echo(
                json_format.MessageToJson(
                    resp,
                    preserving_proto_field_name=True,
                    always_print_fields_with_no_presence=True,
                )
            )
        elif fmt == "yaml":
            click.echo(shardspace.dump(shardspace.from_list_response(resp)), nl=False)
        else:
            columns = [c for c in label_columns.split(",") if c]
            click.echo(_table(resp, columns, rf), nl=False)

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
