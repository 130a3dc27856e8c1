"""``recall train general-audio --head-seeds N``: N speech heads, validated alike, the best by validation MAP kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.training.general_audio import recipe as general_audio
from app.training.general_audio.head_seeds import best_of_seeds
from tests.training.test_frontend_recipe import COMMERCIAL, TINY_HEAD, tiny_recipe  # noqa: F401 (a fixture)
from tests.training.tiny_corpora import SMALL_SYNTH, files


def _fake_heads(work: Path, scores: dict[int, float], trained: list[int]):
    def train(out: Path, seed: int) -> Path:
        trained.append(seed)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps({"val_map": scores[seed]}))
        return out
    return train


def test_the_best_validation_map_is_kept_and_a_tie_goes_to_the_lower_seed(tmp_path: Path) -> None:
    trained: list[int] = []
    chosen = best_of_seeds(tmp_path, 3, 3, _fake_heads(tmp_path, {3: 0.90, 4: 0.95, 5: 0.95}, trained))
    assert trained == [3, 4, 5] and chosen == tmp_path / "speech-frontend-seed4"
    record = json.loads((tmp_path / "head-seeds.json").read_text())
    assert record == {"validation_split_seed": 3, "val_map": {"3": 0.90, "4": 0.95, "5": 0.95}, "chosen": 4}


def _one_command(data: Path, work: Path, out: Path, *extra: str) -> list[str]:
    argv = ["--data", str(data), "--work", str(work), "--speech-frontend", "speech-embedding:0.4", *TINY_HEAD,
            *COMMERCIAL, "--frontend-bits", "128", *SMALL_SYNTH, "--out", str(out), *extra]
    assert general_audio.main(argv) == 0
    return argv


@pytest.mark.system("espeak-ng")
def test_the_one_command_keeps_the_best_of_its_seeds_and_says_so(data: Path, tmp_path: Path,
                                                                 tiny_recipe: None) -> None:  # noqa: F811
    work, out = tmp_path / "work", tmp_path / "out"
    _one_command(data, work, out, "--head-seeds", "2")
    record = json.loads((work / "head-seeds.json").read_text())
    scores = {int(s): v for s, v in record["val_map"].items()}
    assert sorted(scores) == [0, 1] and record["chosen"] == max(scores, key=lambda s: (scores[s], -s))
    config = json.loads((out / "config.json").read_text())
    assert config["head_seeds"] == record
    chosen = work / f"speech-frontend-seed{record['chosen']}"
    assert files(out / "speech")["weights.safetensors"] == files(chosen)["weights.safetensors"]
    for seed in (0, 1):  # each head says how to train it again: its own seed, the first seed's validation speakers
        command = json.loads((work / f"speech-frontend-seed{seed}" / "config.json").read_text())["training"]["command"]
        assert f"--seed {seed} " in command and command.endswith("--split-seed 0")
        assert json.loads((work / f"speech-frontend-seed{seed}" / "config.json").read_text())["split"]["val"] == \
            json.loads((work / "speech-frontend-seed0" / "config.json").read_text())["split"]["val"]
    assert config["reproduce"]["steps"][0]["train"].endswith("--split-seed 0")

    # seed 0's head is the one-seed recipe's head: --split-seed 0 is seed 0's own draw
    _one_command(data, tmp_path / "work1", tmp_path / "out1")
    assert files(work / "speech-frontend-seed0")["weights.safetensors"] == \
        files(tmp_path / "work1" / "speech-frontend")["weights.safetensors"]
    assert "head_seeds" not in json.loads((tmp_path / "out1" / "config.json").read_text())


@pytest.mark.parametrize("count", ["0", "-1", "two"])
def test_a_count_under_one_is_refused_in_one_line(data: Path, tmp_path: Path, count: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        general_audio.main(["--data", str(data), "--speech-frontend", "speech-embedding:0.4", "--head-seeds", count,
                            "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2 and "--head-seeds" in capsys.readouterr().err
