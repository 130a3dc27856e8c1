"""Fixtures shared by the general-audio recipe tests (tests/training/tiny_corpora.py), built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training import tiny_corpora


@pytest.fixture(scope="session")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_corpora.make_data(tmp_path_factory)


@pytest.fixture(scope="session")
def speech_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_corpora.make_speech_checkpoint(tmp_path_factory)


@pytest.fixture(scope="session")
def built(data: Path, speech_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], Path]:
    return tiny_corpora.make_built(data, speech_checkpoint, tmp_path_factory)
