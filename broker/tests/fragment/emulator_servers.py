"""Blob-store emulators on loopback for the gs:// and azure:// store tests.

* :class:`FakeGCS` — fake-gcs-server, a Go module built once by
  ``emulators/fake-gcs/build.sh`` into ``fake-gcs-server/`` of the tool cache;
* :class:`Azurite` — Microsoft's Azure Storage emulator from npm, installed once
  into ``azurite/<version>/`` of the tool cache (``e2e/cache-root.sh``: outside the
  checkout, so fresh clones reuse both).

Each runs on a free port, is waited on until it answers, and is killed on exit.
A module of its own (every ``conftest`` of the workspace is imported as ``conftest``).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import pathlib
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

from gazette.broker import testing

REPO = pathlib.Path(__file__).resolve().parents[3]
AZURITE_VERSION = "3.37.0"
#: Azurite's well-known development account and key.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


class EmulatorError(RuntimeError):
    """An emulator could not be built, installed or started (the message says why)."""


def fake_gcs_binary() -> pathlib.Path:
    script = pathlib.Path(__file__).parent / "emulators" / "fake-gcs" / "build.sh"
    proc = subprocess.run([str(script)], capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise EmulatorError(f"building fake-gcs-server failed:\n{proc.stderr[-3000:]}")
    return pathlib.Path(proc.stdout.strip())


def azurite_binary() -> pathlib.Path:
    out = subprocess.run(
        [str(REPO / "e2e" / "cache-root.sh"), "azurite", AZURITE_VERSION],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    root = pathlib.Path(out.strip())
    bin_path = root / "node_modules" / ".bin" / "azurite-blob"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # One install, whoever comes first.
        if not bin_path.exists():
            proc = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(root),
                 f"azurite@{AZURITE_VERSION}"],
                capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            if proc.returncode != 0 or not bin_path.exists():
                raise EmulatorError(f"npm install azurite failed:\n{proc.stderr[-3000:]}")
    return bin_path


def _wait(
    url: str,
    proc: subprocess.Popen[bytes],
    log: pathlib.Path,
    timeout: float,
    context: ssl.SSLContext | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=1, context=context).close()
            return
        except urllib.error.HTTPError:
            return  # It answers (an error status is an answer).
        except OSError:
            pass
        if proc.poll() is not None:
            raise EmulatorError(f"emulator exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise EmulatorError(f"emulator did not answer {url} in {timeout}s")
        time.sleep(0.1)


@contextlib.contextmanager
def _running(
    argv: list[str],
    url: str,
    work: pathlib.Path,
    timeout: float = 60.0,
    context: ssl.SSLContext | None = None,
) -> Iterator[None]:
    work.mkdir(parents=True, exist_ok=True)
    log = work / "emulator.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait(url, proc, log, timeout, context)
        yield
    finally:
        proc.kill()
        proc.wait(timeout=30)


@contextlib.contextmanager
def FakeGCS(work: pathlib.Path) -> Iterator[str]:
    """fake-gcs-server over http on a free port; yields its endpoint (``http://127.0.0.1:N``)."""
    port = testing.free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [str(fake_gcs_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
            "-backend", "memory", "-public-host", f"127.0.0.1:{port}",
            "-external-url", endpoint]  # fmt: skip
    with _running(argv, f"{endpoint}/storage/v1/b", work):
        yield endpoint


def loopback_certificate(work: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A self-signed certificate of 127.0.0.1 and its key: (cert.pem, key.pem) under ``work``.

    The certificate is its own CA: trust it by pointing a client's CA bundle at cert.pem.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = work / "cert.pem", work / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@contextlib.contextmanager
def Azurite(work: pathlib.Path, *, oauth: bool = False) -> Iterator[str]:
    """Azurite's blob service on a free port; yields the account's blob endpoint.

    ``oauth``: serve https (certificate ``work/cert.pem``, from
    :func:`loopback_certificate`) and accept Azure AD bearer tokens, whose
    claims Azurite checks but whose signatures it does not.
    """
    if shutil.which("npm") is None:
        raise EmulatorError("npm is not on PATH")
    port = testing.free_port()
    argv = [str(azurite_binary()), "--blobHost", "127.0.0.1", "--blobPort", str(port),
            "--location", str(work / "data"), "--skipApiVersionCheck", "--loose",
            "--silent"]  # fmt: skip
    scheme, context = "http", None
    if oauth:
        work.mkdir(parents=True, exist_ok=True)
        cert, key = loopback_certificate(work)
        argv += ["--oauth", "basic", "--cert", str(cert), "--key", str(key)]
        scheme, context = "https", ssl.create_default_context(cafile=str(cert))
    endpoint = f"{scheme}://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    with _running(argv, f"{endpoint}?comp=list", work, context=context):
        yield endpoint


if __name__ == "__main__":
    # `make tools`: install Azurite into the tool cache ahead of the tests; print its path.
    print(azurite_binary())
