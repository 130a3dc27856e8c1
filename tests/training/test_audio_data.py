"""Manifests, disjoint splits, samplers, augmentation, packs and the matrix retrieval metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.training.audio.data import Record, load_waves, mu_law_decode, mu_law_encode, read_manifest, read_pack, split_records, write_pack
from app.training.audio.augment import AugmentConfig, add_noise, augmented_copy, change_speed, eval_window, training_window
from app.training.retrieval import best_window_scores, cosine_scores, hamming_scores, mean_window_scores, retrieval_metrics
from app.training.audio.samplers import LabelIndex, pair_batch, triplet_batch


def _records() -> list[Record]:
    return [Record(f"{s}-{w}-{t}.wav", w, s) for s in "abcdef" for w in ("yes", "no", "up") for t in range(2)]


def test_manifest_csv_with_alternative_column_names(tmp_path: Path) -> None:
    sf.write(tmp_path / "x.wav", np.zeros(800, np.float32), 8000)
    (tmp_path / "m.csv").write_text("file,keyword,speaker,start,end\nx.wav,yes,s1,0.01,0.05\n")
    (record,) = read_manifest(tmp_path / "m.csv")
    assert record == Record(str(tmp_path / "x.wav"), "yes", "s1", 0.01, 0.05)
    (wave,) = load_waves([record], 8000)
    assert len(wave) == 320  # 40 ms at 8 kHz
    (tmp_path / "bad.csv").write_text("name,kind\nx.wav,yes\n")
    with pytest.raises(ValueError, match="no path column"):
        read_manifest(tmp_path / "bad.csv")


def test_manifest_folder_per_label(tmp_path: Path) -> None:
    for label in ("dog", "rain"):
        (tmp_path / label).mkdir()
        sf.write(tmp_path / label / "1.wav", np.zeros(100, np.float32), 8000)
    assert sorted(r.label for r in read_manifest(tmp_path)) == ["dog", "rain"]


@pytest.mark.parametrize("by", ["speaker", "label"])
def test_splits_are_disjoint_and_seeded(by: str) -> None:
    records = _records()
    test = ["a"] if by == "speaker" else ["up"]
    splits = split_records(records, by, test, 1, seed=3)
    group = lambda r: getattr(r, by)  # noqa: E731
    sets = [{group(r) for r in part} for part in (splits.train, splits.val, splits.test)]
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    assert sets[2] == set(test) and len(sets[1]) == 1
    assert split_records(records, by, test, 1, seed=3) == splits
    with pytest.raises(ValueError, match="not in the manifest"):
        split_records(records, by, ["zzz"], 1, seed=3)


def test_triplets_and_pairs_follow_their_rules() -> None:
    records = _records()
    index = LabelIndex([r.label for r in records], [r.speaker for r in records])
    rng = np.random.default_rng(0)
    for a, p, n in triplet_batch(index, 200, rng):
        assert records[a].label == records[p].label != records[n].label
        assert a != p and records[a].speaker != records[p].speaker  # cross-speaker positives
    balanced = pair_batch(index, 4000, rng, balanced=True)
    assert abs(balanced[:, 2].mean() - 0.5) < 0.03
    # unbalanced: positives at the natural rate sum n_c (n_c - 1) / (n (n - 1)) = 3 * 12 * 11 / (36 * 35)
    unbalanced = pair_batch(index, 4000, rng, balanced=False)
    assert abs(unbalanced[:, 2].mean() - 396 / 1260) < 0.03
    for first, second, same in np.concatenate([balanced, unbalanced]):
        assert (records[first].label == records[second].label) == bool(same)


def test_noise_is_added_at_the_requested_snr() -> None:
    rng = np.random.default_rng(0)
    clean = np.sin(np.arange(80000) * 0.05).astype(np.float32)
    noisy = add_noise(clean, 10.0, rng)
    snr = 10 * np.log10(np.mean(clean**2) / np.mean((noisy - clean) ** 2))
    assert snr == pytest.approx(10.0, abs=0.1)


def test_speed_change_and_windows_keep_lengths() -> None:
    wave = np.arange(1000, dtype=np.float32)
    fast = change_speed(wave, 1.25)
    assert len(fast) == 800 and fast[1] == pytest.approx(1.25)
    rng = np.random.default_rng(0)
    window = training_window(wave / 1000, 1600, 8000, rng, AugmentConfig(), context=lambda: np.ones(2000, np.float32))
    assert window.shape == (1600,) and window.dtype == np.float32
    centred = eval_window(np.ones(400, np.float32), 1000)
    assert centred[300:700].sum() == 400 and centred.sum() == 400
    loud = np.zeros(5000, np.float32)
    loud[3000:3500] = 1.0
    assert eval_window(loud, 1000).sum() == 500  # the energetic crop keeps the event


def test_an_augmented_copy_changes_speed_gain_and_noise_as_asked() -> None:
    wave = np.sin(np.arange(8000) * 0.05).astype(np.float32)
    rng = np.random.default_rng(0)
    louder = augmented_copy(wave, rng, speed=(1.0, 1.0), noise_prob=0.0, gain_db=(6.0, 6.0))
    np.testing.assert_allclose(louder, wave * 10 ** (6 / 20), rtol=1e-6)
    slower = augmented_copy(wave, rng, speed=(0.8, 0.8), noise_prob=0.0, gain_db=(0.0, 0.0))
    assert len(slower) == 10000  # 0.8x speed: 1.25x as long
    noisy = augmented_copy(wave, rng, speed=(1.0, 1.0), noise_prob=1.0, snr_db=(20.0, 20.0), gain_db=(0.0, 0.0))
    snr = 10 * np.log10(np.mean(wave**2) / np.mean((noisy - wave) ** 2))
    assert snr == pytest.approx(20.0, abs=0.5)
    # seeded: the same generator state gives the same copy
    again = [augmented_copy(wave, np.random.default_rng(7)) for _ in range(2)]
    np.testing.assert_array_equal(again[0], again[1])


def test_pack_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    waves = [(0.3 * rng.standard_normal(n)).clip(-1, 1).astype(np.float32) for n in (100, 250)]
    records = [Record("a.wav", "x", "s1"), Record("b.wav", "y", "s2")]
    write_pack(tmp_path / "p.npz", records, waves, 8000)
    got_records, got_waves = read_pack(tmp_path / "p.npz", 8000)
    assert got_records == records
    for got, want in zip(got_waves, waves):
        # 8-bit mu-law: relative error at most ~3% of the sample's magnitude (plus a tiny floor)
        assert np.all(np.abs(got - want) <= 0.035 * np.abs(want) + 2e-4)
    assert np.array_equal(mu_law_encode(mu_law_decode(np.arange(256, dtype=np.uint8))), np.arange(256))
    with pytest.raises(ValueError, match="8000 Hz"):
        read_pack(tmp_path / "p.npz", 16000)


def _brute_force(scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    aps, p1, first_hit, p004 = [], [], [], []
    for q in range(len(labels)):
        order = [i for i in sorted(range(len(labels)), key=lambda i: (-scores[q, i], i)) if i != q]
        hits = [labels[i] == labels[q] for i in order]
        found, precisions = 0, []
        for rank, hit in enumerate(hits, 1):
            if hit:
                found += 1
                precisions.append(found / rank)
        aps.append(sum(precisions) / sum(hits))
        n_rel = sum(hits)
        p004.append(np.mean([sum(hits[:k]) / k for k in range(1, n_rel + 1)]))
        p1.append(float(hits[0]))
        first_hit.append(1 / (hits.index(True) + 1))
    return {"map": float(np.mean(aps)), "precision@1": float(np.mean(p1)), "mp@1": float(np.mean(first_hit)),
            "map_p004": float(np.mean(p004))}


def test_matrix_metrics_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, size=12)
    floats = rng.standard_normal((12, 8)) + labels[:, None]
    got = retrieval_metrics(cosine_scores(floats), labels)
    for key, value in _brute_force(cosine_scores(floats), labels).items():
        assert got[key] == pytest.approx(value)
    # Hamming scores: minus the number of differing signs
    values = rng.standard_normal((5, 16))
    bits = values > 0
    expected = -(bits[:, None, :] != bits[None, :, :]).sum(-1)
    np.testing.assert_array_equal(hamming_scores(values), expected)


def test_an_item_scores_its_best_window() -> None:
    # 2 queries, 5 windows cut from 3 items; each item keeps the maximum of its own windows
    window_scores = np.array([[0.1, 0.9, 0.3, -0.2, 0.5],
                              [0.7, 0.0, 0.8, 0.6, -1.0]])
    owner = np.array([0, 0, 1, 2, 2])
    expected = np.array([[0.9, 0.3, 0.5],
                         [0.7, 0.8, 0.6]])
    np.testing.assert_array_equal(best_window_scores(window_scores, owner, 3), expected)


def test_the_mean_rule_averages_each_query_window_best_match() -> None:
    # 4 windows of 2 items (item 0: windows 0, 1; item 1: windows 2, 3), symmetric similarities
    sims = np.array([[1.0, 0.2, 0.9, 0.1],
                     [0.2, 1.0, 0.3, 0.4],
                     [0.9, 0.3, 1.0, 0.5],
                     [0.1, 0.4, 0.5, 1.0]])
    owner = np.array([0, 0, 1, 1])
    # item 0 -> item 1: window 0's best is 0.9, window 1's 0.4: mean 0.65; item 1 -> item 0: 0.9 and 0.4
    expected = np.array([[1.0, 0.65],
                         [0.65, 1.0]])
    np.testing.assert_allclose(mean_window_scores(sims, owner, 2), expected)
    sims[1, 3] = sims[3, 1] = -0.4  # item 1's window 3 now matches item 0's window 0 best (0.1)
    expected = np.array([[1.0, (0.9 + 0.3) / 2],
                         [(0.9 + 0.1) / 2, 1.0]])
    np.testing.assert_allclose(mean_window_scores(sims, owner, 2), expected)


def test_two_loads_writing_the_same_cache_at_once_both_succeed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two trainings started together decode one manifest into one cache entry: each must get whole audio."""
    import threading

    import app.training.audio.data as audio_data

    rng = np.random.default_rng(0)
    records = []
    for i in range(3):
        path = tmp_path / f"c{i}.wav"
        sf.write(path, (0.1 * rng.standard_normal(800 + 100 * i)).astype(np.float32), 8000)
        records.append(Record(str(path), "x"))
    both_saved = threading.Barrier(2, timeout=10)
    real_save = np.save

    def save_then_wait(file, array, *args, **kwargs):  # both calls write their files before either moves one
        real_save(file, array, *args, **kwargs)
        if str(file).endswith("tmp.npy"):
            both_saved.wait()

    monkeypatch.setattr(audio_data.np, "save", save_then_wait)
    results, errors = [None, None], []

    def load(slot: int) -> None:
        try:
            results[slot] = load_waves(records, 8000, cache_dir=tmp_path / "cache")
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=load, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    expected = [sf.read(r.path, dtype="float32")[0] for r in records]
    for waves in results:
        assert [len(w) for w in waves] == [800, 900, 1000]
        assert all(np.array_equal(w, e) for w, e in zip(waves, expected))
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(  # no temporary file left behind
        p.name for p in (tmp_path / "cache").glob("*.npy") if "tmp" not in p.name)
