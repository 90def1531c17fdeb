import asyncio
from collections.abc import Callable, Sequence
from os import PathLike
from typing import Any

class FrontDoor:
    """The broker's listening port, served natively; see ``gazette.dataplane``."""

    def __init__(
        self,
        host: str,
        port: int,
        backend: str | PathLike[str] | None,
        cert_file: str | PathLike[str] | None = None,
        key_file: str | PathLike[str] | None = None,
        ca_file: str | PathLike[str] | None = None,
        threads: int = 2,
        http_backend: str | PathLike[str] | None = None,
        max_connections: int | None = None,
        first_bytes_timeout: float | None = None,
        header_timeout: float | None = None,
        keepalive: float | None = None,
        process: str | None = None,
    ) -> None: ...
    @property
    def port(self) -> int:
        """The bound port."""
    def set_auth_keys(self, keys: list[bytes] | None, allow_missing: bool = False) -> None:
        """Check bearer tokens of gRPC requests with these HMAC keys (None: don't)."""
    def stats(self) -> dict[str, int]:
        """Connections open, and totals refused, silent and accept_errors."""
    def stop(self, grace: float) -> None:
        """Stop accepting; let connections finish for up to ``grace`` seconds; close them."""

class Topology:
    """What the data plane knows of the cluster, published by the broker's keyspace observer."""

    def __init__(self) -> None: ...
    def publish(
        self,
        etcd: bytes,
        local_id: tuple[str, str] | None,
        members: list[tuple[str, str, str]] | None,
        journals: list[tuple[str, bytes, bytes, bool]],
        removed: list[str],
    ) -> None:
        """Apply one keyspace update (serialized Header.Etcd, JournalSpec and Route)."""
    @property
    def revision(self) -> int:
        """The etcd revision published last."""
    def stop_serving_local_replicas(self) -> None:
        """From now on, journals that resolve to this broker fail to resolve."""
    def resolve(
        self,
        journal: str,
        may_proxy: bool,
        require_primary: bool,
        proxy_header: bytes | None = None,
    ) -> tuple[int, bytes, bool]:
        """(status, serialized Header, consistent) of ``journal`` as published now."""

class SpoolHandle:
    """A spool file of the data plane, lent to Python."""

    @property
    def serial(self) -> int:
        """A number no other spool file of this process has had."""
    @property
    def path(self) -> str | None:
        """The file's name while it is recoverable."""
    @property
    def record_path(self) -> str | None:
        """Its record's name while it is recoverable."""
    def dup(self) -> int:
        """A new descriptor of the file, the caller's to close."""
    def unlink(self) -> None:
        """Remove a recoverable file's names (readers keep the file)."""

class Plane:
    """The native data plane's appends, replication and reads (see gazette.broker.server.native)."""

    def __init__(
        self,
        front: FrontDoor,
        topology: Topology,
        wake_fd: int,
        *,
        spool_dir: str | None = None,
        recoverable: bool = False,
        sync: bool = False,
        write_timeout: float = 10.0,
        max_append_rate: int = 0,
        min_append_rate: int | None = None,
        max_replication: int = 9,
        max_message_size: int = 4 << 20,
        recovery_delay: float = 20.0,
        resume_head_gaps: bool = True,
        pulse_interval: float = 60.0,
        auto_suspend: bool = False,
        peer_ca_file: str | None = None,
        peer_cert_file: str | None = None,
        peer_key_file: str | None = None,
    ) -> None: ...
    def serve(self) -> None:
        """The front door serves Append, Replicate and Read here from now on."""
    def update_local(
        self, assignments: list[tuple[str, bool, int, int, list[tuple[str, str]]]]
    ) -> list[str]:
        """Reconcile replicas with (journal, primary, create revision, lease, members)."""
    def drain(self) -> list[tuple[Any, ...]]:
        """Everything the outbox holds, in order (see the module documentation)."""
    def answer(
        self, id: int, value: int | None = None, error: str | None = None, text: str | None = None
    ) -> None:
        """Python's answer to an ask (``text`` for one answered with a text: ``sign_url``)."""
    def stored_chunk(self, id: int, data: bytes) -> bool:
        """The next decoded chunk of stored read ``id``; False once the read is over."""
    def stored_end(self, id: int, error: str | None = None) -> None:
        """Stored read ``id`` reached the fragment's end, or failed with ``error``."""
    def replace_stored(self, journal: str, fragments: list[bytes]) -> bool:
        """A store listing (serialized Fragments) replaces the stored fragments of the
        journal's index in the plane; False when no replica of it is here."""
    def fragments(self, journal: str) -> list[bytes] | None:
        """Every fragment of the journal's index in the plane (serialized, in offset
        order), or None when no replica of it is here."""
    def mark_skipped(self, journal: str, ranges: list[tuple[int, int]]) -> bool:
        """Offset ranges the journal skipped for good (reads jump them after a listing)."""
    def set_store_health(self, url: str, failure: str | None = None) -> None:
        """The last health check of a store (None: it passed)."""
    def set_lease(self, valid_for: float | None, cut_off: str | None = None) -> None:
        """How long our lease is surely valid from now; why we are cut off, if we are."""
    def write_heads(self) -> list[tuple[str, int]]:
        """(journal, write head) of the journals this broker is primary of."""
    def forget_peer(self, endpoint: str) -> None:
        """Dial the peer at ``endpoint`` afresh from now on (it stopped answering)."""
    def flush_all(self) -> None:
        """Every replica rolls its spool soon (the lease is in doubt)."""
    def __len__(self) -> int: ...
    def stop(self, timeout: float) -> None:
        """Stop every replica within ``timeout`` seconds (blocks, without the GIL)."""
    def close(self) -> None:
        """Stop serving natively; asks fail from now on."""

