"""bench/audio/generalisation.py: which set counts as "unseen words", and issue 37's targets' arithmetic."""

from __future__ import annotations

from bench.audio.generalisation import targets

SETS = ("asc_unseen_speakers", "asc_unseen_words", "fsdd_unseen_speakers", "fsdd_unseen_words", "esc_unseen_classes")


def _results(default: dict[str, float]) -> dict:
    flat = lambda v: {s: {"float": v} for s in SETS}  # noqa: E731
    return {"mfcc-levin": flat(0.5), "logmel-mean-std": flat(0.4), "audio-baseline": flat(0.3),
            "ga": {s: {"float": default[s], "hamming": default[s] - 0.01} for s in SETS}}


def _row(rows: list[dict], prefix: str) -> dict:
    (row,) = [r for r in rows if r["what"].startswith(prefix) and r["what"].endswith("(float)")]
    return row


def test_unseen_words_follow_what_the_checkpoint_held_out() -> None:
    results = _results({"asc_unseen_speakers": 0.9, "asc_unseen_words": 0.1, "fsdd_unseen_speakers": 0.2,
                        "fsdd_unseen_words": 0.7, "esc_unseen_classes": 0.8})
    by_digits = _row(targets(results, "ga", {"asc_words": [], "fsdd_words": ["2"]}), "unseen words")
    assert "fsdd_unseen_words" in by_digits["what"] and by_digits["result"] == "0.700"
    assert by_digits["needed"] == ">= 0.930" and not by_digits["met"]  # issue 37: 0.93 absolute
    by_keywords = _row(targets(results, "ga", {"asc_words": ["up"], "fsdd_words": ["2"]}), "unseen words")
    assert "asc_unseen_words" in by_keywords["what"] and not by_keywords["met"]
    fallback = _row(targets(results, "ga", {}), "unseen words")
    assert "fsdd_unseen_speakers" in fallback["what"]


def test_hamming_ratio_and_baseline_multiples() -> None:
    rows = targets(_results({s: 0.76 for s in SETS}), "ga", {})
    assert _row(rows, "English digits")["needed"] == ">= 0.930" and not _row(rows, "English digits")["met"]
    assert _row(rows, "Arabic keywords")["needed"] == ">= 0.900"
    assert _row(rows, "unseen sound classes")["needed"] == ">= 0.600"  # 1.5 x log-mel's 0.4
    ratio = [r for r in rows if r["what"] == "Hamming >= 0.95x float, esc_unseen_classes (ratio)"][0]
    assert ratio["needed"] == ">= 0.722" and ratio["result"] == "0.750" and ratio["met"]
