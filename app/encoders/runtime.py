"""Process-wide torch (and numpy BLAS) settings for serving encoders."""

from __future__ import annotations

import torch

from app.encoders.side_thread import set_model_threads


def configure_torch(threads: int) -> None:
    """Thread count for CPU work, and full float32 arithmetic on GPUs.

    TF32 (on by default in cuDNN's LSTMs and convolutions on Ampere and later GPUs) rounds
    inputs to 10-bit mantissas. On an H100 it moved the attn-hash models' embeddings by up to
    0.011 and gave 5-7% of windows a different code, so a collection indexed on one device would
    answer differently when queried from the other. With it off, CPU and GPU agree to 2e-4 and on
    the codes, and the speech model still encodes ~35,000 windows/s there; the difference in speed
    was inside the run-to-run noise (bench/results/device_parity*.json).
    """
    torch.set_num_threads(threads)
    set_model_threads(threads)  # a lone query's two halves on two threads only if the budget has two
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    limit_numpy_blas()


def limit_numpy_blas(threads: int = 1) -> int:
    """numpy's own BLAS (the OpenBLAS in numpy's wheel) on ``threads`` threads; returns how many
    libraries were set.

    Why: a query's numpy products are small (one query against the 400-4,000 shortlisted vectors
    of a two-stage search), too small to split, yet OpenBLAS wakes a helper thread for each and
    spins it while the encoder's torch threads want the same cores. On the 2-core bench machine a
    text query with re-ranking cost 79-110 ms of server CPU with numpy's default threads and 41-54 ms
    with one (bench/results/query_path.md). Only numpy's copy is limited: FAISS and torch bring
    their own BLAS and thread pools and keep their settings.
    """
    try:
        from threadpoolctl import ThreadpoolController  # installed with scikit-learn
    except ImportError:
        return 0
    changed = 0
    for lib in ThreadpoolController().lib_controllers:
        if lib.user_api == "blas" and "numpy" in str(lib.filepath):
            lib.set_num_threads(threads)
            changed += 1
    return changed
