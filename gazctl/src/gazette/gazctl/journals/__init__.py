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

from typing import TYPE_CHECKING, Any

import click

from gazette.gazctl import lazy

if TYPE_CHECKING:
    from gazette.gazctl.journals.heads import reset_head

__all__ = ["group", "reset_head"]

_PKG = "gazette.gazctl.journals"


# Each command's module is imported only when that command runs (see gazette.gazctl.lazy).
@click.group(
    "journals",
    cls=lazy.Group,
    commands={
        "list": lazy.Command(f"{_PKG}.listing:list_cmd"),
        "apply": lazy.Command(f"{_PKG}.specs:apply_cmd"),
        "edit": lazy.Command(f"{_PKG}.specs:edit_cmd"),
        "read": lazy.Command(f"{_PKG}.content:read_cmd"),
        "append": lazy.Command(f"{_PKG}.content:append_cmd"),
        "fragments": lazy.Command(f"{_PKG}.fragments:fragments_cmd"),
        "prune": lazy.Command(f"{_PKG}.fragments:prune_cmd"),
        "store-health": lazy.Command(f"{_PKG}.fragments:store_health_cmd"),
        "suspend": lazy.Command(f"{_PKG}.heads:suspend_cmd"),
        "reset-head": lazy.Command(f"{_PKG}.heads:reset_head_cmd"),
    },
)
def group() -> None:
    """Interact with broker journals: list, apply, edit, read, append, fragments, ..."""


def __getattr__(name: str) -> Any:
    # `journals.reset_head` without importing the client library with the command group.
    if name == "reset_head":
        from gazette.gazctl.journals import heads

        return heads.reset_head
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
