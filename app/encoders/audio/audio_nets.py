"""The two trained audio networks: paper 000's Siamese MLP and paper 004's attention hashing net.

Both take a batch of feature frames (B, frames, bins) and carry their own input normalisation
(per-bin mean and std measured on the training set) as buffers, so the safetensors file alone
reproduces the embeddings. ``embed`` returns the float embedding and the values whose sign is the
binary code.
"""

from __future__ import annotations

import torch
from torch import nn


class SiameseMLP(nn.Module):
    """One branch of paper 000's Siamese network: concatenated frames -> 512-256-128, ReLU, dropout.

    The paper's output layer is also ReLU, so embeddings are non-negative; their signs would be
    almost all 1. Codes therefore take the sign after subtracting ``code_mean``, the mean training
    embedding, which the trainer stores after training.
    """

    def __init__(
        self, n_in: int, hidden: tuple[int, ...] | list[int] = (512, 256, 128), dropout: float = 0.3, output_relu: bool = True
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = n_in
        for i, size in enumerate(hidden):
            layers.append(nn.Linear(width, size))
            if i < len(hidden) - 1 or output_relu:
                layers.append(nn.ReLU())
            if i < len(hidden) - 1:  # "dropout ... between all three layers"
                layers.append(nn.Dropout(dropout))
            width = size
        self.mlp = nn.Sequential(*layers)
        self.n_in = n_in
        self.dim = width
        self.register_buffer("input_mean", torch.zeros(n_in))
        self.register_buffer("input_std", torch.ones(n_in))
        self.register_buffer("code_mean", torch.zeros(width))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """(B, frames, bins) -> (B, dim) raw embedding (the paper's G_W(X))."""
        x = feats.reshape(feats.shape[0], -1)
        if x.shape[1] != self.n_in:
            raise ValueError(f"expected {self.n_in} concatenated features, got {x.shape[1]}")
        return self.mlp((x - self.input_mean) / self.input_std)

    def embed(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        emb = self(feats)
        return emb, emb - self.code_mean


class AttnHashNet(nn.Module):
    """Paper 004: 2-layer BLSTM -> multi-head self-attentive pooling -> tanh hashing layer.

    ``A = softmax(W2 tanh(W1 H^T))`` over time with ``W1`` (d_a x D) and ``W2`` (heads x d_a), no
    biases, as in the paper's equation (1); the ``heads`` summary vectors are concatenated and
    ``f(x) = tanh(W e + b)`` gives ``bits`` hash values whose sign is the code.

    ``hash_norm`` (our addition) batch-normalises ``W e + b`` without affine parameters and scales
    it by ``hash_scale`` before the tanh. Without it, the quantisation loss saturated every unit
    to the same sign for every input within an epoch on our data (all codes equal, triplet loss
    stuck at its margin); centred pre-activations keep each bit balanced across inputs, and the
    scale lets tanh reach +-1 so the quantisation loss can still be driven to zero.
    """

    def __init__(
        self,
        n_in: int,
        hidden: int = 128,
        layers: int = 2,
        dropout: float = 0.4,
        d_a: int = 64,
        heads: int = 5,
        bits: int = 256,
        hash_norm: bool = False,
        hash_scale: float = 3.0,
    ) -> None:
        super().__init__()
        self.blstm = nn.LSTM(
            n_in, hidden, num_layers=layers, batch_first=True, bidirectional=True, dropout=dropout if layers > 1 else 0.0
        )
        self.out_dropout = nn.Dropout(dropout)  # torch applies LSTM dropout between layers only
        self.w1 = nn.Linear(2 * hidden, d_a, bias=False)
        self.w2 = nn.Linear(d_a, heads, bias=False)
        self.hash = nn.Linear(heads * 2 * hidden, bits)
        self.hash_norm = nn.BatchNorm1d(bits, affine=False) if hash_norm else None
        self.hash_scale = hash_scale
        self.n_in = n_in
        self.dim = bits
        self.register_buffer("input_mean", torch.zeros(n_in))
        self.register_buffer("input_std", torch.ones(n_in))

    def forward(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L, n_in) -> hash values f(x) (B, bits) in (-1, 1) and attention A (B, heads, L)."""
        if feats.shape[-1] != self.n_in:
            raise ValueError(f"expected {self.n_in} feature bins, got {feats.shape[-1]}")
        h, _ = self.blstm((feats - self.input_mean) / self.input_std)
        h = self.out_dropout(h)  # (B, L, D)
        attention = torch.softmax(self.w2(torch.tanh(self.w1(h))).transpose(1, 2), dim=-1)  # (B, R, L)
        summary = attention @ h  # (B, R, D): s_i = sum_t A_it h_t
        z = self.hash(summary.flatten(1))
        if self.hash_norm is not None:
            z = self.hash_scale * self.hash_norm(z)
        return torch.tanh(z), attention

    def embed(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, _ = self(feats)
        return values, values


def fit_to_window(wave: torch.Tensor, length: int) -> torch.Tensor:
    """Centre a waveform in a window of ``length`` samples.

    Shorter input is zero-padded on both sides (paper 004 pads a query "on both sides to the same
    length as the analysis window"); longer input keeps its centre ``length`` samples, because the
    networks were trained on one window length and the MLP cannot take any other.
    """
    n = wave.shape[-1]
    if n == length:
        return wave
    if n < length:
        left = (length - n) // 2
        return nn.functional.pad(wave, (left, length - n - left))
    start = (n - length) // 2
    return wave[..., start : start + length]
