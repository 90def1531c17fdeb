"""Fixtures of the Go side-by-side tests: Gazette's own broker and gazctl beside ours."""

from __future__ import annotations

import pathlib
import shutil

import go_gazette
import pytest


@pytest.fixture(scope="session")
def go_bins() -> pathlib.Path:
    if shutil.which("go") is None:
        pytest.skip("`go` is not on PATH: the Go side-by-side tests need a Go toolchain")
    try:
        return go_gazette.build()
    except go_gazette.BuildError as e:
        pytest.fail(str(e))
