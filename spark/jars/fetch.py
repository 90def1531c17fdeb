"""Fetch the jars Spark needs for ``s3a://`` paths: hadoop-aws and the AWS SDK v2 bundle.

pyspark's wheel ships Hadoop's client (``hadoop-client-api``/``-runtime`` 3.5.0)
but not its S3A connector. S3A is ``hadoop-aws`` of the *same* Hadoop version
plus the AWS SDK v2 ``bundle`` that Hadoop 3.5.0 is built against (its
``hadoop-project`` pom: ``aws-java-sdk-v2.version`` 2.35.4), and hadoop-aws's one
other runtime dependency, ``analyticsaccelerator-s3`` 1.3.1. They are pinned
here with Maven Central's SHA-1 and downloaded once into a cache outside git:
``~/.cache/gazette/spark-jars`` (``$XDG_CACHE_HOME``; ``$GAZETTE_SPARK_JARS`` overrides it). The image
(``images/spark/Dockerfile``) runs this same script, so tests and image agree.

A file lock serialises concurrent fetches (two pytest workers, two shells); a
jar is downloaded to ``<name>.part``, checked, then renamed, so the cache only
ever holds whole, verified jars. ``$GAZETTE_MAVEN_REPOSITORY`` points at a
mirror of Maven Central.

Usage::

    python spark/jars/fetch.py                      # fetch; print one jar path a line
    python spark/jars/fetch.py --format comma       # for spark-submit --jars / spark.jars
    python spark/jars/fetch.py --dest /opt/spark/jars

Stdlib only: it runs before anything is installed (in the image build).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import os
import pathlib
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence

__all__ = ["JARS", "FetchError", "Jar", "default_cache", "fetch"]

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
#: Seconds a stalled socket read may take before the download fails.
READ_TIMEOUT = 60.0
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Jar:
    """One Maven artifact, pinned by the SHA-1 Maven Central publishes beside it."""

    group: str
    artifact: str
    version: str
    sha1: str
    #: Rough size, for the message before a long download.
    megabytes: int

    @property
    def filename(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        path = self.group.replace(".", "/")
        return f"{repository.rstrip('/')}/{path}/{self.artifact}/{self.version}/{self.filename}"


JARS = (
    Jar("org.apache.hadoop", "hadoop-aws", "3.5.0", "9e594525d264c0db653c7f68da98b245f7d61ea5", 1),
    Jar(
        "software.amazon.awssdk",
        "bundle",
        "2.35.4",
        "7252265e3970b214708e68a8b74a8fa8c875af1e",
        655,
    ),
    # A compile-scope dependency of hadoop-aws 3.5.0 (no dependencies of its own): S3A
    # links its ObjectClient even with the classic input stream (NoClassDefFoundError without).
    Jar(
        "software.amazon.s3.analyticsaccelerator",
        "analyticsaccelerator-s3",
        "1.3.1",
        "6c9bd0f6c440c9a78e82d272f5f0252d942419f6",
        3,
    ),
)


class FetchError(RuntimeError):
    """A jar could not be downloaded or did not match its checksum (``url`` says which)."""

    def __init__(self, url: str, dest: pathlib.Path, reason: str) -> None:
        self.url = url
        self.dest = dest
        super().__init__(
            f"cannot fetch {url}: {reason}. The s3a:// jars are downloaded once into {dest}; "
            "on a machine without access to Maven Central, copy "
            f"{', '.join(j.filename for j in JARS)} there (or set GAZETTE_SPARK_JARS to a "
            "directory holding them), or point GAZETTE_MAVEN_REPOSITORY at a mirror"
        )


def default_cache() -> pathlib.Path:
    """``$GAZETTE_SPARK_JARS``, else ``spark-jars`` under the tools' cache root
    (``$GAZETTE_CACHE``, else ``$XDG_CACHE_HOME/gazette``, else ``~/.cache/gazette``; as
    ``e2e/cache-root.sh`` resolves it): outside any checkout, so that fresh clones (CI)
    reuse the 650 MB once fetched."""
    env = os.environ.get("GAZETTE_SPARK_JARS")
    if env:
        return pathlib.Path(env)
    root = os.environ.get("GAZETTE_CACHE")
    if root:
        return pathlib.Path(root) / "spark-jars"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(xdg) / "gazette" / "spark-jars"


def fetch(
    dest: pathlib.Path | None = None,
    *,
    jars: Sequence[Jar] = JARS,
    repository: str | None = None,
    log: bool = True,
) -> list[pathlib.Path]:
    """Paths of ``jars`` in ``dest``, downloading the missing ones; raises FetchError."""
    dest = dest or default_cache()
    repository = repository or os.environ.get("GAZETTE_MAVEN_REPOSITORY") or MAVEN_CENTRAL
    dest.mkdir(parents=True, exist_ok=True)
    out = [dest / jar.filename for jar in jars]
    if all(p.exists() for p in out):
        return out  # The fast path takes no lock: only verified jars are ever renamed in.
    with _locked(dest / ".fetch.lock"):
        for jar, path in zip(jars, out, strict=True):
            if not path.exists():
                _download(jar, jar.url(repository), path, log=log)
    return out


@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _download(jar: Jar, url: str, path: pathlib.Path, *, log: bool) -> None:
    if log:
        print(f"fetching {url} (~{jar.megabytes} MB) into {path.parent}", file=sys.stderr)
    part = path.with_name(path.name + ".part")
    digest = hashlib.sha1(usedforsecurity=False)
    try:
        with urllib.request.urlopen(url, timeout=READ_TIMEOUT) as resp, part.open("wb") as f:
            while chunk := resp.read(_CHUNK):
                digest.update(chunk)
                f.write(chunk)
    except (urllib.error.URLError, OSError) as e:
        part.unlink(missing_ok=True)
        raise FetchError(url, path.parent, str(getattr(e, "reason", e))) from e
    if digest.hexdigest() != jar.sha1:
        part.unlink(missing_ok=True)
        raise FetchError(
            url, path.parent, f"SHA-1 {digest.hexdigest()} is not the pinned {jar.sha1}"
        )
    os.replace(part, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--dest",
        type=pathlib.Path,
        default=None,
        help="directory of the jars (default: $GAZETTE_SPARK_JARS, else $GAZETTE_CACHE/spark-jars, else ~/.cache/gazette/spark-jars)",
    )
    parser.add_argument(
        "--format",
        choices=("lines", "comma"),
        default="lines",
        help="print the jar paths one a line, or comma-separated (for --jars)",
    )
    args = parser.parse_args(argv)
    try:
        paths = fetch(args.dest)
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sep = "," if args.format == "comma" else "\n"
    print(sep.join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
