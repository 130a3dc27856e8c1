"""`recall train general-audio --views-from`: fits the speech views on training-side clips only and writes a
checkpoint that loads strictly, on a tiny synthetic data folder (no ../shared needed)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.encoders.checkpoint import CheckpointError, load_checkpoint, read_config
from app.encoders.registry import load_checkpoint_dir
from app.encoders.audio.levin_mfcc import downsampled_mfcc
from app.encoders.audio.speech_views import PREFIX, fit_standardisation, fit_whitening
from app.training.general_audio.recipe import main as general_audio_main
from app.training.general_audio.speech_views_fit import fit_paths, window_batches
from tests.encoders.test_routed_fusion import fused_dir  # noqa: F401 (fixture)

ASC = [("a1.wav", "open", "00000013"), ("a2.wav", "up", "00000015"), ("a3.wav", "open", "00000029"),
       ("held.wav", "open", "00000001")]
FSDD = [("f1.wav", "0", "george"), ("f2.wav", "3", "lucas"), ("f3.wav", "2", "george"), ("f4.wav", "1", "jackson")]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    for corpus, rows, header in (("asc", ASC, ("file", "keyword", "speaker")), ("fsdd", FSDD, ("file", "digit", "speaker"))):
        (root / corpus).mkdir()
        with (root / corpus / f"{corpus}.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for i, row in enumerate(rows):
                t = np.arange(int(16000 * (0.8 + 0.3 * i))) / 16000
                wave = 0.3 * np.sin(2 * np.pi * (150 + 40 * i) * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
                sf.write(root / corpus / row[0], (wave + 0.01 * rng.standard_normal(len(t))).astype(np.float32), 16000)
                writer.writerow(row)
    return root


def test_only_training_side_clips_are_used(data: Path) -> None:
    names = sorted(p.name for p in fit_paths(data, {"split": {"val": ["00000029"]}}, seed=0))
    # held-out ASC speaker, the validation speaker, held-out FSDD speaker and held-out digit word all left out
    assert names == ["a1.wav", "a2.wav", "f1.wav", "f2.wav"]


def test_cli_fits_views_and_writes_a_strict_checkpoint(data: Path, fused_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "v3"
    argv = ["--data", str(data), "--views-from", str(fused_dir), "--whiten-eps", "0.3", "--mfcc-bits", "16",
            "--out", str(out), "--version", "3"]
    assert general_audio_main(argv) == 0
    config = read_config(out)
    assert config["version"] == "3" and config["speech_views"]["mfcc_bits"] == 16
    assert config["speech_views"]["from"]["version"] == read_config(fused_dir)["version"]
    assert config["reproduce"]["train"].startswith("recall train general-audio --data")
    assert config["description"].endswith("the speech float whitened and a downsampled-MFCC view with 16 bits")
    encoder = load_checkpoint_dir(out)
    assert encoder.bits == load_checkpoint_dir(fused_dir).bits and encoder.views.mfcc_bits == 16
    # the router is the source's, the views' statistics are those of the training windows, by hand
    state, _ = load_checkpoint(out)
    source_state, _ = load_checkpoint(fused_dir)
    for key, value in source_state.items():
        assert torch.equal(state[key], value)
    source = load_checkpoint_dir(fused_dir)
    clips = [sf.read(p, dtype="float32")[0] for p in fit_paths(data, read_config(fused_dir / "speech"), 0)]
    floats, raw = [], []
    for waves in window_batches(clips, 16000, 1.0, 0.5, 16000):
        floats.append(source.speech.embed_tensor(source._speech_waves(waves))[0].numpy())
        raw.append(downsampled_mfcc(torch.from_numpy(waves)).numpy())
    mean, mapping = fit_whitening(np.concatenate(floats), 0.3)
    np.testing.assert_allclose(state[PREFIX + "white_mean"].numpy(), mean, atol=1e-5)
    got = state[PREFIX + "white_map"].numpy().astype(np.float64)
    # W W^T = V diag(1 / floored lambda) V^T: unique even where eigenvalues repeat (few windows here)
    np.testing.assert_allclose(got @ got.T, mapping.astype(np.float64) @ mapping.T, rtol=1e-3, atol=1e-3)
    mu, sd = fit_standardisation(np.concatenate(raw))
    np.testing.assert_allclose(state[PREFIX + "mfcc_mean"].numpy(), mu, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state[PREFIX + "mfcc_scale"].numpy(), sd, rtol=1e-4, atol=1e-4)
    assert encoder.encode([clips[0][:16000]]).codes.shape == (1, encoder.bits // 8)

    with pytest.raises(CheckpointError, match="without speech views"):  # views on top of views
        general_audio_main(["--data", str(data), "--views-from", str(out), "--mfcc-bits", "8",
                            "--out", str(tmp_path / "again")])


def test_cli_refuses_nothing_to_fit_and_writing_over_its_source(data: Path, fused_dir: Path) -> None:  # noqa: F811
    with pytest.raises(SystemExit, match="--whiten-eps"):
        general_audio_main(["--data", str(data), "--views-from", str(fused_dir), "--out", "unused"])
    with pytest.raises(SystemExit, match="must differ"):
        general_audio_main(["--data", str(data), "--views-from", str(fused_dir), "--mfcc-bits", "8", "--out", str(fused_dir)])


@pytest.mark.parametrize("without, expected", [("fsdd", ["a1.wav", "a2.wav"]), ("asc", ["f1.wav", "f2.wav"])])
def test_a_left_out_corpus_stays_out_of_the_views(data: Path, without: str, expected: list[str]) -> None:
    names = sorted(p.name for p in fit_paths(data, {"split": {"val": ["00000029"]}}, seed=0, without=without))
    assert names == expected


def test_cli_fits_a_loco_source_without_its_corpus(data: Path, fused_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    import json
    import shutil

    source = tmp_path / "loco-fsdd"
    shutil.copytree(fused_dir, source)
    config = json.loads((source / "config.json").read_text())
    config["without"] = "fsdd"  # as `recall train general-audio --without fsdd` records it
    (source / "config.json").write_text(json.dumps(config))
    out = tmp_path / "loco-fsdd-views"
    assert general_audio_main(["--data", str(data), "--views-from", str(source), "--whiten-eps", "0.3",
                               "--out", str(out)]) == 0
    written = read_config(out)
    assert written["without"] == "fsdd" and "FSDD" not in written["speech_views"]["fitted_on"]
    # the whitening mean is that of the ASC training clips' windows alone (no FSDD clip in it)
    encoder = load_checkpoint_dir(source)
    paths = fit_paths(data, read_config(source / "speech"), 0, without="fsdd")
    assert paths and all(p.parent.name == "asc" for p in paths)
    asc_clips = [sf.read(p, dtype="float32")[0] for p in paths]
    floats = np.concatenate([encoder.speech.embed_tensor(encoder._speech_waves(w))[0].numpy()
                             for w in window_batches(asc_clips, 16000, 1.0, 0.5, 16000)])
    state, _ = load_checkpoint(out)
    np.testing.assert_allclose(state[PREFIX + "white_mean"].numpy(), floats.mean(axis=0), atol=1e-5)
    assert written["speech_views"]["fitted_on"].startswith(f"{len(floats)} unlabelled")
