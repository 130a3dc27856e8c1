"""Process-wide torch settings for serving encoders."""

from __future__ import annotations

import torch


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
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
