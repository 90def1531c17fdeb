from os import PathLike

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
