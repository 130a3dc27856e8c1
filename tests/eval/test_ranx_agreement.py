"""Standard metrics agree with ranx on random runs with graded qrels and distinct scores."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from app.eval.metrics import aggregate, evaluate
from app.eval.trec import rankings_from_run


def _random_collection(seed: int):
    rng = np.random.default_rng(seed)
    qrels, run = {}, {}
    for q in range(25):
        docs = [f"d{j}" for j in range(60)]
        qrels[f"q{q}"] = {d: int(rng.choice([0, 0, 0, 1, 2, 3])) for d in rng.choice(docs, 30, replace=False)}
        if q == 3:
            qrels["q3"] = {d: 0 for d in docs[:5]}  # a query with nothing relevant
        retrieved = rng.choice(docs, int(rng.integers(5, 40)), replace=False)
        # distinct scores: a permutation of integers plus noise, so no tie-break rule matters
        scores = rng.permutation(len(retrieved)) + rng.random(len(retrieved)) * 0.5
        run[f"q{q}"] = {d: float(s) for d, s in zip(retrieved, scores)}
    return qrels, run


@pytest.mark.parametrize("seed", [0, 1])
def test_map_precision_ndcg_recall_match_ranx(seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba type-safety warnings inside ranx
        from ranx import Qrels, Run
        from ranx import evaluate as ranx_evaluate

        qrels, run = _random_collection(seed)
        pairs = {"map": "map", "P@5": "precision@5", "P@10": "precision@10", "ndcg@10": "ndcg@10",
                 "recall@20": "recall@20", "MP@1": "mrr", "P@N": "r-precision", "map@10": "map@10"}
        expected = ranx_evaluate(Qrels(qrels), Run(run), list(pairs.values()), make_comparable=True)
    _, per_query = evaluate(rankings_from_run(run), qrels, list(pairs))
    ours = aggregate(per_query)
    for name, ranx_name in pairs.items():
        assert ours[name] == pytest.approx(float(expected[ranx_name]), abs=1e-9), name
