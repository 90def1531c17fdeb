"""``gazctl journals suspend`` and ``reset-head``: where journals stand.

:func:`reset_head` is the one implementation of ``reset-head``; the ``make up``
cluster (``devcluster`` at the repository root) calls it too. Gazette's
``cmd/gazctl/gazctlcmd/journals_suspend.go`` and ``journals_reset_head.go``.
"""

from __future__ import annotations

import contextlib

import click

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.gazctl import options, runner

__all__ = ["reset_head", "reset_head_cmd", "suspend_cmd"]


async def reset_head(jc: client.JournalClient, journal: str) -> int:
    """Move ``journal``'s write head to the end of its fragment index; return that offset.

    Brokers refuse appends (INDEX_HAS_GREATER_OFFSET) while a store holds
    fragments beyond the offset their replicas agree on: after every broker of
    a journal was lost, after fragments were restored into a store by hand, or
    after a ``make up`` over the stores of an earlier cluster. Only run it once
    those fragments are persisted (their brokers have exited). Safe on a journal
    that is being appended to: an append racing us has moved the head on already.
    """
    head = await client.write_head(jc, journal)
    # SUSPEND_KEEP: a partially suspended journal stays so.
    request = pb.AppendRequest(journal=journal, offset=head, suspend=pb.AppendRequest.SUSPEND_KEEP)
    # WRONG_APPEND_OFFSET: raced with an append; the head moved on, which is fine.
    with contextlib.suppress(client.errors.WrongAppendOffset):
        try:
            await client.append(jc, request, b"")
        except client.errors.TransportError as e:
            if "Suspend" not in e.details:
                raise
            # Gazette brokers that predate SUSPEND_KEEP (v0.103) refuse it ("invalid
            # Suspend variant (4)"). Not SUSPEND_RESUME (what their own gazctl sends):
            # it resumes a partially suspended journal, which KEEP exists to avoid
            # (test_our_gazctl_drives_a_go_broker). SUSPEND_NO_RESUME rolls the
            # pipeline to the requested offset before it looks at the suspension,
            # so the head is reset either way; a suspended journal then answers
            # SUSPENDED, and stays as suspended as it was.
            request.suspend = pb.AppendRequest.SUSPEND_NO_RESUME
            with contextlib.suppress(client.errors.Suspended):
                await client.append(jc, request, b"")
    return head


@click.command("suspend")
@options.selector_option(required=True)
@click.option(
    "-f",
    "--force",
    is_flag=True,
    help="Suspend even journals whose fragments aren't persisted yet.",
)
@options.broker_options
def suspend_cmd(broker: options.BrokerOptions, selector: str, force: bool) -> None:
    """Suspend the selected journals (they release their brokers until next written)."""
    mode = pb.AppendRequest.SUSPEND_NOW if force else pb.AppendRequest.SUSPEND_IF_FLUSHED

    async def go() -> None:
        async with client.JournalClient(broker.client_config()) as jc:
            for journal in await options.live_names(jc, selector):
                with contextlib.suppress(client.errors.Suspended):
                    await client.append(jc, pb.AppendRequest(journal=journal, suspend=mode), b"")
                click.echo(f"suspended {journal}")

    runner.run(go())


@click.command("reset-head")
@options.selector_option(required=True)
@options.broker_options
def reset_head_cmd(broker: options.BrokerOptions, selector: str) -> None:
    """Reset the write heads of the selected journals to the largest offset in their stores.

    Use after fragments were removed from, or restored into, a store by hand,
    or after every broker of a journal was lost. Fully suspended journals are
    skipped; partially suspended ones stay suspended.
    """

    async def go() -> None:
        async with client.JournalClient(broker.client_config()) as jc:
            for journal in await options.live_names(jc, selector):
                head = await reset_head(jc, journal)
                click.echo(f"reset {journal} head to {head}")

    runner.run(go())
