"""``gazette.broker.fragment`` loads its store-facing submodules (and boto3) on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gazette.broker import fragment


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout.strip()


def test_importing_codecs_does_not_import_boto3() -> None:
    code = "import sys, gazette.broker.fragment.codecs; print('boto3' in sys.modules)"
    assert _run(code) == "False"


def test_a_store_name_imports_the_stores_on_first_use() -> None:
    code = (
        "import sys\n"
        "from gazette.broker import fragment\n"
        "before = 'boto3' in sys.modules\n"
        "registry = fragment.StoreRegistry\n"
        "print(before, 'boto3' in sys.modules, registry.__module__)"
    )
    assert _run(code) == "False True gazette.broker.fragment.stores.registry"


def test_every_public_name_resolves() -> None:
    from gazette.broker.fragment import index, persister, reader, spool, stores

    for name in fragment.__all__:
        assert getattr(fragment, name) is not None, name
        assert name in dir(fragment)
    assert fragment.stores is stores
    assert fragment.StoreRegistry is stores.StoreRegistry
    assert fragment.Index is index.Index
    assert fragment.persist is persister.persist
    assert fragment.read_fragment is reader.read_fragment
    assert fragment.maybe_roll is spool.maybe_roll


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = fragment.no_such_name
