"""``gazctl journals <command>``: the journal commands, as Gazette's ``gazctl`` has them.

One module per kind of work, each a few click commands over
``gazette.broker.client`` (Gazette's ``cmd/gazctl/gazctlcmd/journals_*.go``):

- :mod:`listing` — ``list``: journals and their routes, or the YAML hierarchy.
- :mod:`specs` — ``apply`` and ``edit``: change specs from a YAML hierarchy.
- :mod:`content` — ``read`` and ``append``: journal content to and from files;
  ``append`` frames records (lines, fixed frames) and maps them by key.
- :mod:`fragments` — ``fragments``, ``prune`` and ``store-health``.
- :mod:`heads` — ``suspend`` and ``reset-head`` (:func:`reset_head`, also
  called by the ``make up`` cluster).

Their shared flags (``--broker.*``, ``-l/--selector``) are in
:mod:`gazette.gazctl.options`; :mod:`gazette.gazctl.cli` adds :data:`group`
to the ``gazctl`` root.

Usage::

    from gazette.gazctl import journals

    async with client.JournalClient(cfg) as jc:
        head = await journals.reset_head(jc, "examples/logs/api")
"""

from __future__ import annotations

import click

from gazette.gazctl.journals import content, fragments, heads, listing, specs
from gazette.gazctl.journals.heads import reset_head

__all__ = ["group", "reset_head"]


@click.group("journals")
def group() -> None:
    """Interact with broker journals: list, apply, edit, read, append, fragments, ..."""


for _command in (
    listing.list_cmd,
    specs.apply_cmd,
    specs.edit_cmd,
    content.read_cmd,
    content.append_cmd,
    fragments.fragments_cmd,
    fragments.prune_cmd,
    fragments.store_health_cmd,
    heads.suspend_cmd,
    heads.reset_head_cmd,
):
    group.add_command(_command)
