"""The ``gazctl`` command tree: the root group and its ``journals`` and ``shards`` groups.

Why click: Gazette's flags are dotted (``--broker.address``, ``--broker.cache.size``)
and click takes such names as they are, with environment-variable defaults
(``BROKER_ADDRESS``), typed choices and generated ``--help``; typer derives
flag names from Python parameter names, which can't spell those.

The command groups are built in their own modules (:mod:`journals`, :mod:`shards`) and only
added here, so nothing imports this module but the entry points. Commands are imported
when they run (:mod:`gazette.gazctl.lazy`): ``gazctl --help`` imports neither grpc nor
the client, and ``gazctl journals append`` nothing of ``shards``.
"""

from __future__ import annotations

import click

from gazette.gazctl import journals, lazy

__all__ = ["gazctl", "main"]


# `shards` (the consumer protocol and its client) is imported only when a shards
# command runs; its one-line help is here so that `gazctl --help` needn't import it.
@click.group(
    cls=lazy.Group,
    commands={
        "shards": lazy.Command(
            "gazette.gazctl.shards:group",
            "Interact with consumer shards: list, apply, edit, recover, prune, unassign.",
        ),
        "attach-uuids": lazy.Command(
            "gazette.gazctl.attach_uuids:attach_uuids_cmd",
            "Generate and attach UUIDs to text input records.",
        ),
    },
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
def gazctl() -> None:
    """gazctl: a command-line interface for a Gazette broker cluster.

    Commands talk to the broker at --broker.address (default http://localhost:8080,
    or $BROKER_ADDRESS). Start a local cluster with `make up` (it applies
    examples/journals.yaml), then try:

    \b
      gazctl journals list -l topic=logs
      echo hello | gazctl journals append -l name=examples/logs/api
      gazctl journals read -l name=examples/logs/api
      gazctl journals fragments -l topic=logs

    `gazctl shards` commands talk to a consumer application instead (see
    examples/stream_sum), e.g. `gazctl shards list --consumer.address http://localhost:8090`.
    """


gazctl.add_command(journals.group)


def main() -> None:
    lazy.one_shot = True
    gazctl(prog_name="gazctl")
