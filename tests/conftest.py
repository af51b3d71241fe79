"""Fixtures shared by test modules."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A zoo cache folder with `tiny` built, once per test session (it takes a minute)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from real_backend.zoo import build

    folder = tmp_path_factory.mktemp("zoo")
    build("tiny", cache_dir=folder)
    return folder