class ClientChannels:
    """A client's channels to broker endpoints, carrying its appends (see ``gazette.dataplane``)."""

    def __init__(
        self,
        resolve: Callable[[asyncio.Future[Any], Any], None],
        max_message_size: int = 8 << 20,
    ) -> None: ...
    def set_tls(
        self, ca: bytes | None = None, cert: bytes | None = None, key: bytes | None = None
    ) -> None:
        """TLS of ``https://`` endpoints from now on (PEM content)."""
    def append(
        self, endpoint: str, first: bytes, metadata: Sequence[tuple[str, str]] | None = None
    ) -> AppendCall:
        """Start an Append RPC with its serialized first ``AppendRequest``."""
    def read(
        self, endpoint: str, request: bytes, metadata: Sequence[tuple[str, str]] | None = None
    ) -> ReadCall:
        """Start a Read RPC of a serialized ``ReadRequest``."""
    def close(self) -> None:
        """Forget the channels (calls under way keep theirs)."""
    @staticmethod
    def shutdown(timeout: float = 1.0) -> None:
        """End the runtime thread of client calls (at exit: before the interpreter finalizes)."""

class AppendCall:
    """One Append RPC under way."""

    def write(self, content: bytes) -> bool:
        """Queue a message of ``content`` (b"": the commit); False if not taken."""
    def writable(self, event_loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
        """Settle ``future`` once a message would be taken, or the RPC has ended."""
    def finish(self) -> None:
        """Half-close the stream."""
    def done(self) -> bool:
        """Whether the RPC has ended."""
    def outcome(
        self,
        event_loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[bytes | str | tuple[int, str]],
    ) -> None:
        """Settle ``future`` with the serialized AppendResponse (valid), why it is
        invalid (as ``str`` of Python's ``pb.ValidationError``), or (gRPC code, message)."""
    def cancel(self) -> None:
        """Cancel the RPC: nothing of it is committed."""

class ReadCall:
    """One Read RPC under way."""

    def take(
        self,
        event_loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[list[bytes | tuple[int, str] | None]],
    ) -> None:
        """Settle ``future`` with what has come: serialized ReadResponses, then None
        at the clean end, or a failure's (gRPC code, message)."""
    def cancel(self) -> None:
        """Cancel the RPC."""

def check_token(
    keys: list[bytes],
    authorization: str | None,
    require: int,
    spec: bytes | None = None,
    now: float | None = None,
    allow_missing: bool = False,
) -> tuple[str | None, bool]:
    """(refusal or None, whether the claims select ``spec``'s journal), as the data plane decides."""

def validate(type_name: str, message: bytes) -> str | None:
    """The data plane's verdict on a serialized ``protocol`` message of ``type_name``:
    None when valid, else the error text (as ``str`` of Python's ``pb.ValidationError``)."""
