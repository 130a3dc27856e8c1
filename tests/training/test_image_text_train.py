"""Training: the losses learn a toy caption -> image mapping; a tiny run writes a loadable checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from app.encoders import registry
from app.encoders.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from app.encoders.image_text.image_text import build, load
from app.encoders.image_text.model import ImageTextModel, head_loss, ranking_loss, to_tensor
from app.encoders.image_text.text_features import TfidfFeatures
from app.training.image_text.train import TrainConfig, train
from app.training.synthesis.images import COLOURS

TOY_COLOURS = ["red", "green", "blue", "yellow", "purple", "white"]


def _squares(rng: np.random.Generator, colours: list[str], size: int = 48) -> np.ndarray:
    """A coloured square at a random place on a grey noisy background, one per colour."""
    images = np.clip(rng.normal(110, 25, size=(len(colours), size, size, 3)), 0, 255)
    for k, colour in enumerate(colours):
        y, x = rng.integers(0, size - 20, size=2)
        images[k, y:y + 20, x:x + 20] = COLOURS[colour]
    return images.astype(np.uint8)


def test_tiny_model_learns_colour_words_to_coloured_squares() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    captions = [f"a {c} square" for c in TOY_COLOURS]
    features = TfidfFeatures.fit(captions)
    text_vectors = torch.as_tensor(features(captions))
    # the tower pools globally, so small 48x48 inputs keep this test to a few seconds
    model = ImageTextModel(text_dim=features.dim, dim=16, width=8, text_hidden=32, head_hidden=16)
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    labels = torch.eye(len(TOY_COLOURS))
    for _ in range(120):
        image_emb = model.image_tower(to_tensor(_squares(rng, TOY_COLOURS)))
        text_emb = model.text_tower(text_vectors)
        loss = ranking_loss(image_emb, text_emb, model.logit_scale) + head_loss(model.head, image_emb, text_emb, labels)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    with torch.no_grad():
        shuffled = list(rng.permutation(TOY_COLOURS))
        image_emb = model.image_tower(to_tensor(_squares(rng, shuffled)))  # fresh images, new positions
        text_emb = model.text_tower(text_vectors)
        stage1 = (text_emb @ image_emb.T).argmax(dim=1)
        n = len(TOY_COLOURS)
        head = model.head(image_emb.repeat(n, 1), text_emb.repeat_interleave(n, dim=0)).view(n, n).argmax(dim=1)
    expected = torch.tensor([shuffled.index(c) for c in TOY_COLOURS])
    assert torch.equal(stage1, expected)
    assert torch.equal(head, expected)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    config = TrainConfig(name="image-text-tiny", text_features="tfidf", dim=16, width=4, text_hidden=16,
                         head_hidden=8, steps=3, batch_size=8, n_scenes=40, n_val_scenes=10, val_every=3,
                         cache_dir=None, threads=1)
    train(config, out, progress=False)
    return out


def test_tiny_run_writes_a_checkpoint_the_registry_lists(tiny_checkpoint) -> None:
    specs = registry.discover(extra_dirs=[tiny_checkpoint.parent])
    assert specs["image-text-tiny"].modality == "image"
    encoder = registry.create_encoder("image-text-tiny", specs)
    assert (encoder.dim, encoder.bits, encoder.supports_text, encoder.supports_rerank) == (16, 16, True, True)
    metrics = json.loads((tiny_checkpoint / "metrics.json").read_text())
    assert metrics["history"][-1]["step"] == 3


def test_checkpoint_round_trip_gives_identical_embeddings(tiny_checkpoint, tmp_path) -> None:
    first = load(tiny_checkpoint, {})
    state, config = load_checkpoint(tiny_checkpoint)
    save_checkpoint(tmp_path / "copy", state, config)
    second = load(tmp_path / "copy", {})
    images = [np.random.default_rng(1).integers(0, 256, size=(90, 120, 3), dtype=np.uint8)]
    texts = ["a red circle on the left", "two blue stars"]
    a, b = first.encode(images), second.encode(images)
    np.testing.assert_array_equal(a.floats, b.floats)
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(first.encode_text(texts).floats, second.encode_text(texts).floats)
    np.testing.assert_array_equal(first.rerank(texts[0], a.floats), second.rerank(texts[0], b.floats))


def test_mismatched_config_is_refused(tiny_checkpoint) -> None:
    state, config = load_checkpoint(tiny_checkpoint)
    wider = {**config, "architecture": {**config["architecture"], "width": 8}}
    with pytest.raises(CheckpointError, match="do not match"):
        build(state, wider, "test")
    with pytest.raises(CheckpointError, match="family"):
        build(state, {**config, "family": "siamese-mlp"}, "test")
    fewer_words = {**config, "text_features": {**config["text_features"],
                                               "vocabulary": config["text_features"]["vocabulary"][:-1],
                                               "idf": config["text_features"]["idf"][:-1]}}
    with pytest.raises(CheckpointError, match="text features"):
        build(state, fewer_words, "test")


def test_query_cache_is_bounded_and_returns_the_computed_vectors(tiny_checkpoint) -> None:
    cached, fresh = load(tiny_checkpoint, {}), load(tiny_checkpoint, {})
    cached._text_cache_size = 2
    texts = ["a red circle", "two blue stars", "a green square"]
    first = cached.encode_text(texts).floats
    assert len(cached._text_cache) == 2  # the oldest was dropped
    again = cached.encode_text(texts[::-1]).floats[::-1]  # two from the cache, one recomputed
    np.testing.assert_allclose(again, first, atol=1e-6)
    np.testing.assert_allclose(fresh.encode_text(texts).floats, first, atol=1e-6)


def test_stop_step_ends_early_but_keeps_the_schedule(tmp_path) -> None:
    config = TrainConfig(name="image-text-stop", text_features="tfidf", dim=8, width=4, text_hidden=8, head_hidden=8,
                         steps=50, stop_step=2, batch_size=4, n_scenes=12, n_val_scenes=4, val_every=25,
                         cache_dir=None, threads=1)
    _, checkpoint_config, metrics = train(config, None, progress=False)
    assert metrics["steps_done"] == 2 and metrics["history"][-1]["step"] == 2
    assert checkpoint_config["train"]["steps"] == 50
