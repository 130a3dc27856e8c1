"""The pretrained front-ends with no head: what Recall's trained heads on top of them must beat.

- ``speech-embedding-mean``: Google's speech_embedding frames of the window (centred in 1 s, as the
  encoders centre short clips) averaged over time: 96 values;
- ``aisfx-max``: aiSFX's feature map maximised over time (the package's own embedding): 512 values.

Each is compared by cosine after removing the mean over the set being searched (the collection mean:
it uses no labels), and gives codes too, the sign of that centred vector, so float and Hamming
search are both reported. The front-ends run at their own rates (aiSFX at 44.1 kHz, resampled with soxr).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from app.encoders.audio.audio_nets import fit_to_window

SAMPLE_RATE = 16000
BATCH = 32


def _centred(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = (x - x.mean(axis=0)).astype(np.float32)
    return x, np.where(x > 0, 1.0, -1.0).astype(np.float32)


def _batches(windows: Sequence[np.ndarray], window_s: float) -> list[torch.Tensor]:
    length = int(round(window_s * SAMPLE_RATE))
    fitted = [fit_to_window(torch.from_numpy(np.require(w, np.float32, ["W"])), length) for w in windows]
    return [torch.stack(fitted[i:i + BATCH]) for i in range(0, len(fitted), BATCH)]


def speech_embedding_mean(windows: Sequence[np.ndarray], window_s: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    from app.features.pretrained import shared

    model = shared("speech-embedding")
    with torch.inference_mode():
        out = [model(batch).mean(dim=1).numpy() for batch in _batches(windows, window_s)]
    return _centred(np.concatenate(out))


def aisfx_max(windows: Sequence[np.ndarray], window_s: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    import soxr

    from app.features.pretrained import shared
    from app.features.pretrained.aisfx import SAMPLE_RATE as AISFX_RATE

    model = shared("aisfx")
    out = []
    with torch.inference_mode():
        for batch in _batches(windows, window_s):
            # soxr treats columns as channels: one call resamples the whole batch
            wave = soxr.resample(np.ascontiguousarray(batch.numpy().T), SAMPLE_RATE, AISFX_RATE).T
            out.append(model(torch.from_numpy(np.ascontiguousarray(wave, np.float32))).numpy())
    return _centred(np.concatenate(out))


FRONTENDS: dict[str, Callable[..., tuple[np.ndarray, np.ndarray]]] = {
    "speech-embedding-mean (frozen)": speech_embedding_mean,
    "aisfx-max (frozen)": aisfx_max,
}
