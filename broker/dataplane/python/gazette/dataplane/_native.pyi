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
