"""Serving settings for torch: thread count, and no TF32 so GPU and CPU encodings agree."""

from __future__ import annotations

import torch
from fastapi.testclient import TestClient

from app.encoders.runtime import configure_torch
from app.main import create_app
from tests.conftest import make_settings


def _allow_tf32() -> None:
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True


def test_configure_torch_sets_threads_and_turns_tf32_off() -> None:
    threads = torch.get_num_threads()
    _allow_tf32()
    try:
        configure_torch(1)
        assert torch.get_num_threads() == 1
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.set_num_threads(threads)


def test_a_starting_service_turns_tf32_off(tmp_path) -> None:
    threads = torch.get_num_threads()
    _allow_tf32()
    try:
        with TestClient(create_app(make_settings(tmp_path))) as client:
            assert client.get("/healthz").status_code == 200
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.set_num_threads(threads)
