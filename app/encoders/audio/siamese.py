"""``siamese-mlp`` family (paper 000): log-spectrogram frames concatenated -> MLP 512-256-128.

Floats are the L2-normalised branch output (cosine ranking; on unit vectors euclidean ranks the
same), bits are the signs of the output minus the training mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.encoders.audio._trained_audio import TrainedAudioEncoder, load_trained
from app.encoders.audio.audio_nets import SiameseMLP

FAMILY = "siamese-mlp"


def build_net(arch: dict[str, Any]) -> SiameseMLP:
    """The network a config's ``arch`` describes (``n_in``, ``hidden``, ``dropout``, ``output_relu``)."""
    arch = dict(arch)
    if "hidden" in arch:
        arch["hidden"] = tuple(arch["hidden"])
    return SiameseMLP(**arch)


def load(directory: Path, config: dict[str, Any]) -> TrainedAudioEncoder:
    """Registry entry point: the encoder stored in ``directory``."""
    return load_trained(Path(directory), config, FAMILY, build_net)
