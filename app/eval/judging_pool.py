"""The judging pool of Minimal Test Collections (app/eval/mtc.py): the query-document pairs in some system's top k.

Below both MTC and its gain models (app/eval/gain_models.py), which read it, so neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class JudgingPool:
    """The query-document pairs in the top k of at least one system."""

    systems: list[str]
    queries: list[str]
    pairs: list[tuple[str, str]]  # (qid, docno)
    membership: np.ndarray  # (S, n_pairs) bool: I(system_i <= k)
    ranks: np.ndarray  # (S, n_pairs) int: 1-based rank, 0 when not in the top k
    k: int

    def __len__(self) -> int:
        return len(self.pairs)


def build_pool(rankings: Mapping[str, Mapping[str, Sequence[str]]], k: int) -> JudgingPool:
    """Pool the top k of every system.

    Args:
        rankings: system name -> qid -> ranked docnos (best first).
        k: depth of AG@k. Queries are the union over systems; a system with no answer for a
            query retrieved nothing for it (AG@k = 0 there).
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    systems = list(rankings)
    if len(systems) < 2:
        raise ValueError("MTC compares systems: need at least two")
    queries = sorted({q for run in rankings.values() for q in run})
    index: dict[tuple[str, str], int] = {}
    for qid in queries:
        for name in systems:
            for doc in rankings[name].get(qid, [])[:k]:
                index.setdefault((qid, doc), len(index))
    ranks = np.zeros((len(systems), len(index)), dtype=int)
    for s, name in enumerate(systems):
        for qid, docs in rankings[name].items():
            for rank, doc in enumerate(docs[:k], start=1):
                ranks[s, index[(qid, doc)]] = rank
    return JudgingPool(systems, queries, list(index), ranks > 0, ranks, k)
