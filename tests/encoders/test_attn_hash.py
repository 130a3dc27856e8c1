"""attn-hash encoder: shapes, padding, FAISS bit order, checkpoint round trip and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch

from app.encoders.audio import attn_hash
from app.encoders.base import check_embeddings
from app.encoders.checkpoint import CheckpointError, save_checkpoint
from app.training.audio.train import TrainConfig, build_model, model_config


def _tiny_config(bits: int = 32) -> dict:
    cfg = TrainConfig(manifest="unused.csv", model="attn-hash", out="unused", name="tiny-attn", bits=bits,
                      sample_rate=8000, window_s=0.5, hop_s=0.25, hidden=8, heads=2, d_a=6)
    return model_config(cfg)


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, torch.nn.Module, dict]:
    torch.manual_seed(0)
    config = _tiny_config()
    _, net = build_model(config)
    save_checkpoint(tmp_path / "tiny", net.state_dict(), config, {"val_map": 0.0})
    return tmp_path / "tiny", net, config


def _waves(n: int, length: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(length)).astype(np.float32) for _ in range(n)]


def test_attention_rows_are_distributions_and_hash_values_in_range() -> None:
    config = _tiny_config()
    features, net = build_model(config)
    net.eval()
    values, attention = net(features(torch.randn(3, 4000)))
    assert values.shape == (3, 32) and attention.shape[:2] == (3, 2)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 2))
    assert values.abs().max() < 1


def test_save_load_gives_identical_embeddings(saved) -> None:
    directory, net, config = saved
    encoder = attn_hash.load(directory, json.loads((directory / "config.json").read_text()))
    waves = _waves(5, 4000)
    emb = check_embeddings(encoder.encode(waves), n=5, dim=32, bits=32)
    # the network we saved, run directly: same floats (before normalising) and same signs
    features, _ = build_model(_tiny_config())
    net.eval()
    with torch.no_grad():
        values, _ = net(features(torch.from_numpy(np.stack(waves))))
    direct = values.numpy() / np.linalg.norm(values.numpy(), axis=1, keepdims=True)
    np.testing.assert_array_equal(emb.floats, direct.astype(np.float32))
    np.testing.assert_array_equal(emb.codes, np.packbits(values.numpy() > 0, axis=1, bitorder="little"))
    again = attn_hash.load(directory, {}).encode(waves)
    np.testing.assert_array_equal(again.floats, emb.floats)
    np.testing.assert_array_equal(again.codes, emb.codes)


def test_short_query_is_zero_padded_on_both_sides(saved) -> None:
    directory, _, _ = saved
    encoder = attn_hash.load(directory, {})
    short = _waves(1, 1000)[0]
    padded = np.zeros(4000, np.float32)
    padded[1500:2500] = short
    a, b = encoder.encode([short]), encoder.encode([padded])
    np.testing.assert_array_equal(a.floats, b.floats)
    np.testing.assert_array_equal(a.codes, b.codes)


def test_codes_are_in_faiss_bit_order(saved) -> None:
    directory, _, _ = saved
    emb = attn_hash.load(directory, {}).encode(_waves(6, 4000, seed=3))
    index = faiss.IndexBinaryFlat(32)
    index.add(emb.codes)
    distances, ids = index.search(emb.codes[:1], 6)
    # brute force: bits unpacked the way FAISS reads them (least significant bit first)
    bits = np.unpackbits(emb.codes, axis=1, bitorder="little")
    expected = (bits != bits[0]).sum(axis=1)
    np.testing.assert_array_equal(np.sort(expected), distances[0])
    np.testing.assert_array_equal(expected[ids[0]], distances[0])


def test_weights_that_do_not_fit_the_config_are_refused(saved) -> None:
    directory, _, config = saved
    wrong = json.loads((directory / "config.json").read_text())
    wrong["arch"]["hidden"] = 16
    (directory / "config.json").write_text(json.dumps(wrong))
    with pytest.raises(CheckpointError, match="do not match"):
        attn_hash.load(directory, wrong)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.pop("window_s"), "lacks"),
        (lambda c: c.update(family="siamese-mlp"), "this loader reads"),
        (lambda c: c["features"].update(n_mels=20), "feature bins|network takes"),
        (lambda c: c["arch"].update(colour="red"), "does not fit the code"),
        (lambda c: c.update(bits=12), "multiple of 8"),
    ],
)
def test_mismatched_configs_are_refused_with_a_clear_error(saved, change, message) -> None:
    directory, _, _ = saved
    config = json.loads((directory / "config.json").read_text())
    change(config)
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        attn_hash.load(directory, config)
