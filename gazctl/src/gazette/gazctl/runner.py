"""How a command runs: its coroutine on a fresh event loop, any failure as one line.

A command builds an ``async def go()`` and hands it to :func:`run`. Expected
failures (a broker's refusal, a transport error, an invalid spec, a file that
won't open) become a :class:`click.ClickException`: one line on stderr and
exit status 1, with a hint when no broker answers. Ctrl-C exits 130.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import click
import grpc

from gazette.broker import client, journalspace
from gazette.broker import protocol as pb

__all__ = ["run"]


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a command's coroutine; report failures as one line and exit non-zero."""
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except client.errors.TransportError as e:
        hint = ""
        if e.code == grpc.StatusCode.UNAVAILABLE:
            hint = " (is a broker running there? see --broker.address / BROKER_ADDRESS)"
        raise click.ClickException(f"{_one_line(e)}{hint}") from None
    except (
        client.errors.ClientError,
        pb.ValidationError,
        journalspace.JournalSpaceError,
        OSError,
    ) as e:
        raise click.ClickException(_one_line(e)) from None
