"""``gazctl journals list``: journals as a table, YAML hierarchy, JSON or proto text.

The YAML hierarchy is built from the specs the brokers list, so it never has
the ``comment:`` fields of an applied file: specs have no place for them, in
Gazette as here (its ``journalspace.Node.Comment`` is YAML-only as well).
Gazette's ``cmd/gazctl/gazctlcmd/journals_list.go``.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
from google.protobuf import json_format

from gazette.broker import client, journalspace
from gazette.broker import protocol as pb
from gazette.gazctl import options, output, runner

__all__ = ["list_cmd"]


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


@click.command("list")
@options.selector_option(required=False)
@click.option(
    "-o",
    "--format",
    "fmt",
    type=click.Choice(["table", "yaml", "json", "proto"]),
    default="table",
    show_default=True,
    help="Output format. yaml is the hierarchy `journals apply` reads (without comments).",
)
@click.option(
    "-L", "--label-columns", default="", help="Labels to show as columns, comma-separated."
)
@click.option("-p", "--primary", is_flag=True, help="Show the primary broker.")
@click.option("-r", "--replicas", is_flag=True, help="Show the replica brokers.")
@click.option("--rf", is_flag=True, help="Show the replication factor.")
@click.option("--stores", is_flag=True, help="Show the fragment stores.")
@click.option("--watch", is_flag=True, help="Print the listing again whenever it changes.")
@options.broker_options
def list_cmd(
    broker: options.BrokerOptions,
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

    -o yaml prints the hierarchy `journals apply` reads, with each journal's
    current revision. It has no `comment:` fields: comments of an applied YAML
    file are not part of the journal specs that brokers store (JournalSpec has
    no such field, in Gazette too), so there is nothing to print them from.
    Keep the YAML file under version control to keep its comments.

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
                click.echo(render(await options.list_selected(jc, selector)), nl=False)
                return
            async for resp in client.WatchedList(jc, options.parse_selector(selector)).updates():
                click.echo(render(resp), nl=False)
                click.echo("")

    runner.run(go())
