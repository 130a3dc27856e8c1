"""Simulating Minimal Test Collections on a fully judged collection (paper 001, section 5).

The full qrels act as the assessor: Algorithm 1 asks for the gain of its chosen pair and gets
the true one. Along the way we record the confidence in the ranking and the accuracy of the
estimated pairwise order against the order given by all judgments, which gives the paper's
Table 3 (judgments needed for 95% confidence, accuracy and Kendall tau at that point) and
Figures 2-3 (confidence and accuracy against judgments made).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from app.eval.gain_models import OrdinalGainModel, output_features, uniform_probabilities
from app.eval.mtc import JudgingPool, MinimalTestCollection, ranking_accuracy, truth_gains


@dataclass
class TracePoint:
    """State of the simulation after some number of judgments."""

    judgments: int
    confidence: float  # mean C_AB over system pairs
    accuracy: float  # share of system pairs in the true order
    tau: float  # Kendall tau between estimated and true order


@dataclass
class SimulationResult:
    """What one MTC simulation measured."""

    pool_size: int  # pairs in some system's top k: the cost of exhaustive judging
    judgments_at_target: int | None  # first point where mean confidence >= target (None: never)
    at_target: TracePoint | None
    no_judgments: TracePoint  # the ranking before any judgment (section 5.2)
    trace: list[TracePoint] = field(default_factory=list)
    true_means: dict[str, float] = field(default_factory=dict)
    estimated_means_at_target: dict[str, float] = field(default_factory=dict)


def simulate_mtc(
    pool: JudgingPool,
    qrels: Mapping[str, Mapping[str, float]],
    levels: Sequence[float],
    *,
    target: float = 0.95,
    gain_model: Literal["uniform", "ordinal"] = "uniform",
    prior_model: OrdinalGainModel | None = None,
    refit_every: int = 0,
    stop_at_target: bool = False,
    trace_points: int = 200,
    seed: int = 0,
) -> SimulationResult:
    """Run Algorithm 1 with the qrels as the assessor.

    Args:
        pool: the pooled top-k pairs of all systems.
        qrels: full judgments (missing pairs have gain 0).
        levels: relevance levels L.
        target: mean confidence at which the paper stops (0.95).
        gain_model: ``uniform`` prior, or ``ordinal``: gain distributions from ``prior_model``
            (fitted on another collection, the paper's L_output; uniform if None).
        refit_every: with ``ordinal`` and > 0, refit the model on the judgments made so far
            after this many judgments, then at growing intervals (x1.25) so refitting stays a
            small share of the cost. Off by default: Algorithm 1 judges the pairs the systems
            disagree on, a biased sample, and a model fitted on it alone can be worse than
            the prior (the paper refits with judgment-based features instead).
        stop_at_target: stop at the target instead of judging every pair with weight > 0.
        trace_points: about how many points of the confidence curve to keep.
        seed: tie-break seed of the judging order.
    """
    truth = truth_gains(pool, qrels)
    scale = 1.0 / (pool.k * len(pool.queries))
    true_means = {name: float(v) for name, v in zip(pool.systems, scale * (pool.membership.astype(float) @ truth))}
    features = output_features(pool) if gain_model == "ordinal" else None
    if features is not None and prior_model is not None:
        probabilities = prior_model.predict_proba(features)
    else:
        probabilities = uniform_probabilities(len(pool), levels)
    mtc = MinimalTestCollection(pool, levels, probabilities, seed=seed)

    def snapshot(n: int) -> TracePoint:
        accuracy, tau, _ = ranking_accuracy(mtc.system_means(), true_means)
        return TracePoint(n, mtc.mean_confidence(), accuracy, tau)

    informative = int(np.count_nonzero(mtc.weights))
    trace_every = max(1, informative // max(trace_points, 1))
    first = snapshot(0)
    result = SimulationResult(len(pool), None, None, first, [first], true_means)
    n_judged = 0
    next_refit = refit_every
    while True:
        if result.at_target is None and mtc.mean_confidence() >= target:
            result.at_target = snapshot(n_judged)
            result.judgments_at_target = n_judged
            result.estimated_means_at_target = mtc.system_means()
            if stop_at_target:
                break
        pair = mtc.next_pair()
        if pair is None:
            break
        mtc.judge(pair, truth[pair])
        n_judged += 1
        if features is not None and refit_every > 0 and n_judged >= next_refit:
            judged = mtc.judged
            model = OrdinalGainModel(levels).fit(features[judged], truth[judged])
            mtc.set_probabilities(model.predict_proba(features))
            next_refit = max(n_judged + refit_every, int(n_judged * 1.25))
        if n_judged % trace_every == 0:
            result.trace.append(snapshot(n_judged))
    if result.trace[-1].judgments != n_judged:
        result.trace.append(snapshot(n_judged))
    return result


def fit_prior_model(
    pool: JudgingPool, qrels: Mapping[str, Mapping[str, float]], levels: Sequence[float]
) -> OrdinalGainModel:
    """Ordinal model fitted on every pooled pair of a judged collection (for use on another one)."""
    return OrdinalGainModel(levels).fit(output_features(pool), truth_gains(pool, qrels))
