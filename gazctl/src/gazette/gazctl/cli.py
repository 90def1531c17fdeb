"""The ``gazctl`` command tree, shared broker options, and error reporting.

Why click: Gazette's flags are dotted (``--broker.address``, ``--broker.cache.size``)
and click takes such names as they are, with environment-variable defaults
(``BROKER_ADDRESS``), typed choices and generated ``--help``; typer derives
flag names from Python parameter names, which can't spell those.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click
import grpc

from gazette.broker import client, journalspace
from gazette.broker import protocol as pb

__all__ = ["BrokerOptions", "broker_options", "gazctl", "main", "run"]

F = TypeVar("F", bound=Callable[..., Any])

_LOG_LEVELS = ("trace", "debug", "info", "warn", "error", "fatal")


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerOptions:
    """The ``--broker.*`` / ``--zone`` / ``--log.level`` options of a journals command."""

    address: str
    cache_size: int
    cache_ttl: float
    auth_token: str
    zone: str
    log_level: str

    def client_config(self, **overrides: Any) -> client.ClientConfig:
        cfg = client.ClientConfig(
            address=self.address,
            zone=self.zone,
            cache_size=self.cache_size,
            cache_ttl=self.cache_ttl,
            auth_token=self.auth_token,
            # A command line should fail fast, not wait for a broker that isn't there.
            wait_for_ready=False,
        )
        return dataclasses.replace(cfg, **overrides)


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        return pb.parse_duration(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def broker_options(fn: F) -> F:
    """Add the broker connection options to a command, as a ``broker`` argument."""
    options = [
        click.option(
            "--broker.address",
            "broker_address",
            envvar="BROKER_ADDRESS",
            default=client.ClientConfig().address,
            show_default=True,
            help="Service address of a broker (env BROKER_ADDRESS).",
        ),
        click.option(
            "--broker.cache.size",
            "broker_cache_size",
            envvar="BROKER_CACHE_SIZE",
            type=int,
            default=0,
            show_default=True,
            help="Routes to cache. 0 lets brokers proxy every request; more sends requests "
            "straight to the journals' brokers (and reads persisted fragments from stores).",
        ),
        click.option(
            "--broker.cache.ttl",
            "broker_cache_ttl",
            envvar="BROKER_CACHE_TTL",
            default="1m",
            show_default=True,
            callback=_duration,
            help="How long a cached route is trusted.",
        ),
        click.option(
            "--broker.auth-token",
            "broker_auth_token",
            envvar="BROKER_AUTH_TOKEN",
            default="",
            help="Static bearer token sent with every request.",
        ),
        click.option(
            "--zone",
            envvar="ZONE",
            default="local",
            show_default=True,
            help="Our availability zone: reads prefer brokers in it.",
        ),
        click.option(
            "--log.level",
            "log_level",
            envvar="LOG_LEVEL",
            type=click.Choice(_LOG_LEVELS, case_sensitive=False),
            default="warn",
            show_default=True,
            help="Logging level.",
        ),
    ]

    @functools.wraps(fn)
    def wrapper(
        broker_address: str,
        broker_cache_size: int,
        broker_cache_ttl: float,
        broker_auth_token: str,
        zone: str,
        log_level: str,
        **kwargs: Any,
    ) -> Any:
        level = {"trace": "DEBUG", "warn": "WARNING", "fatal": "CRITICAL"}.get(
            log_level.lower(), log_level.upper()
        )
        logging.basicConfig(
            level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
        )
        broker = BrokerOptions(
            broker_address, broker_cache_size, broker_cache_ttl, broker_auth_token, zone, log_level
        )
        return fn(broker=broker, **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def gazctl() -> None:
    """gazctl: a command-line interface for a Gazette broker cluster.

    Commands talk to the broker at --broker.address (default http://localhost:8080,
    or $BROKER_ADDRESS). Start a local cluster with `make up`, then try:

    \b
      gazctl journals list -l topic=logs
      echo hello | gazctl journals append -l name=examples/logs/one
      gazctl journals read -l name=examples/logs/one
    """


@gazctl.group()
def journals() -> None:
    """Interact with broker journals: list, apply, edit, read, append, fragments, ..."""


def main() -> None:
    # Registers the journals commands on import.
    from gazette.gazctl import journals as _journals_commands

    del _journals_commands
    gazctl(prog_name="gazctl")
