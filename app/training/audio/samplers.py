"""Which clips are compared in a training step: pairs (paper 000) and triplets (paper 004).

Samplers return index arrays into the training records; drawing from a seeded generator makes
every epoch reproducible.
"""

from __future__ import annotations

import numpy as np


class LabelIndex:
    """Clip indices grouped by label (and by speaker, to prefer cross-speaker positives).

    A label with one clip has no positive, so it cannot anchor a triplet or a positive pair.
    Labels named in ``negatives_only`` (labels that only extra data brings) may have one clip:
    such a clip is never an anchor but still serves as a negative, which is all it can teach.
    A single-clip label anywhere else is an error, because in the main manifest it means a
    broken manifest or split.
    """

    def __init__(self, labels: list[str], speakers: list[str] | None = None, negatives_only: set[str] | frozenset[str] = frozenset()) -> None:
        self.labels = np.asarray(labels)
        self.speakers = np.asarray(speakers if speakers is not None else [""] * len(labels))
        self.classes = sorted(set(labels))
        if len(self.classes) < 2:
            raise ValueError("training needs at least two labels")
        self.members = {c: np.flatnonzero(self.labels == c) for c in self.classes}
        small = [c for c, m in self.members.items() if len(m) < 2]
        if [c for c in small if c not in negatives_only]:
            raise ValueError(f"labels with fewer than two clips cannot form positive pairs: {[c for c in small if c not in negatives_only][:5]}")
        self.singletons = small
        self.n = len(labels)
        # clips that can anchor a triplet; all of them when no label is a singleton, so the
        # random draws (and a seeded run) are the same as before single-clip labels existed
        self.anchors = np.flatnonzero(~np.isin(self.labels, small)) if small else np.arange(self.n)
        if not len(self.anchors):
            raise ValueError("no label has two clips: nothing can anchor a triplet")

    def anchor_sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` anchors drawn uniformly from the clips that have a positive."""
        return self.anchors[rng.integers(len(self.anchors), size=size)]

    def positive(self, anchor: int, rng: np.random.Generator, other_speaker: bool = True) -> int:
        """Another clip of the anchor's label, from another speaker when one exists.

        Cross-speaker positives teach what a word sounds like across voices, which is what
        speaker-disjoint search needs; same-speaker pairs would reward voice matching.
        """
        members = self.members[str(self.labels[anchor])]
        members = members[members != anchor]
        if other_speaker and self.speakers[anchor]:
            others = members[self.speakers[members] != self.speakers[anchor]]
            if len(others):
                members = others
        return int(rng.choice(members))

    def negative(self, anchor: int, rng: np.random.Generator) -> int:
        """A clip of a random other label (paper 004: "randomly select another speech segment")."""
        while True:
            candidate = int(rng.integers(self.n))
            if self.labels[candidate] != self.labels[anchor]:
                return candidate


def triplet_batch(index: LabelIndex, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """(batch_size, 3) rows of (anchor, positive, negative) indices, anchors uniform over clips
    that have a positive; negatives may be any clip of another label."""
    anchors = index.anchor_sample(rng, batch_size)
    return np.array([(a, index.positive(a, rng), index.negative(a, rng)) for a in anchors], dtype=np.int64)


def pair_batch(index: LabelIndex, batch_size: int, rng: np.random.Generator, balanced: bool) -> np.ndarray:
    """(batch_size, 3) rows of (first, second, same) for paper 000's contrastive training.

    Balanced: half the pairs share a label (positives), half are a clip with a random clip of
    another class. Unbalanced: pairs drawn uniformly from all positive and all negative pairs, so
    positives come at their natural rate (about 1/classes), as when "a clip is paired with all
    clips not belonging to that sound".
    """
    rows = []
    if balanced:
        positive_rate = 0.5
    else:
        # ordered positive pairs over all pairs whose first clip can be an anchor
        sizes = np.array([len(m) for m in index.members.values()], dtype=np.float64)
        positive_rate = float((sizes * (sizes - 1)).sum() / (len(index.anchors) * (index.n - 1)))
    for _ in range(batch_size):
        first = int(index.anchor_sample(rng, 1)[0])
        if rng.random() < positive_rate:
            rows.append((first, index.positive(first, rng, other_speaker=False), 1))
        else:
            rows.append((first, index.negative(first, rng), 0))
    return np.array(rows, dtype=np.int64)
