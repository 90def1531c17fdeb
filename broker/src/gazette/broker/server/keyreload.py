"""Authorization key rotation without a restart: a keys file, polled, and SIGHUP.

Gazette reads ``--broker.auth-keys`` once, so rotating a key means restarting
every broker. Ours (and our consumers') may instead take the keys from a file,
``--broker.auth-keys-file`` / ``--consumer.auth-keys-file``, in the same text
format (base64 keys separated by whitespace and/or commas; the first signs).
That is how a Kubernetes Secret mounted as a volume looks, and the kubelet
updates such a file by swapping a symlink (``..data``) to a new directory,
never by writing in place.

:class:`KeyReloader` keeps the process's :class:`~gazette.broker.protocol.auth.SwappableAuth`
in step with the file:

- every ``poll_interval`` seconds it stats the path (following symlinks, so a
  swapped ``..data`` shows as a new inode) and, when the stat changed, reads
  it and compares a SHA-256 of the content with that of the keys in force;
- a SIGHUP (:func:`handle_sighup`) reads it at once, whatever the stat says;
- new content that decodes is swapped in whole (the next RPC is verified, and
  the next peer call signed, with the new keys); content that doesn't decode,
  or a file that can't be read, leaves the keys in force and is logged as an
  error naming the file (once per distinct bad content, and on every SIGHUP).

Keys given by flag or environment variable cannot change under a running
process: a SIGHUP then only logs that there is nothing to reload (and no
longer terminates the process, which is SIGHUP's default action).

A rotation that keeps every peer able to verify every other's tokens takes
three writes, each once all processes have reloaded the previous one: add
the new key last (``A, B``), promote it (``B, A``), retire the old (``B``).

Usage::

    holder = keyreload.server_auth(cfg.auth_keys, cfg.auth_keys_file, "--broker.auth-keys-file")
    reloader = keyreload.KeyReloader(cfg.auth_keys_file, holder)
    tg.create_task(reloader.run(), name="auth key reload")
    keyreload.handle_sighup(loop, reloader, "--broker.auth-keys")  # a process owning its signals
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import signal

import prometheus_client as prom

from gazette.broker import protocol as pb
from gazette.broker.protocol import auth

__all__ = [
    "KeyReloader",
    "ReloadConfig",
    "handle_sighup",
    "load_keys_file",
    "reloader_of",
    "server_auth",
]

log = logging.getLogger(__name__)

key_reloads = prom.Counter(
    "gazette_auth_key_reloads_total",
    "Reloads of a keys file (--broker.auth-keys-file, --consumer.auth-keys-file), by outcome",
    ["outcome"],
)

#: A keys file is a handful of base64 keys: anything much larger is not one.
_MAX_FILE_SIZE = 1 << 20


@dataclasses.dataclass(frozen=True)
class ReloadConfig:
    #: Seconds between two checks of the file (Kubernetes takes up to a minute or
    #: so to project a changed Secret, so a few seconds add little to that).
    poll_interval: float = 2.0
    #: The flag naming the file, for log lines.
    flag: str = "--broker.auth-keys-file"


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read(_MAX_FILE_SIZE + 1)
    if len(data) > _MAX_FILE_SIZE:
        raise pb.AuthorizationError(f"larger than {_MAX_FILE_SIZE} bytes: not a keys file")
    return data


def _decode(data: bytes) -> auth.KeyedAuth:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise pb.AuthorizationError(f"not UTF-8 text: {e}") from None
    return auth.KeyedAuth(text)


def load_keys_file(path: str) -> auth.KeyedAuth:
    """The keys of the file at ``path``; AuthorizationError naming the file if it has none."""
    try:
        return _decode(_read(path))
    except OSError as e:
        raise pb.AuthorizationError(f"reading {path}: {e.strerror or e}") from None
    except pb.AuthorizationError as e:
        raise pb.AuthorizationError(f"{path}: {e}") from None


def server_auth(keys: str, keys_file: str, file_flag: str) -> auth.SwappableAuth | None:
    """A server's keys from its flags (keys, else the file); None when it has neither.

    Raises SystemExit with one line naming ``file_flag`` when the file has no keys.
    """
    if keys_file:
        try:
            return auth.SwappableAuth(load_keys_file(keys_file))
        except pb.AuthorizationError as e:
            raise SystemExit(f"{file_flag}: {e}") from None
    if keys:
        return auth.SwappableAuth(auth.KeyedAuth(keys))
    return None


def reloader_of(
    holder: auth.SwappableAuth | None, keys_file: str, flag: str = "--broker.auth-keys-file"
) -> KeyReloader | None:
    """The reloader of ``keys_file`` into ``holder``; None without a file."""
    if holder is None or not keys_file:
        return None
    return KeyReloader(keys_file, holder, ReloadConfig(flag=flag))


_Stat = tuple[int, int, int, int]


def _stat(path: str) -> _Stat | None:
    try:
        st = os.stat(path)  # Follows the symlinks of a mounted Secret.
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class KeyReloader:
    """Keeps ``holder`` loaded with the keys of the file at ``path``; see the module docstring.

    The file is expected to have been loaded into ``holder`` already (by
    :func:`server_auth`): its current content is taken as the keys in force.
    """

    def __init__(
        self, path: str, holder: auth.SwappableAuth, config: ReloadConfig = ReloadConfig()
    ) -> None:
        self.path = path
        self.holder = holder
        self.config = config
        #: Successful swaps so far (tests wait on it; so may a curious operator, in the logs).
        self.reloads = 0
        self._stat = _stat(path)
        self._digest = self._hash_now()
        self._bad_digest: bytes | None = None
        self._wake = asyncio.Event()
        self._forced = False

    def _hash_now(self) -> bytes | None:
        try:
            return hashlib.sha256(_read(self.path)).digest()
        except (OSError, pb.AuthorizationError):
            return None

    def request_reload(self) -> None:
        """Read the file at once (SIGHUP), whatever its stat says."""
        self._forced = True
        self._wake.set()

    def check(self, *, force: bool = False) -> bool:
        """Reload the file if it changed (or ``force``); True if new keys were swapped in."""
        stat = _stat(self.path)
        if not force and stat == self._stat:
            return False
        where = f"{self.config.flag} {self.path}"
        try:
            data = _read(self.path)
        except (OSError, pb.AuthorizationError) as e:
            # A symlink swap is atomic, so a missing file is an operator's doing:
            # keep serving with the keys in force and look again at the next poll.
            reason = getattr(e, "strerror", None) or str(e)
            if force or stat != self._stat:
                log.error("%s: cannot be read, keeping the keys in force: %s", where, reason)
                key_reloads.labels("unreadable").inc()
            self._stat = stat
            return False
        self._stat = stat
        digest = hashlib.sha256(data).digest()
        if digest == self._digest:
            if force:
                log.warning("%s: unchanged, keeping the keys in force", where)
            return False
        try:
            keys = _decode(data)
        except pb.AuthorizationError as e:
            if force or digest != self._bad_digest:
                log.error("%s: no valid keys, keeping the keys in force: %s", where, e)
                key_reloads.labels("invalid").inc()
            self._bad_digest = digest
            return False
        self.holder.swap(keys)
        self._digest, self._bad_digest = digest, None
        self.reloads += 1
        key_reloads.labels("reloaded").inc()
        log.warning(
            "%s: reloaded %d authorization keys (the first signs)%s",
            where,
            len(keys.keys),
            "; tokens without a key are allowed" if keys.allow_missing else "",
        )
        return True

    async def run(self) -> None:
        """Poll the file and serve SIGHUPs until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.poll_interval)
            self._wake.clear()
            forced, self._forced = self._forced, False
            # Reading a small file blocks for microseconds (a Secret is on tmpfs):
            # not worth a thread, and a thread could race a later check.
            self.check(force=forced)


def handle_sighup(
    loop: asyncio.AbstractEventLoop, reloader: KeyReloader | None, static_flag: str
) -> None:
    """Make SIGHUP reload ``reloader``'s file, or say there is nothing to reload.

    Only for a process that owns its signals (not brokers sharing a test's loop).
    ``static_flag`` names where the keys come from when there is no file.
    """

    def on_sighup() -> None:
        if reloader is not None:
            log.warning("SIGHUP: reloading %s", reloader.path)
            reloader.request_reload()
        else:
            log.warning(
                "SIGHUP: nothing to reload (authorization keys given by %s or its environment "
                "variable cannot change while the process runs; use a keys file)",
                static_flag,
            )

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGHUP, on_sighup)
