"""bench/audio/routing.py: the share of windows a router sends to the speech half, checked against the
code the encoder actually writes (the tiny routed-fusion checkpoint of tests/encoders, a tiny data folder)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.encoders.registry import load_checkpoint_dir
from app.training.synthesis.non_speech import VARIED_KINDS
from bench.audio.routing import generated_sets, main, speech_share
from tests.bench.test_audio_loco import data  # noqa: F401 (fixture)
from tests.encoders.test_routed_fusion import fused_dir  # noqa: F401 (fixture)


def _speech_half_used(encoder, windows: list[np.ndarray]) -> np.ndarray:
    """Which windows the encoder's code embeds in the speech half (any bit set there)."""
    bits = np.unpackbits(encoder.encode(windows).codes, axis=1, bitorder="little")
    return bits[:, : encoder.speech.bits].any(axis=1)


def test_speech_probability_is_the_routing_the_code_uses(fused_dir: Path) -> None:  # noqa: F811
    encoder = load_checkpoint_dir(fused_dir)  # its router says "speech" for loud windows
    rng = np.random.default_rng(0)
    windows = [(scale * rng.standard_normal(16000)).astype(np.float32) for scale in (0.001, 0.5, 0.002, 0.4, 0.3)]
    windows.append((0.5 * rng.standard_normal(9000)).astype(np.float32))  # shorter: fitted to the window like encode
    p = encoder.speech_probability(windows)
    assert p.shape == (6,) and ((p[:5] >= 0.5) == np.array([False, True, False, True, True])).all()
    np.testing.assert_array_equal(p >= 0.5, _speech_half_used(encoder, windows))  # the padded one too
    assert speech_share(encoder, windows) == pytest.approx(float((p >= 0.5).mean()))
    assert np.isnan(speech_share(encoder, []))


def test_generated_sets_are_fresh_draws_of_every_kind() -> None:
    sets = generated_sets(per_kind=3, seed=7)
    assert len(sets) == 1 + len(VARIED_KINDS) and len(sets["generated: silence, noise, tones"]) == 12
    assert all(len(w) == 3 for name, w in sets.items() if name != "generated: silence, noise, tones")
    assert "generated: click train" in sets
    again = generated_sets(per_kind=3, seed=7)["generated: siren"]
    assert all(np.array_equal(a, b) for a, b in zip(sets["generated: siren"], again))


def test_the_bench_writes_each_systems_shares(data: Path, fused_dir: Path, tmp_path: Path,  # noqa: F811
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.audio.routing as routing

    monkeypatch.setattr(routing, "PER_KIND", 2)
    out = tmp_path / "out"
    assert main(["--data", str(data), "--encoders", str(fused_dir), "--loco", f"fsdd:tagged={fused_dir}", "--out", str(out)]) == 0
    report = json.loads((out / "routing.json").read_text())
    assert set(report["speech_share"]) == {str(fused_dir), "loco: without fsdd (tagged)"}
    shares = report["speech_share"][str(fused_dir)]
    assert report["windows"]["generated: siren"] == 2 and report["windows"]["fsdd_unseen_speakers"] > 0
    assert all(0.0 <= v <= 1.0 for name, v in shares.items() if report["windows"][name])
    assert shares == report["speech_share"]["loco: without fsdd (tagged)"]  # the same checkpoint twice
    md = (out / "routing.md").read_text()
    assert "| fsdd_unseen_speakers |" in md and "loco: without fsdd (tagged)" in md
