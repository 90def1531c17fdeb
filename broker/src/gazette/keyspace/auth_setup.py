"""Turning etcd's authentication on for Gazette: a root user, and one user per prefix.

``python -m gazette.keyspace.auth_setup`` makes etcd refuse clients without a user:
it adds ``root`` (etcd needs it before auth can be enabled), a user that may read
and write only under the given key prefixes (a role ``<user>-role`` holds the
permissions), and enables auth. Every step is idempotent, so the command runs again
safely (on every ``helm upgrade``): a user that exists gets its password set to the
one given, a granted role or permission is granted again (etcd accepts that), and once
auth is on the command signs in as ``root`` to do the same. It waits for etcd to
answer (``--timeout``), as a Kubernetes Job started beside etcd must.

The chart runs it as a hook Job against its bundled etcd; ``gazette.keyspace.testing``
uses :func:`enable` for test servers. Passwords come from files (mounted Secrets),
never from the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import grpc

from gazette.keyspace import channel, errors, options

log = logging.getLogger(__name__)

ROOT = "root"


@dataclasses.dataclass(frozen=True)
class User:
    """An etcd user allowed to read and write under ``prefixes`` only."""

    name: str
    password: str = dataclasses.field(repr=False)
    prefixes: tuple[str, ...]


def _exists(e: grpc.aio.AioRpcError) -> bool:
    # etcd's words for a user or role that is already there (rpctypes).
    return e.code() == grpc.StatusCode.FAILED_PRECONDITION and "already exists" in (
        e.details() or ""
    )


async def enable(config: options.EtcdConfig, root_password: str, users: Sequence[User]) -> bool:
    """Make sure etcd at ``config`` has auth on with ``root`` and ``users``.

    Returns whether this call enabled it (False: it was on already). With auth already
    on, ``root_password`` must be root's, as it signs in as root.
    """
    import aetcd.rpc

    from gazette import keyspace

    probe = await keyspace.connect(dataclasses.replace(config, username=""), call_timeout=10)
    try:
        status = await aetcd.rpc.AuthStub(probe.channel).AuthStatus(
            aetcd.rpc.AuthStatusRequest(), timeout=10
        )
        already = bool(status.enabled)
    except grpc.aio.AioRpcError as e:
        # With auth on, etcd answers AuthStatus only to a signed-in user.
        if not channel.is_token_error(e):
            raise
        already = True
    finally:
        await probe.close()
    if already:
        config = dataclasses.replace(
            config, username=ROOT, password=root_password, password_file=""
        )
    else:
        config = dataclasses.replace(config, username="", password="", password_file="")
    client = await keyspace.connect(config, call_timeout=10)
    try:
        # The client's channel adds its user's token (if any) to every call.
        stub: Any = aetcd.rpc.AuthStub(client.channel)

        async def add_user(name: str, password: str) -> None:
            try:
                await stub.UserAdd(aetcd.rpc.AuthUserAddRequest(name=name, password=password))
            except grpc.aio.AioRpcError as e:
                if not _exists(e):
                    raise
                await stub.UserChangePassword(
                    aetcd.rpc.AuthUserChangePasswordRequest(name=name, password=password),
                )

        await add_user(ROOT, root_password)
        await stub.UserGrantRole(aetcd.rpc.AuthUserGrantRoleRequest(user=ROOT, role=ROOT))
        for user in users:
            role = f"{user.name}-role"
            try:
                await stub.RoleAdd(aetcd.rpc.AuthRoleAddRequest(name=role))
            except grpc.aio.AioRpcError as e:
                if not _exists(e):
                    raise
            for prefix in user.prefixes:
                await stub.RoleGrantPermission(
                    aetcd.rpc.AuthRoleGrantPermissionRequest(
                        name=role,
                        perm=aetcd.rpc.Permission(
                            permType=aetcd.rpc.Permission.READWRITE,
                            key=prefix.encode(),
                            range_end=keyspace.prefix_range_end(prefix).encode(),
                        ),
                    ),
                )
            await add_user(user.name, user.password)
            await stub.UserGrantRole(aetcd.rpc.AuthUserGrantRoleRequest(user=user.name, role=role))
        if not already:
            await stub.AuthEnable(aetcd.rpc.AuthEnableRequest())
        return not already
    finally:
        await client.close()


def _read(flag: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError as e:
        raise SystemExit(f"{flag} {path}: {e.strerror or e}") from None
    if not text:
        raise SystemExit(f"{flag} {path}: the file is empty")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gazette.keyspace.auth_setup``: see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m gazette.keyspace.auth_setup",
        description="Turn etcd authentication on: a root user, and a user that may read and "
        "write only under the given prefixes. Idempotent: run it again at will.",
    )
    parser.add_argument(
        "--etcd.address",
        dest="address",
        default=os.environ.get("ETCD_ADDRESS", options.DEFAULT_ADDRESS),
        help="etcd endpoint(s), as brokers take them (default: $ETCD_ADDRESS or %(default)s)",
    )
    parser.add_argument(
        "--root-password-file", required=True, help="File holding the password of root"
    )
    parser.add_argument("--user", required=True, help="The user Gazette's processes sign in as")
    parser.add_argument("--password-file", required=True, help="File holding --user's password")
    parser.add_argument(
        "--prefix",
        action="append",
        required=True,
        help="A key prefix --user may read and write (repeat for several)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="Seconds to wait for etcd to answer (default: %(default)s)",
    )
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        config = options.from_values({"address": ns.address})
    except errors.EtcdConfigError as e:
        raise SystemExit(f"--etcd.address: {e}") from None
    user = User(ns.user, _read("--password-file", ns.password_file), tuple(ns.prefix))
    root = _read("--root-password-file", ns.root_password_file)
    deadline = time.monotonic() + ns.timeout
    while True:
        try:
            enabled = asyncio.run(enable(config, root, [user]))
            break
        except errors.EtcdAuthError as e:
            print(f"error: --root-password-file: {e}", file=sys.stderr)
            return 1
        except (grpc.aio.AioRpcError, errors.KeySpaceError, OSError) as e:
            if time.monotonic() >= deadline:
                print(f"error: etcd at {ns.address}: {e}", file=sys.stderr)
                return 1
            log.info("etcd at %s is not answering yet (%s): retrying", ns.address, e)
            time.sleep(2)
    log.info(
        "etcd auth %s: users root and %s (read-write under %s)",
        "enabled" if enabled else "was on already; users checked",
        user.name,
        ", ".join(user.prefixes),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
