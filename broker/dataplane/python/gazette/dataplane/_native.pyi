from os import PathLike

class FrontDoor:
    """The broker's listening port, served natively; see ``gazette.dataplane``."""

    def __init__(
        self,
        host: str,
        port: int,
        backend: str | PathLike[str],
        cert_file: str | PathLike[str] | None = None,
        key_file: str | PathLike[str] | None = None,
        ca_file: str | PathLike[str] | None = None,
        threads: int = 2,
    ) -> None: ...
    @property
    def port(self) -> int:
        """The bound port."""
    def stop(self, grace: float) -> None:
        """Stop accepting; let connections finish for up to ``grace`` seconds; close them."""
