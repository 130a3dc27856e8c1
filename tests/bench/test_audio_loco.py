"""bench/audio/loco.py: leave-one-corpus-out rows measured on their own and merged into the report.

A tiny data folder and the tiny routed-fusion checkpoint of tests/encoders (no ../shared needed)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from bench.audio.generalisation import baseline_system, main as bench_main, score, targets
from bench.audio.loco import best_baseline, parse_loco, run_info
from app.eval.audio_baselines import BASELINES
from tests.encoders.test_routed_fusion import fused_dir  # noqa: F401 (fixture)

CORPORA = ("asc", "esc", "fsdd")
# (file, digit, speaker): jackson and nicolas are the held-out speakers the fsdd sets are made of
FSDD = [("j0a.wav", "0", "jackson"), ("j0b.wav", "0", "jackson"), ("n0.wav", "0", "nicolas"),
        ("j2.wav", "2", "jackson"), ("n2a.wav", "2", "nicolas"), ("n2b.wav", "2", "nicolas"),
        ("g1.wav", "1", "george")]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    for corpus, name, header in (("asc", "asc.csv", ("file", "keyword", "speaker")),
                                 ("esc50", "esc50.csv", ("filename", "category"))):
        (root / corpus).mkdir()
        with (root / corpus / name).open("w", newline="") as handle:
            csv.writer(handle).writerow(header)
    (root / "fsdd").mkdir()
    rng = np.random.default_rng(0)
    with (root / "fsdd" / "fsdd.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("file", "digit", "speaker"))
        for i, row in enumerate(FSDD):
            t = np.arange(int(8000 * (0.6 + 0.1 * i))) / 8000
            pitch = 180 if row[1] == "0" else 520  # the two "words" differ clearly
            wave = 0.3 * np.sin(2 * np.pi * pitch * t) + 0.01 * rng.standard_normal(len(t))
            sf.write(root / "fsdd" / row[0], wave.astype(np.float32), 8000)
            writer.writerow(row)
    return root


@pytest.fixture()
def loco_dir(fused_dir: Path, tmp_path: Path) -> Path:  # noqa: F811
    directory = tmp_path / "loco-fsdd"
    shutil.copytree(fused_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    config.update({"without": "fsdd", "reproduce": {"train": "recall train general-audio --without fsdd --out X"}})
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_parse_loco_rows_tags_and_refusals() -> None:
    assert parse_loco("fsdd=A,fsdd:version 1 recipe=B", CORPORA) == [
        ("loco: without fsdd", "fsdd", "A"), ("loco: without fsdd (version 1 recipe)", "fsdd", "B")]
    assert parse_loco("", CORPORA) == []
    for bad in ("fsdd", "speech=A", "fsdd="):
        with pytest.raises(SystemExit, match="corpus"):
            parse_loco(bad, CORPORA)
    with pytest.raises(SystemExit, match="same row"):
        parse_loco("fsdd=A,fsdd=B", CORPORA)


def test_run_info_refuses_a_checkpoint_trained_on_the_corpus(loco_dir: Path, fused_dir: Path) -> None:  # noqa: F811
    info = run_info(str(loco_dir), "fsdd")
    assert info["without"] == "fsdd" and info["commands"] == ["recall train general-audio --without fsdd --out X"]
    with pytest.raises(SystemExit, match="without='fsdd', not 'asc'"):
        run_info(str(loco_dir), "asc")
    with pytest.raises(SystemExit, match="without=None"):  # the default: trained on everything
        run_info(str(fused_dir), "fsdd")


def test_run_info_takes_a_commercial_loco_checkpoint_for_each_corpus_it_left_out(loco_dir: Path) -> None:
    config = json.loads((loco_dir / "config.json").read_text())
    (loco_dir / "config.json").write_text(json.dumps({**config, "without": "fsdd,esc"}))
    assert run_info(str(loco_dir), "fsdd")["without"] == "fsdd"
    with pytest.raises(SystemExit, match="not 'asc'"):
        run_info(str(loco_dir), "asc")


def test_run_info_lists_a_views_checkpoints_source_command_first(loco_dir: Path, tmp_path: Path) -> None:
    views = tmp_path / "views"
    shutil.copytree(loco_dir, views)
    config = json.loads((views / "config.json").read_text())
    config.update({"speech_views": {"frontend_bits": 256},
                   "reproduce": {"train": f"recall train general-audio --views-from {loco_dir} --frontend-bits 256 --out V"}})
    (views / "config.json").write_text(json.dumps(config))
    assert run_info(str(views), "fsdd")["commands"] == [
        "recall train general-audio --without fsdd --out X",
        f"recall train general-audio --views-from {loco_dir} --frontend-bits 256 --out V"]


def test_loco_targets_use_the_baselines_of_their_own_run() -> None:
    sets = ("asc_unseen_speakers", "asc_unseen_words", "fsdd_unseen_speakers", "fsdd_unseen_words", "esc_unseen_classes")
    flat = lambda v: {s: {"float": v} for s in sets}  # noqa: E731
    results = {"mfcc-levin": flat(0.5), "logmel-mean-std": flat(0.4), "audio-baseline": flat(0.3),
               "ga": {s: {"float": 0.9, "hamming": 0.9} for s in sets},
               "loco: without fsdd": {"fsdd_unseen_words": {"float": 0.6, "hamming": 0.55}}}
    row = "loco: without fsdd"
    assert best_baseline(results, {}, row, "fsdd_unseen_words") == 0.5  # no own run: the main run's
    runs = {row: {"baselines": {"mfcc-levin": {"fsdd_unseen_words": {"float": 0.7}},
                                "logmel-mean-std": {"fsdd_unseen_words": {"float": 0.2}},
                                "audio-baseline": {"fsdd_unseen_words": {"float": 0.65}}}}}
    assert best_baseline(results, runs, row, "fsdd_unseen_words") == 0.7

    def loco_rows(loco_runs):
        return {r["what"].rsplit(" ", 1)[1]: (r["needed"], r["met"]) for r in targets(results, "ga", {}, None, loco_runs)
                if r["what"].startswith("loco")}

    # issue 37: a leave-one-corpus-out row needs 1.3x the best training-free baseline
    assert loco_rows(None) == {"(float)": (">= 0.650", False), "(hamming)": (">= 0.650", False)}
    margins = {r["what"]: r["margin"] for r in targets(results, "ga", {}, None, runs) if r["what"].startswith("loco")}
    assert margins == {"loco: without fsdd on fsdd_unseen_words >= 1.3x the best baseline (float)": "-0.310",
                       "loco: without fsdd on fsdd_unseen_words >= 1.3x the best baseline (hamming)": "-0.360"}
    assert loco_rows(runs) == {"(float)": (">= 0.910", False), "(hamming)": (">= 0.910", False)}


def test_loco_only_merges_its_rows_and_leaves_every_other_row(data: Path, loco_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    sets = {s: {"clips": 6, "labels": 2} for s in ("asc_unseen_speakers", "asc_unseen_words", "fsdd_unseen_speakers",
                                                    "fsdd_unseen_words", "esc_unseen_classes")}
    before = {"date": "2026-01-01", "machine": "m", "default_encoder": "ga", "sets": sets, "default_holdout": {},
              "results": {"mfcc-levin": {s: {"float": 0.11} for s in sets},
                          "logmel-mean-std": {s: {"float": 0.12} for s in sets},
                          "audio-baseline": {s: {"float": 0.13, "hamming": 0.1} for s in sets},
                          "ga": {s: {"float": 0.5, "hamming": 0.49} for s in sets},
                          "loco: without esc": {"esc_unseen_classes": {"float": 0.4, "hamming": 0.3}}},
              "loco_note": "an older row's note", "targets": []}
    (out / "generalisation.json").write_text(json.dumps(before))
    assert bench_main(["--data", str(data), "--out", str(out), "--loco-only", "--loco", f"fsdd={loco_dir}"]) == 0
    after = json.loads((out / "generalisation.json").read_text())
    for name, row in before["results"].items():
        assert after["results"][name] == row  # not re-measured
    assert after["loco_note"] == before["loco_note"]
    ours = after["results"]["loco: without fsdd"]
    assert set(ours) == {"fsdd_unseen_speakers", "fsdd_unseen_words"} and all(0 < r["hamming"] <= 1 and 0 < r["float"] <= 1 for r in ours.values())
    run = after["loco_runs"]["loco: without fsdd"]
    assert run["checkpoint"] == str(loco_dir) and run["commands"][0].endswith("--without fsdd --out X")
    # the baselines stored with the row are the training-free ones, measured now on the same clips
    from bench.audio.generalisation import evaluation_sets, load_clips

    labels, paths = evaluation_sets(data)["fsdd_unseen_speakers"]
    direct = score(baseline_system(BASELINES["mfcc-levin"]), load_clips(paths), labels)["float"]
    assert run["baselines"]["mfcc-levin"]["fsdd_unseen_speakers"]["float"] == direct
    assert set(run["baselines"]) == {"mfcc-levin", "logmel-mean-std", "audio-baseline"}
    loco_targets = [t for t in after["targets"] if t["what"].startswith("loco: without fsdd")]
    assert len(loco_targets) == 4  # two sets x float, Hamming
    assert all(t["needed"] == f">= {1.3 * max(b['fsdd_unseen_speakers']['float'] for b in run['baselines'].values()):.3f}"
               for t in loco_targets if "fsdd_unseen_speakers" in t["what"])
    md = (out / "generalisation.md").read_text()
    assert "## Leave-one-corpus-out runs" in md and "recall train general-audio --without fsdd --out X" in md
    assert "| loco: without fsdd |" in md and "an older row's note" in md


def test_loco_only_needs_loco(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="needs --loco"):
        bench_main(["--out", str(tmp_path), "--loco-only"])


def test_a_full_run_can_keep_the_previous_reports_loco_rows() -> None:
    from bench.audio.loco import keep_loco_rows

    previous = {"results": {"general-audio": {"x": 1}, "loco: without fsdd": {"fsdd_unseen_speakers": {"float": 0.6}},
                            "loco: without asc": {"asc_unseen_speakers": {"float": 0.2}}},
                "loco_runs": {"loco: without fsdd": {"checkpoint": "old-fsdd"}, "loco: without asc": {"checkpoint": "a"}},
                "loco_note": "trained for hours"}
    report = {"results": {"general-audio": {"x": 2}, "loco: without fsdd": {"fsdd_unseen_speakers": {"float": 0.7}}},
              "loco_runs": {"loco: without fsdd": {"checkpoint": "new-fsdd"}}}
    keep_loco_rows(report, previous)
    assert report["results"]["general-audio"] == {"x": 2}  # the new measurement of the default stays
    assert report["loco_runs"]["loco: without fsdd"] == {"checkpoint": "new-fsdd"}  # a row measured now wins
    assert report["results"]["loco: without fsdd"]["fsdd_unseen_speakers"]["float"] == 0.7
    assert report["loco_runs"]["loco: without asc"] == {"checkpoint": "a"}
    assert report["results"]["loco: without asc"] == {"asc_unseen_speakers": {"float": 0.2}}
    assert report["loco_note"] == "trained for hours"
    empty = keep_loco_rows({"results": {}}, {"results": {}})
    assert "loco_runs" not in empty and "loco_note" not in empty
