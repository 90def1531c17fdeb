"""The options every ``gazctl journals`` command shares, as click decorators.

- :func:`broker_options` adds the ``--broker.*`` / ``--zone`` / ``--log.level``
  flags, with Gazette's names and environment variables, and hands the command
  one frozen :class:`BrokerOptions`. Authorization is Gazette's:
  ``--broker.auth-keys`` signs a token per request, else ``--broker.auth-token``
  (or, ours, ``--broker.auth-token-file``) is sent with every request.
  TLS is Gazette's too: an ``https://`` address is dialed with TLS,
  presenting ``--broker.cert-file`` / ``--broker.cert-key-file`` and trusting
  ``--broker.trusted-ca-file`` (default: the root pool).
- :func:`selector_option` adds ``-l/--selector``; :func:`list_selected` lists
  the journals it selects (a bad selector is a usage error), :func:`live_names`
  those of them that are not fully suspended.
- :func:`duration` is the callback of a Go-duration flag (``1m``, ``90s``).

Usage::

    @click.command("suspend")
    @options.selector_option(required=True)
    @options.broker_options
    def suspend_cmd(broker: options.BrokerOptions, selector: str) -> None: ...
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from gazette.broker import client
from gazette.broker import protocol as pb
from gazette.broker.protocol import dial

__all__ = [
    "BrokerOptions",
    "broker_options",
    "check_tls",
    "duration",
    "list_selected",
    "live_names",
    "parse_selector",
    "read_token_file",
    "selector_option",
]

F = TypeVar("F", bound=Callable[..., Any])

_LOG_LEVELS = ("trace", "debug", "info", "warn", "error", "fatal")

_SELECTOR_HELP = (
    "Label selector of journals, e.g. 'topic=logs', 'name=examples/logs/api', "
    "'name:prefix=examples/', 'region in (us, eu), !deprecated'."
)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerOptions:
    """The ``--broker.*`` / ``--zone`` / ``--log.level`` options of a journals command."""

    address: str
    cache_size: int
    cache_ttl: float
    auth_token: str = dataclasses.field(repr=False)
    zone: str
    log_level: str
    auth_keys: str = dataclasses.field(default="", repr=False)
    cert_file: str = ""
    cert_key_file: str = ""
    trusted_ca_file: str = ""

    def client_config(self, **overrides: Any) -> client.ClientConfig:
        cfg = client.ClientConfig(
            address=self.address,
            zone=self.zone,
            cache_size=self.cache_size,
            cache_ttl=self.cache_ttl,
            auth_token=self.auth_token,
            auth_keys=self.auth_keys,
            cert_file=self.cert_file,
            cert_key_file=self.cert_key_file,
            trusted_ca_file=self.trusted_ca_file,
            # A command line should fail fast, not wait for a broker that isn't there.
            wait_for_ready=False,
        )
        return dataclasses.replace(cfg, **overrides)


def duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """Click callback: a Go duration (``1m30s``) as seconds."""
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
            callback=duration,
            help="How long a cached route is trusted.",
        ),
        click.option(
            "--broker.auth-keys",
            "broker_auth_keys",
            envvar="BROKER_AUTH_KEYS",
            default="",
            show_default=False,
            help="Whitespace or comma separated, base64-encoded keys: the first signs a "
            "token for each request, scoped to what it needs (env BROKER_AUTH_KEYS). "
            "Wins over --broker.auth-token.",
        ),
        click.option(
            "--broker.auth-token",
            "broker_auth_token",
            envvar="BROKER_AUTH_TOKEN",
            default="",
            help="Bearer token sent with every request (env BROKER_AUTH_TOKEN).",
        ),
        click.option(
            "--broker.auth-token-file",
            "broker_auth_token_file",
            envvar="BROKER_AUTH_TOKEN_FILE",
            default="",
            type=click.Path(dir_okay=False),
            help="File holding the bearer token (e.g. a mounted secret), used when "
            "--broker.auth-token is not given (env BROKER_AUTH_TOKEN_FILE).",
        ),
        click.option(
            "--broker.cert-file",
            "broker_cert_file",
            envvar="BROKER_CERT_FILE",
            default="",
            type=click.Path(dir_okay=False),
            help="PEM client certificate presented to https:// brokers (env BROKER_CERT_FILE).",
        ),
        click.option(
            "--broker.cert-key-file",
            "broker_cert_key_file",
            envvar="BROKER_CERT_KEY_FILE",
            default="",
            type=click.Path(dir_okay=False),
            help="PEM private key of --broker.cert-file (env BROKER_CERT_KEY_FILE).",
        ),
        click.option(
            "--broker.trusted-ca-file",
            "broker_trusted_ca_file",
            envvar="BROKER_TRUSTED_CA_FILE",
            default="",
            type=click.Path(dir_okay=False),
            help="PEM CA of the brokers' certificates (env BROKER_TRUSTED_CA_FILE; "
            "default: the system's root pool).",
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
        broker_auth_keys: str,
        broker_auth_token: str,
        broker_auth_token_file: str,
        broker_cert_file: str,
        broker_cert_key_file: str,
        broker_trusted_ca_file: str,
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
        if broker_auth_keys:
            try:
                dial.credentials(auth_keys=broker_auth_keys)
            except pb.AuthorizationError as e:
                raise click.BadParameter(str(e), param_hint="'--broker.auth-keys'") from None
        if not broker_auth_token and broker_auth_token_file:
            broker_auth_token = read_token_file(broker_auth_token_file)
        check_tls(broker_cert_file, broker_cert_key_file, broker_trusted_ca_file)
        broker = BrokerOptions(
            broker_address,
            broker_cache_size,
            broker_cache_ttl,
            broker_auth_token,
            zone,
            log_level,
            auth_keys=broker_auth_keys,
            cert_file=broker_cert_file,
            cert_key_file=broker_cert_key_file,
            trusted_ca_file=broker_trusted_ca_file,
        )
        return fn(broker=broker, **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


def check_tls(cert_file: str, key_file: str, ca_file: str, prefix: str = "--broker") -> dial.TLS:
    """The client's TLS files; a usage error naming the flag when they don't load.

    ``prefix`` is ``--consumer`` for ``gazctl shards``' flags (the same three).
    """
    try:
        tls = dial.TLS(cert_file, key_file, ca_file)
        tls.pem()
    except pb.TLSConfigError as e:
        hint = f"'{prefix}.cert-file'"
        if e.path and e.path == ca_file:
            hint = f"'{prefix}.trusted-ca-file'"
        elif (e.path and e.path == key_file) or (not e.path and cert_file):
            hint = f"'{prefix}.cert-key-file'"
        raise click.BadParameter(str(e), param_hint=hint) from None
    return tls


def read_token_file(path: str, flag: str = "--broker.auth-token-file") -> str:
    """The bearer token in ``path`` (surrounding whitespace dropped); a usage error if none.

    ``flag`` names the option in the error (``--consumer.auth-token-file`` too).
    """
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise click.BadParameter(
            f"reading {path}: {getattr(e, 'strerror', None) or e}",
            param_hint=f"'{flag}'",
        ) from None
    if not token or any(c.isspace() for c in token):
        raise click.BadParameter(f"{path} must hold one token", param_hint=f"'{flag}'")
    return token


def selector_option(required: bool) -> Callable[[F], F]:
    """Add ``-l/--selector`` (a label selector text) as a ``selector`` argument."""
    return click.option("-l", "--selector", required=required, default="", help=_SELECTOR_HELP)


def parse_selector(text: str) -> pb.LabelSelector:
    """The ``--selector`` text parsed; a bad one is a usage error naming the flag."""
    try:
        return pb.parse_selector(text)
    except pb.ValidationError as e:
        raise click.BadParameter(str(e), param_hint="'--selector'") from None


async def list_selected(jc: client.JournalClient, selector: str) -> pb.ListResponse:
    """The journals ``--selector`` selects, as the broker lists them."""
    return await client.list_journals(jc, parse_selector(selector))


async def live_names(jc: client.JournalClient, selector: str) -> list[str]:
    """Names of the selected journals that are not fully suspended.

    A FULL suspension leaves a journal no brokers and an empty fragment index:
    there is nothing to read, list, suspend or reset, so commands skip it.
    """
    resp = await list_selected(jc, selector)
    return [j.spec.name for j in resp.journals if not _is_fully_suspended(j.spec)]


def _is_fully_suspended(spec: pb.JournalSpec) -> bool:
    return spec.HasField("suspend") and spec.suspend.level == pb.JournalSpec.Suspend.FULL
