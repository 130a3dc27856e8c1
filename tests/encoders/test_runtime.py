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


def _numpy_blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]]


def test_configure_torch_puts_numpy_blas_on_one_thread_and_leaves_other_blas_alone() -> None:
    import faiss  # noqa: F401  (brings its own OpenBLAS, which must keep its threads)
    from threadpoolctl import threadpool_info, threadpool_limits

    from app.encoders.runtime import limit_numpy_blas

    def others() -> dict[str, int]:
        return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and "numpy" not in i["filepath"]}

    threads = torch.get_num_threads()
    with threadpool_limits(limits=2, user_api="blas"):  # restored on exit, whatever the test does
        before = others()
        assert _numpy_blas_threads() and set(_numpy_blas_threads()) == {2}
        configure_torch(1)
        assert set(_numpy_blas_threads()) == {1}
        assert others() == before
        assert limit_numpy_blas(2) >= 1 and set(_numpy_blas_threads()) == {2}
    torch.set_num_threads(threads)
