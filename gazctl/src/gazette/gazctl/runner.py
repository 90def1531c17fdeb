"""How a command runs: its coroutine on a fresh event loop, any failure as one line.

A command builds an ``async def go()`` and hands it to :func:`run`. Expected
failures (a broker's refusal, a transport error, an invalid spec, a file that
won't open) become a :class:`click.ClickException`: one line on stderr and
exit status 1, with a hint when no broker answers. A failure of one of a
command's concurrent tasks (they run in an ``asyncio.TaskGroup``) is reported
the same way, unwrapped from its exception group. Ctrl-C exits 130.

When whoever reads our stdout goes away (``gazctl journals read | head``),
the process ends as Gazette's Go ``gazctl`` does: killed by SIGPIPE (status
141 in a shell), silently.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sys
from collections.abc import Coroutine
from typing import Any, NoReturn

import click
import grpc

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.client import metrics as client_metrics
from gazette.gazctl import lazy

__all__ = ["run"]


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a command's coroutine; report failures as one line and exit non-zero."""
    if lazy.one_shot:
        client_metrics.disable()  # Nobody scrapes a one-shot process: skip prometheus_client.
    try:
        return asyncio.run(_interruptible(coro))
    except BaseException as e:  # noqa: BLE001 - each kind is sorted out by _fail.
        _fail(_leaf(e))


async def _interruptible(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro``; the first Ctrl-C cancels it (KeyboardInterrupt), a second kills.

    asyncio.run's own SIGINT handler is a plain Python one: when the kernel hands the
    signal to another thread (gRPC's), nothing wakes a loop idle in epoll, and a
    blocking ``journals read`` ignored Ctrl-C until its next message (CI). A handler
    of the loop's wakes it through its self-pipe, whichever thread took the signal.
    """
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    interrupted = False

    def on_sigint() -> None:
        nonlocal interrupted
        interrupted = True
        loop.remove_signal_handler(signal.SIGINT)  # A second Ctrl-C: KeyboardInterrupt.
        if main is not None:
            main.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError, ValueError):  # No signals here: as before.
        return await coro
    try:
        return await coro
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        if not interrupted:
            loop.remove_signal_handler(signal.SIGINT)


def _leaf(e: BaseException) -> BaseException:
    """The exception that matters in (possibly nested) exception groups: the first one."""
    while isinstance(e, BaseExceptionGroup):
        e = e.exceptions[0]
    return e


def _fail(e: BaseException) -> NoReturn:
    if isinstance(e, KeyboardInterrupt):
        raise SystemExit(130) from None
    if isinstance(e, BrokenPipeError) and _stdout_closed():
        _die_of_sigpipe()
    if isinstance(e, client.errors.TransportError):
        hint = ""
        if e.code == grpc.StatusCode.UNAVAILABLE and e.address.startswith("https://"):
            # A refused TLS handshake looks like any broken connection from here.
            hint = (
                " (is a broker running there, and does it take our TLS? see --broker.address, "
                "--broker.cert-file / BROKER_CERT_FILE (brokers with --broker.server-ca-file "
                "require a client certificate it signed), --broker.trusted-ca-file / "
                "BROKER_TRUSTED_CA_FILE)"
            )
        elif e.code == grpc.StatusCode.UNAVAILABLE:
            hint = " (is a broker running there? see --broker.address / BROKER_ADDRESS)"
        raise click.ClickException(f"{_one_line(e)}{hint}") from None
    if isinstance(
        e,
        client.errors.ClientError | pb.ValidationError | pb.TLSConfigError | OSError,
    ):
        raise click.ClickException(_one_line(e)) from None
    # Only the commands that parse journal YAML import journalspace (and YAML with it).
    journalspace = sys.modules.get("gazette.broker.journalspace")
    if journalspace is not None and isinstance(e, journalspace.JournalSpaceError):
        raise click.ClickException(_one_line(e)) from None
    # click's own exceptions and exits, and bugs (with their traceback).
    raise e


def _stdout_closed() -> bool:
    """Whether nobody reads our stdout any more (a pipe's or socket's reader went away).

    A broken pipe elsewhere (``--output`` a FIFO) stays an ordinary error, as
    it is for Go, whose SIGPIPE death is only for writes to stdout and stderr.
    """
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError):  # Not a real file (tests), or no poll().
        return False
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in events)


def _die_of_sigpipe() -> NoReturn:
    # Go's runtime lets a write to a broken stdout kill the process with SIGPIPE
    # (gazctl doesn't catch that signal), which shells report as status 141 and
    # `set -o pipefail` scripts are used to. Python ignores SIGPIPE and raises
    # BrokenPipeError instead, so restore the default action and take the signal.
    # Nothing is flushed on the way out: there is no one left to read it.
    sigpipe = getattr(signal, "SIGPIPE", None)
    if sigpipe is not None:
        signal.signal(sigpipe, signal.SIG_DFL)
        os.kill(os.getpid(), sigpipe)
    raise SystemExit(141)  # Where SIGPIPE doesn't exist (or was somehow survived).
