"""bench.audio.channel_norm's cross-speaker MAP against a hand computation on a tiny synthetic set."""

from __future__ import annotations

import numpy as np

from bench.audio.channel_norm import cross_speaker_map


def test_cross_speaker_map_ranks_only_the_other_speakers_clips():
    rng = np.random.default_rng(0)
    clips = [rng.normal(0, 0.1, 8000).astype(np.float32) for _ in range(6)]  # 0.5 s each: one audible window
    labels = ["x", "y", "x", "y", "x", "y"]
    speakers = ["a", "a", "b", "b", "c", "c"]
    # one vector per clip; speaker a's "x" is nearer b's "y" than b's "x" (a cross-speaker miss)
    vectors = np.array([[1.0, 0.0, 0.2], [0.0, 1.0, 0.0], [0.6, 0.8, 0.0], [0.9, 0.1, 0.4], [1.0, 0.1, 0.0],
                        [0.1, 1.0, 0.1]], np.float32)

    def embed(windows):
        assert len(windows) == len(clips)
        return vectors, np.where(vectors > 0.5, 1.0, -1.0).astype(np.float32)

    got = cross_speaker_map((embed, 1.0, 0.5), clips, labels, speakers)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = unit @ unit.T
    aps = []
    for q in range(6):
        others = [j for j in range(6) if speakers[j] != speakers[q]]
        ranked = sorted(others, key=lambda j: -sims[q, j])
        hits = [labels[j] == labels[q] for j in ranked]
        precisions = [sum(hits[: i + 1]) / (i + 1) for i, h in enumerate(hits) if h]
        aps.append(np.mean(precisions))
    assert got["float"] == round(float(np.mean(aps)), 4)
    assert got["float"] < 1.0  # the planted miss counts: same-speaker clips cannot hide it
