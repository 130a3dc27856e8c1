"""aiSFX (Ma & Lerch, ISMIR 2022) in torch: a 9-layer CNN trained on professional sound-effects libraries.

44.1 kHz audio, peak-normalised -> 96-band HTK mel power (2048-sample Hann frames every 1024,
each filter of unit area, as the package's librosa path asks) -> ``log10(1 + 10^4 S) / 9.4578``
(the paper's normalisation constant) -> four blocks of two 3x3 convolutions with batch norm and
ReLU, max-pooled 2x2 three times -> mean over frequency -> (B, 512, frames / 8).

The package averages nothing over time itself: its embedding is the maximum over time of that map,
which :meth:`AiSfx.forward` returns; :meth:`AiSfx.frames` keeps the time axis for pooling heads.
Frames are not centred (no padding at the edges): the service embeds windows cut from longer audio,
whose neighbours are other windows, not silence.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

SAMPLE_RATE = 44100
N_FFT = 2048
HOP = 1024
N_MELS = 96
SPEC_MAX = 9.457798957824707  # aisfx.preprocessing.spectrogram_normalize, 'original'
DIM = 512
WIDTH = 64  # channels of the first block; each block doubles them


def htk_mel_filters(sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular filters on the HTK mel scale from 0 Hz to Nyquist, each
    scaled to unit sum (librosa's ``norm=1``); a filter too narrow to cover any FFT bin stays zero."""
    def to_mel(hz: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    def to_hz(mel: np.ndarray) -> np.ndarray:
        return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)

    edges = to_hz(np.linspace(to_mel(np.array(0.0)), to_mel(np.array(sample_rate / 2)), n_mels + 2))
    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    widths = np.diff(edges)
    ramps = edges[:, None] - freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    filters = np.maximum(0.0, np.minimum(lower, upper))
    sums = filters.sum(axis=1, keepdims=True)
    return (filters / np.where(sums > 0, sums, 1.0)).astype(np.float32)


class ConvBlock(torch.nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.conv2 = torch.nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c_out)
        self.bn2 = torch.nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor, pool: int) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return F.max_pool2d(x, pool) if pool > 1 else x


class AiSfxNet(torch.nn.Module):
    """(B, frames, 96) normalised log-mel -> (B, 512, frames // 8): the package's ``EmbeddingNet`` before its max."""

    POOLS = (2, 2, 2, 1)

    def __init__(self) -> None:
        super().__init__()
        widths = [1, WIDTH, WIDTH * 2, WIDTH * 4, WIDTH * 8]
        for i in range(4):
            setattr(self, f"conv_block{i + 1}", ConvBlock(widths[i], widths[i + 1]))

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        x = spec.unsqueeze(1)
        for i, pool in enumerate(self.POOLS):
            x = getattr(self, f"conv_block{i + 1}")(x, pool)
        return x.mean(dim=3)


class AiSfx(torch.nn.Module):
    """(B, samples) 44.1 kHz -> (B, 512) embedding (the maximum over time, as the package gives)."""

    sample_rate = SAMPLE_RATE
    dim = DIM

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(N_FFT, periodic=True), persistent=False)
        self.register_buffer("filters", torch.from_numpy(np.ascontiguousarray(htk_mel_filters().T)), persistent=False)
        self.net = AiSfxNet()

    @staticmethod
    def min_samples() -> int:
        return N_FFT + 7 * HOP  # 8 frames: one after the three 2x pools

    def spectrogram(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, samples) -> (B, frames, 96) normalised log-mel, each clip scaled to peak 1 first."""
        if wave.shape[-1] < self.min_samples():
            wave = F.pad(wave, (0, self.min_samples() - wave.shape[-1]))
        peak = wave.abs().amax(dim=-1, keepdim=True)
        wave = wave / torch.where(peak > 0, peak, torch.ones_like(peak))
        frames = wave.unfold(-1, N_FFT, HOP) * self.window
        spec = torch.fft.rfft(frames, n=N_FFT)
        power = spec.real.square() + spec.imag.square()
        return torch.log10(power @ self.filters * 10000.0 + 1.0) / SPEC_MAX

    def frames(self, wave: torch.Tensor) -> torch.Tensor:
        """(B, samples) -> (B, 512, time) feature map before the pooling over time."""
        return self.net(self.spectrogram(wave))

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return self.frames(wave).amax(dim=2)


def load() -> AiSfx:
    """The module with the converted weights from app/assets/frontends."""
    from app.features.pretrained._store import cached_state, load_strict

    name = "aisfx"
    state, config = cached_state(name)
    model = AiSfx()
    load_strict(model, state, name)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()
