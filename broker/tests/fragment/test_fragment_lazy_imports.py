"""``gazette.broker.fragment`` exports store-free names only: boto3 loads where stores are used."""

from __future__ import annotations

import subprocess
import sys

from gazette.broker import fragment


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout.strip()


def test_importing_the_package_or_codecs_does_not_import_boto3() -> None:
    code = (
        "import sys, gazette.broker.fragment, gazette.broker.fragment.codecs\n"
        "print('boto3' in sys.modules)"
    )
    assert _run(code) == "False"


def test_importing_the_stores_imports_boto3() -> None:
    code = "import sys\nfrom gazette.broker.fragment import stores\nprint('boto3' in sys.modules)"
    assert _run(code) == "True"


def test_every_public_name_resolves() -> None:
    for name in fragment.__all__:
        assert getattr(fragment, name) is not None, name
