"""``attn-hash`` family (paper 004): log-mel frames -> BLSTM -> self-attentive pooling -> tanh hash.

Floats are the L2-normalised hash-layer output f(x) (cosine ranking, as the paper's real-valued
search), bits are sign(f(x)) (Hamming search).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.encoders.audio._trained_audio import TrainedAudioEncoder, load_trained
from app.encoders.audio.audio_nets import AttnHashNet

FAMILY = "attn-hash"


def build_net(arch: dict[str, Any]) -> AttnHashNet:
    """The network a config's ``arch`` describes (``n_in``, ``hidden``, ``layers``, ``d_a``, ``heads``, ``bits``...)."""
    return AttnHashNet(**arch)


def load(directory: Path, config: dict[str, Any]) -> TrainedAudioEncoder:
    """Registry entry point: the encoder stored in ``directory``."""
    return load_trained(Path(directory), config, FAMILY, build_net)
