"""A click group whose commands are imported only when one of them runs.

gazctl is a one-shot process: every module imported before the command runs
is paid for on each invocation. The command modules bring grpc, the protobuf
stubs, the client library, YAML and the consumer protocol, most of which a
given command never touches. A :class:`Group` names each command by the
module and attribute defining it, and imports that module only when the
command is chosen, so ``gazctl journals append`` loads what appending needs
and nothing of ``shards`` or ``journals apply``.

A command may also carry its one-line help, which ``--help`` of the group
shows without importing the command (``gazctl --help`` stays instant);
commands without one are imported to ask for theirs.

Usage::

    group = lazy.Group(
        "journals",
        commands={"append": lazy.Command("gazette.gazctl.journals.content:append_cmd")},
    )
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
from collections.abc import Mapping
from typing import Any

import click

__all__ = ["Command", "Group", "one_shot"]

#: True in the ``gazctl`` console script (not when tests invoke commands in their
#: own process): the process runs one command and exits, so commands skip what
#: only long-lived processes need, such as the client's Prometheus counters.
one_shot = False


@dataclasses.dataclass(frozen=True)
class Command:
    """Where a command is defined (``"package.module:attribute"``) and, optionally, its short help."""

    target: str
    short_help: str = ""

    def load(self) -> click.Command:
        module_name, _, attr = self.target.partition(":")
        if one_shot:
            # Importing a command's modules makes tens of thousands of objects that
            # live until exit: collecting them meanwhile is wasted work (about a
            # tenth of the import). Then they are frozen out of later collections.
            gc.disable()
            try:
                module = importlib.import_module(module_name)
            finally:
                gc.freeze()
                gc.enable()
        else:
            module = importlib.import_module(module_name)
        command = getattr(module, attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


class Group(click.Group):
    """A click group of :class:`Command` entries imported on first use."""

    def __init__(
        self, name: str | None = None, *, commands: Mapping[str, Command], **attrs: Any
    ) -> None:
        super().__init__(name, **attrs)
        #: The lazily imported commands by name (loaded ones move to ``commands`` too).
        self.lazy_commands: Mapping[str, Command] = dict(commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = self.lazy_commands.get(cmd_name)
        if lazy is not None and cmd_name not in self.commands:
            self.add_command(lazy.load(), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)  # As click's own.
        rows = []
        for name in names:
            lazy = self.lazy_commands.get(name)
            if lazy is not None and lazy.short_help and name not in self.commands:
                # Shortened as click shortens a command's own help.
                stand_in = click.Command(name, help=lazy.short_help)
                rows.append((name, stand_in.get_short_help_str(limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
