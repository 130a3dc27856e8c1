"""--extra-manifest (training split only, single-clip labels as negatives)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.training.audio import cli as audio_cli
from app.training.audio.data import Record, split_records, with_extra_training
from app.training.audio.train import TrainConfig, Trainer
from app.training.audio.samplers import LabelIndex, pair_batch, triplet_batch

RATE = 8000


def _write_tones(root: Path, tones: dict[str, float], speakers: list[str], takes: int) -> Path:
    """A manifest of short tones: one label per frequency, each speaker with its own level and vibrato."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(tones))
    t = np.arange(int(0.2 * RATE)) / RATE
    rows = []
    for s, speaker in enumerate(speakers):
        for label, freq in tones.items():
            for take in range(takes):
                wave = (0.1 + 0.1 * s) * np.sin(2 * np.pi * freq * (1 + 0.03 * np.sin(2 * np.pi * (3 + s) * t)) * t)
                path = root / f"{label.replace(':', '_')}-{speaker}-{take}.wav"
                sf.write(path, (wave + 0.02 * rng.standard_normal(t.size)).astype(np.float32), RATE)
                rows.append({"path": path.name, "label": label, "speaker": speaker})
    with (root / "manifest.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "speaker"])
        writer.writeheader()
        writer.writerows(rows)
    return root / "manifest.csv"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("extra")
    main = _write_tones(root / "main", {"low": 300.0, "mid": 900.0, "high": 2400.0}, ["s0", "s1", "s2", "s3"], 2)
    extra = _write_tones(root / "extra", {"synth:a": 600.0, "synth:b": 1500.0}, ["v0", "v1"], 1)
    # one more label with a single clip: usable only as a negative
    with extra.open("a", newline="") as handle:
        handle.write(f"{next((root / 'extra').glob('synth_a-v0-*.wav')).name},synth:lonely,v9\n")
    return {"main": main, "extra": extra}


def _config(data: dict[str, Path], out: Path, **overrides) -> TrainConfig:
    base = dict(manifest=str(data["main"]), model="attn-hash", out=str(out), name="tiny-extra", bits=16, holdout=["s3"],
                val_groups=1, sample_rate=RATE, window_s=0.25, hop_s=0.125, hidden=8, heads=2, d_a=6, epochs=1,
                steps_per_epoch=2, batch_size=8, cache_dir=None, threads=1, quant_warmup=0)
    return TrainConfig(**{**base, **overrides})


def test_extra_records_join_training_only() -> None:
    records = [Record(f"{s}-{w}.wav", w, s) for s in "abcde" for w in ("yes", "no") for _ in range(2)]
    splits = split_records(records, "speaker", ["a"], 1, seed=0)
    extra = [Record(f"v{v}-{w}.wav", f"synth:{w}", f"v{v}") for v in range(2) for w in ("cat", "dog")]
    joined = with_extra_training(splits, extra, "speaker", ["a"])
    assert joined.train == splits.train + extra
    assert joined.val == splits.val and joined.test == splits.test  # validation and holdout untouched
    val_speaker = splits.val[0].speaker
    for leak in (Record("x.wav", "synth:cat", val_speaker), Record("y.wav", "synth:cat", "a")):
        with pytest.raises(ValueError, match="validation or held-out"):
            with_extra_training(splits, [leak], "speaker", ["a"])
    # by label: an extra clip of a held-out class is refused too
    three = records + [Record(f"{s}-up.wav", "up", s) for s in "abcde" for _ in range(2)]
    splits = split_records(three, "label", ["up"], 1, seed=0)
    with pytest.raises(ValueError, match="held-out labels"):
        with_extra_training(splits, [Record("z.wav", "up", "v0")], "label", ["up"])


def test_single_clip_labels_are_negatives_only() -> None:
    labels = ["a", "a", "b", "b", "lonely"]
    with pytest.raises(ValueError, match="fewer than two clips"):
        LabelIndex(labels)
    index = LabelIndex(labels, negatives_only={"lonely"})
    rng = np.random.default_rng(0)
    rows = triplet_batch(index, 300, rng)
    assert 4 not in rows[:, 0] and 4 not in rows[:, 1] and 4 in rows[:, 2]
    assert 4 not in pair_batch(index, 300, rng, balanced=False)[:, 0]


def test_tiny_run_with_extra_data_records_it(data: dict[str, Path], tmp_path: Path) -> None:
    plain = Trainer(_config(data, tmp_path / "plain"))
    out = tmp_path / "ck"
    trainer = Trainer(_config(data, out, extra_manifests=[str(data["extra"])]))
    assert trainer.splits.val == plain.splits.val and trainer.splits.test == plain.splits.test
    assert len(trainer.splits.train) == len(plain.splits.train) + 5
    assert trainer.index.singletons == ["synth:lonely"]
    trainer.run()
    config, metrics = (json.loads((out / name).read_text()) for name in ("config.json", "metrics.json"))
    assert config["training"]["extra_manifests"] == [str(data["extra"])]
    assert config["extra_data"] == metrics["extra_data"] == [
        {"path": str(data["extra"]), "clips": 5, "labels": 3, "speakers": 3}]
    assert config["split"]["val"] == sorted({r.speaker for r in plain.splits.val})


def test_the_command_line_refuses_held_out_extra_data_in_one_line(data: dict[str, Path], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    leak = tmp_path / "leak.csv"  # a clip said by the held-out speaker s3, offered as extra training data
    clip = next((data["main"].parent).glob("low-s3-*.wav"))
    leak.write_text(f"path,label,speaker\n{clip},synth:leak,s3\n")
    code = audio_cli.main(["--manifest", str(data["main"]), "--model", "attn-hash", "--bits", "16",
                           "--sample-rate", str(RATE), "--window", "0.25", "--hidden", "8", "--heads", "2",
                           "--d-a", "6", "--holdout", "s3", "--val-groups", "1", "--cache-dir", "",
                           "--extra-manifest", str(leak), "--out", str(tmp_path / "c")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("recall train audio: error:") and "held-out" in err and "Traceback" not in err
