"""The CPU-vs-GPU comparison in bench/encoders/device_parity.py, checked by hand on CPU (the suite never needs a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.encoders.base import Embeddings, l2_normalise, sign_codes
from bench.encoders import device_parity


def _embeddings(floats: np.ndarray) -> Embeddings:
    return Embeddings(floats=l2_normalise(floats), codes=sign_codes(floats))


def test_identical_outputs_compare_as_identical() -> None:
    floats = np.random.default_rng(0).standard_normal((20, 64)).astype(np.float32)
    out = device_parity.compare(_embeddings(floats), _embeddings(floats))
    assert out["max_abs_diff"] == 0.0 and out["bits_differing"] == 0.0
    assert out["windows_with_any_bit_differing"] == 0.0 and out["same_top10_lists"] == 1.0
    assert out["min_cosine"] == pytest.approx(1.0)


def test_one_flipped_coordinate_is_counted_exactly() -> None:
    floats = np.random.default_rng(1).standard_normal((20, 64)).astype(np.float32)
    moved = floats.copy()
    moved[3, 5] = -moved[3, 5]  # one coordinate changes sign: one bit of one window
    a, b = _embeddings(floats), _embeddings(moved)
    out = device_parity.compare(a, b)
    assert out["bits_differing"] == pytest.approx(1 / (20 * 64))
    assert out["windows_with_any_bit_differing"] == pytest.approx(1 / 20)
    assert out["max_abs_diff"] == pytest.approx(float(np.abs(a.floats - b.floats).max()))
    unit = a.floats[3] / np.linalg.norm(a.floats[3])
    assert out["min_cosine"] == pytest.approx(float(unit @ (b.floats[3] / np.linalg.norm(b.floats[3]))), abs=1e-6)


def test_top10_lists_follow_cosine_ranking() -> None:
    floats = np.eye(12, dtype=np.float32) + 0.01
    floats[1] = floats[0] + 0.001  # row 1 is row 0's nearest neighbour
    top = device_parity._top10(floats.astype(np.float64))
    assert top.shape == (12, 10) and top[0, 0] == 1 and top[1, 0] == 0
    assert all(i not in row for i, row in enumerate(top))  # a query never lists itself


def test_inputs_are_seeded_and_sized() -> None:
    a = device_parity.audio_inputs(8000, 0.5, 6, seed=3)
    assert [len(x) for x in a] == [4000] * 6 and all(x.dtype == np.float32 for x in a)
    np.testing.assert_array_equal(a[2], device_parity.audio_inputs(8000, 0.5, 6, seed=3)[2])
    images = device_parity.image_inputs(2)
    assert images[0].shape == (240, 320, 3) and images[0].dtype == np.uint8


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message printed where there is no GPU")
def test_without_a_gpu_it_says_so_and_exits_2(capsys: pytest.CaptureFixture, tmp_path) -> None:
    assert device_parity.main(["--out", str(tmp_path / "x.json")]) == 2
    assert "no CUDA device" in capsys.readouterr().out
    assert not (tmp_path / "x.json").exists()


def test_demo_clips_are_the_shipped_words_and_sounds_in_the_services_windows() -> None:
    """Every demo file, decoded by the service's own decoder and cut by its windowing, in order."""
    from app.features.windows import cut_windows
    from app.media.audio import decode_audio
    from app.usecases.demo_data import DEMO_DIR, SOUNDS, WORDS

    rate, window_s, hop_s = 8000, 1.0, 0.5
    expected = [w for folder in (WORDS, SOUNDS) for path in sorted((DEMO_DIR / folder).iterdir())
                for w in cut_windows(decode_audio(path.read_bytes(), target_rate=rate, filename=path.name), rate, window_s, hop_s)[0]]
    windows = device_parity.demo_audio_inputs(rate, window_s, hop_s)
    assert len(windows) == len(expected) > 100
    assert all(w.dtype == np.float32 and 0 < w.size <= rate for w in windows)
    for got, want in zip(windows, expected):
        np.testing.assert_allclose(got, want, atol=1e-5)
