"""What the two trained audio families share: config checks, loading, and ``encode``.

A checkpoint config holds everything needed to rebuild the encoder: the feature frontend
(``features``), the network arguments (``arch``), the window the network was trained on
(``window_s``; ``hop_s`` is the default hop over long recordings) and ``bits``. The same
:func:`build_features` and network classes run in training, so service and trainer cannot drift.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from app.encoders.audio.audio_nets import fit_to_window
from app.encoders.base import Embeddings, Encoder, l2_normalise, sign_codes
from app.encoders.checkpoint import CheckpointError, load_checkpoint, load_state_strict
from app.encoders.traced import CpuTraces, Step, trace_step
from app.features.spectrogram import build_features

REQUIRED_KEYS = ("family", "modality", "name", "sample_rate", "window_s", "hop_s", "features", "arch", "bits")
ENCODE_CHUNK = 64  # windows per forward pass: bounds memory for a long recording's many windows


def build_parts(config: dict[str, Any], family: str, build_net: Callable[[dict[str, Any]], torch.nn.Module]) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Feature frontend and untrained network for a config, with every mismatch refused.

    Raises:
        CheckpointError: a missing key, another family, a non-audio modality, arguments the code
            does not take, or a network whose input does not fit the frontend's output.
    """
    where = config.get("name", "<unnamed>")
    missing = [key for key in REQUIRED_KEYS if key not in config]
    if missing:
        raise CheckpointError(f"{where}: config lacks {missing}; was it written by another version of the code?")
    if config["family"] != family:
        raise CheckpointError(f"{where}: family {config['family']!r}, this loader reads {family!r}")
    if config["modality"] != "audio":
        raise CheckpointError(f"{where}: modality {config['modality']!r}, expected 'audio'")
    bits = int(config["bits"])
    if bits < 8 or bits % 8:
        raise CheckpointError(f"{where}: bits must be a positive multiple of 8, got {bits}")
    try:
        features = build_features(config["features"])
        net = build_net(config["arch"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: config does not fit the code: {exc}") from exc
    if getattr(features, "sample_rate", None) != config["sample_rate"]:
        raise CheckpointError(f"{where}: features run at {getattr(features, 'sample_rate', None)} Hz, config says {config['sample_rate']}")
    window = int(round(config["window_s"] * config["sample_rate"]))
    with torch.no_grad():
        shape = features(torch.zeros(1, window)).shape
    n_in = shape[1] * shape[2] if family == "siamese-mlp" else shape[2]
    if n_in != net.n_in:
        raise CheckpointError(f"{where}: a {config['window_s']} s window gives {n_in} inputs, the network takes {net.n_in}")
    if net.dim != bits:  # one bit per output unit in both families
        raise CheckpointError(f"{where}: network gives {net.dim} outputs, config says {bits} bits")
    return features, net


def take_audio_config(encoder: Encoder, config: dict[str, Any]) -> None:
    """What every checkpoint-backed audio encoder reads from its config: name, rate, window, hop, description."""
    encoder.config = config
    encoder.name = config["name"]
    encoder.sample_rate = int(config["sample_rate"])
    encoder.default_window_s = float(config["window_s"])
    encoder.default_hop_s = float(config["hop_s"])
    encoder.description = config.get("description", "")
    encoder.window = int(round(encoder.default_window_s * encoder.sample_rate))


class EmbedStep(torch.nn.Module):
    """(B, window) waveforms -> (float embedding, code values): a trained encoder's features, then its network."""

    def __init__(self, features: torch.nn.Module, net: torch.nn.Module) -> None:
        super().__init__()
        self.features, self.net = features, net

    def forward(self, waves: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net.embed(self.features(waves))


def example_windows(window: int) -> list[np.ndarray]:
    """Fixed batches of ``window`` samples to trace a step on and check it with (app/encoders/traced.py):
    sizes 2, 1 and 3 (noise, a tone, silence), the first being the one traced."""
    rng = np.random.default_rng(0)
    noise = (0.1 * rng.standard_normal((4, window))).astype(np.float32)
    tone = np.sin(np.arange(window, dtype=np.float32) * 0.3)[None].astype(np.float32)
    return [noise[:2], noise[2:3], np.concatenate([noise[3:], tone, np.zeros_like(tone)])]


class TrainedAudioEncoder(Encoder):
    """A trained network behind the Encoder interface: windows in, floats and codes out.

    On CPU the features and network run as one TorchScript trace (app/encoders/traced.py), which
    runs without the GIL: the HTTP and search threads of concurrent requests keep going while a
    batch is encoded. It is built on the first CPU batch and must match the eager modules bit for bit.
    """

    modality = "audio"

    def __init__(self, config: dict[str, Any], features: torch.nn.Module, net: torch.nn.Module) -> None:
        super().__init__()
        take_audio_config(self, config)
        self.bits = int(config["bits"])
        self.dim = int(net.dim)
        self.features = features.eval()
        self.net = net.eval()
        self.steps = CpuTraces(EmbedStep(self.features, self.net).eval(), self._trace)

    def to(self, device: str) -> "TrainedAudioEncoder":
        self.features.to(device)
        self.net.to(device)
        self.device = device
        self.steps.reset()
        return self

    def _trace(self) -> Step:
        batches = [torch.from_numpy(b) for b in example_windows(self.window)]
        return trace_step(self.steps.eager, batches[0], batches[1:], self.name)

    def embed_tensor(self, waves: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, window) waveforms -> (float embedding, code values) tensors; no grad, eval mode."""
        step = self.steps.get(self.device)
        with torch.inference_mode():
            return step(waves.to(self.device))

    def encode(self, inputs: Sequence[np.ndarray]) -> Embeddings:
        floats, values = [], []
        for start in range(0, len(inputs), ENCODE_CHUNK):
            chunk = inputs[start : start + ENCODE_CHUNK]
            waves = torch.stack([fit_to_window(torch.from_numpy(np.require(w, np.float32, ["W"])), self.window) for w in chunk])
            emb, code_values = self.embed_tensor(waves)
            floats.append(emb.float().cpu().numpy())
            values.append(code_values.float().cpu().numpy())
        if not floats:
            return Embeddings(np.zeros((0, self.dim), np.float32), np.zeros((0, self.bits // 8), np.uint8))
        return Embeddings(floats=l2_normalise(np.concatenate(floats)), codes=sign_codes(np.concatenate(values)))


def load_trained(
    directory: Path, config: dict[str, Any], family: str, build_net: Callable[[dict[str, Any]], torch.nn.Module]
) -> TrainedAudioEncoder:
    """Rebuild a trained encoder from its checkpoint directory, refusing any mismatch."""
    state, stored = load_checkpoint(directory)
    config = {**stored, **config} if config else stored
    features, net = build_parts(config, family, build_net)
    load_state_strict(net, state, str(directory))
    return TrainedAudioEncoder(config, features, net)
