"""`recall eval ...`: run queries, score runs, compare systems, judge with MTC, write reports.

Every subcommand function takes the parsed ``argparse.Namespace`` and returns an exit code.
Heavy modules (matplotlib, scikit-learn, statsmodels, httpx) are imported inside the commands
that need them, so `recall --help` stays fast.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from app.eval.metrics import aggregate, evaluate
from app.eval.trec import read_qrels, read_run, rankings_from_run

DEFAULT_METRICS = ("map", "MP@1", "P@1", "P@5", "P@10", "P@N", "mean_P@1..N", "recall@10", "ndcg@10", "AG@5")


def add_parser(subparsers: Any) -> None:
    """Register the ``eval`` command and its subcommands on the top-level CLI."""
    parser = subparsers.add_parser("eval", help="evaluation: run queries, score, compare, judge (MTC), report")
    sub = parser.add_subparsers(dest="eval_command", required=True)

    run = sub.add_parser("run", help="run a query manifest against the HTTP API and write a TREC run")
    run.add_argument("--collection", required=True)
    run.add_argument("--queries", required=True, type=Path, help="CSV manifest: qid and one of path / item_id / text")
    run.add_argument("--url", default="http://localhost:8000")
    run.add_argument("--api-key", default=None)
    run.add_argument("--k", type=int, default=10)
    run.add_argument("--mode", default=None, help="search mode form field passed through to the service")
    run.add_argument("--item-distance", choices=["mean", "min"], default=None,
                     help="how an audio item combines a multi-window query's windows (the service's default: mean)")
    run.add_argument("--run-id", default=None, help="run name in the file (default: the output file stem)")
    run.add_argument("--out", required=True, type=Path, help="TREC run; a segment run goes to OUT.segments")
    run.add_argument("--timeout", type=float, default=60.0)
    run.set_defaults(func=cmd_run)

    score = sub.add_parser("score", help="metrics of a run against qrels")
    score.add_argument("run", type=Path)
    score.add_argument("qrels", type=Path)
    score.add_argument("--metrics", default=",".join(DEFAULT_METRICS), help="comma-separated, e.g. map,P@5,ndcg@10")
    score.add_argument("--per-query", action="store_true")
    score.add_argument("--format", choices=("table", "json"), default="table")
    score.set_defaults(func=cmd_score)

    compare = sub.add_parser("compare", help="pairwise significance between runs (randomisation, Wilcoxon, Friedman+HSD)")
    compare.add_argument("runs", nargs="+", type=Path)
    compare.add_argument("--qrels", required=True, type=Path)
    compare.add_argument("--metric", default="map")
    compare.add_argument("--n-permutations", type=int, default=10_000)
    compare.add_argument("--seed", type=int, default=0)
    compare.add_argument("--alpha", type=float, default=0.05)
    compare.add_argument("--format", choices=("table", "json"), default="table")
    compare.set_defaults(func=cmd_compare)

    judge = sub.add_parser("judge", help="MTC: record judgments, print confidence, propose the next pairs")
    judge.add_argument("runs", nargs="+", type=Path)
    judge.add_argument("--judgments", required=True, type=Path, help="qrels-format file of judgments so far (created if missing)")
    judge.add_argument("--record", nargs=3, action="append", metavar=("QID", "DOC", "GAIN"), default=[], help="append a judgment first")
    judge.add_argument("--k", type=int, default=5, help="depth of AG@k")
    judge.add_argument("--levels", default="0,1,2", help="relevance levels, e.g. 0,1 or 0,1,2")
    judge.add_argument("--next", type=int, default=10, help="how many pairs to propose")
    judge.add_argument("--gain-model", choices=("uniform", "ordinal"), default="uniform",
                       help="gains of unjudged pairs: uniform prior, or an ordinal model fitted on the judgments so far")
    judge.add_argument("--format", choices=("table", "json"), default="table")
    judge.set_defaults(func=cmd_judge)

    report = sub.add_parser("report", help="HTML or Markdown report with PNG plots")
    report.add_argument("runs", nargs="+", type=Path)
    report.add_argument("--qrels", required=True, type=Path)
    report.add_argument("--out", required=True, type=Path, help="output folder")
    report.add_argument("--format", choices=("html", "md"), default="html")
    report.add_argument("--title", default="Retrieval evaluation")
    report.add_argument("--metrics", default="map,MP@1,P@5,P@N,ndcg@10")
    report.add_argument("--k-max", type=int, default=25, help="largest K of the MP@K curve")
    report.add_argument("--class-k", type=int, default=5, help="K of the per-class P@K plot")
    report.add_argument("--query-classes", type=Path, help="CSV with columns qid,class")
    report.add_argument("--embeddings", type=Path, help=".npz with arrays 'vectors' (n, d) and 'labels' (n,) for t-SNE")
    report.add_argument("--mtc-k", type=int, default=5, help="AG@k depth of the simulated MTC curve (0 = no MTC plot)")
    report.set_defaults(func=cmd_report)


# ---------------------------------------------------------------- helpers


def _load_runs(paths: list[Path]) -> dict[str, dict[str, list[str]]]:
    """name -> qid -> ranking; names are run ids, made unique with the file stem when they clash."""
    runs: dict[str, dict[str, list[str]]] = {}
    for path in paths:
        run, run_id = read_run(path)
        name = run_id if run_id not in runs else f"{run_id}:{path.stem}"
        runs[name] = rankings_from_run(run)
    return runs


def _print_table(rows: list[tuple[str, dict[str, float]]], columns: list[str], first: str) -> None:
    width = max([len(first)] + [len(name) for name, _ in rows])
    print(f"{first:<{width}}  " + "  ".join(f"{c:>12}" for c in columns))
    for name, values in rows:
        print(f"{name:<{width}}  " + "  ".join(f"{values[c]:>12.4f}" for c in columns))


# ---------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace) -> int:
    """Query the service for every manifest row; write the TREC run (and segments if any)."""
    import httpx

    from app.eval.runner import read_manifest, run_manifest
    from app.eval.trec import write_run, write_segment_run

    queries = read_manifest(args.queries)
    headers = {"X-API-Key": args.api_key} if args.api_key else {}
    try:
        with make_client(args.url, headers, args.timeout) as client:
            rankings, segments = run_manifest(client, args.collection, queries, k=args.k, mode=args.mode,
                                              item_distance=args.item_distance)
    except (RuntimeError, httpx.HTTPError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_run(args.out, rankings, run_id=args.run_id or args.out.stem)
    print(f"wrote {sum(map(len, rankings.values()))} results for {len(rankings)} queries to {args.out}")
    if segments:
        segment_path = args.out.with_name(args.out.name + ".segments")
        write_segment_run(segment_path, segments)
        print(f"wrote segments to {segment_path}")
    return 0


def make_client(url: str, headers: dict[str, str], timeout: float) -> Any:
    """The HTTP client of `eval run` (a seam: tests replace it with a mock transport)."""
    import httpx

    return httpx.Client(base_url=url, headers=headers, timeout=timeout)


def score_run(run_path: Path, qrels_path: Path, metrics: list[str]) -> dict[str, Any]:
    """``{"aggregate": {metric: mean}, "per_query": {qid: {metric: value}}}`` for one run."""
    run, _ = read_run(run_path)
    qids, per_query = evaluate(rankings_from_run(run), read_qrels(qrels_path), metrics)
    return {
        "aggregate": aggregate(per_query),
        "per_query": {q: {m: float(per_query[m][i]) for m in metrics} for i, q in enumerate(qids)},
    }


def cmd_score(args: argparse.Namespace) -> int:
    """Print a run's metrics (mean over the qrels' queries; per query with --per-query)."""
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    try:
        scores = score_run(args.run, args.qrels, metrics)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":  # always both keys, so scripts can rely on the shape
        print(json.dumps(scores, indent=2))
        return 0
    rows = list(scores["per_query"].items()) if args.per_query else []
    _print_table(rows + [("all", scores["aggregate"])], metrics, "query")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Pairwise randomisation and Wilcoxon tests on one metric, plus Friedman + Tukey HSD for 3+ runs."""
    from app.eval.significance import friedman_tukey, paired_randomization_test, wilcoxon_test

    runs = _load_runs(args.runs)
    if len(runs) < 2:
        print("error: compare needs at least two runs", file=sys.stderr)
        return 2
    qrels = read_qrels(args.qrels)
    per_system = {name: evaluate(rankings, qrels, [args.metric])[1][args.metric] for name, rankings in runs.items()}
    names = list(per_system)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            p_rand, _ = paired_randomization_test(per_system[a], per_system[b], args.n_permutations, args.seed, args.alpha)
            p_wil, _ = wilcoxon_test(per_system[a], per_system[b], args.alpha)
            diff = float(per_system[b].mean() - per_system[a].mean())
            pairs.append({"a": a, "b": b, "mean_a": float(per_system[a].mean()), "mean_b": float(per_system[b].mean()),
                          "difference": diff, "p_randomization": p_rand, "p_wilcoxon": p_wil,
                          "significant": p_rand < args.alpha})
    output: dict[str, Any] = {"metric": args.metric, "queries": len(qrels), "pairs": pairs}
    if len(names) >= 3:
        friedman = friedman_tukey(per_system, args.alpha)
        output["friedman"] = {"statistic": friedman.statistic, "p_value": friedman.p_value, "mean_ranks": friedman.mean_ranks,
                              "critical_difference": friedman.critical_difference,
                              "tukey_hsd_p": {f"{a} vs {b}": p for (a, b), p in friedman.pairwise_p.items()}}
    if args.format == "json":
        print(json.dumps(output, indent=2))
        return 0
    print(f"{args.metric} over {len(qrels)} queries; B - A, two-sided p-values")
    for pair in pairs:
        mark = "*" if pair["significant"] else " "
        print(f"{pair['a']} vs {pair['b']}: {pair['mean_a']:.4f} -> {pair['mean_b']:.4f} ({pair['difference']:+.4f}) "
              f"p_rand={pair['p_randomization']:.4f} p_wilcoxon={pair['p_wilcoxon']:.4f} {mark}")
    if "friedman" in output:
        f = output["friedman"]
        print(f"Friedman chi2={f['statistic']:.3f} p={f['p_value']:.4g}; Tukey HSD critical rank difference {f['critical_difference']:.3f}")
        for name, rank in sorted(f["mean_ranks"].items(), key=lambda item: item[1]):
            print(f"  mean rank {rank:.3f}  {name}")
        for label, p in f["tukey_hsd_p"].items():
            print(f"  HSD {label}: p={p:.4g}")
    return 0


def cmd_judge(args: argparse.Namespace) -> int:
    """Append --record judgments, load all judgments, print MTC confidence and the next pairs to judge."""
    from app.eval.mtc import MinimalTestCollection, build_pool

    try:
        levels = sorted({int(level) for level in args.levels.split(",")})  # qrels gains are integers
    except ValueError:
        print(f"error: --levels must be comma-separated integers, got {args.levels!r}", file=sys.stderr)
        return 2
    for qid, doc, gain in args.record:
        if not gain.lstrip("-").isdigit() or int(gain) not in levels:
            print(f"error: gain {gain} is not one of the levels {args.levels}", file=sys.stderr)
            return 2
        with open(args.judgments, "a", encoding="utf-8") as handle:
            handle.write(f"{qid} 0 {doc} {int(gain)}\n")
    judgments = read_qrels(args.judgments) if args.judgments.exists() else {}
    mtc = MinimalTestCollection(build_pool(_load_runs(args.runs), args.k), levels)
    outside_pool = 0
    try:
        for qid, docs in judgments.items():
            for doc, gain in docs.items():
                outside_pool += not mtc.record(qid, doc, float(gain))
    except ValueError as exc:  # a judgment outside the declared levels
        print(f"error: {args.judgments}: {exc}", file=sys.stderr)
        return 2
    if args.gain_model == "ordinal" and mtc.judged.any():
        from app.eval.gain_models import OrdinalGainModel, output_features

        # fitted on the judged pairs only: a biased sample (MTC judges disagreements first), so
        # prefer it once a fair number of judgments exist
        features = output_features(mtc.pool)
        model = OrdinalGainModel(levels).fit(features[mtc.judged], mtc.gains[mtc.judged])
        mtc.set_probabilities(model.predict_proba(features))
    pool = mtc.pool
    proposals = [{"qid": pool.pairs[i][0], "doc": pool.pairs[i][1], "weight": int(mtc.weights[i])} for i in mtc.next_pairs(args.next)]
    output = {
        "judged": int(mtc.judged.sum()),
        "pool": len(pool),
        "judgments_outside_pool": int(outside_pool),
        "confidence": mtc.mean_confidence(),
        "system_means": mtc.system_means(),
        "pairs": [p.__dict__ for p in mtc.pairwise()],
        "next": proposals,
    }
    if args.format == "json":
        print(json.dumps(output, indent=2))
        return 0
    print(f"judged {output['judged']} of {output['pool']} pooled pairs; confidence in the ranking {output['confidence']:.4f}")
    for name, mean in sorted(output["system_means"].items(), key=lambda item: -item[1]):
        print(f"  E[AG@{args.k}] {mean:.4f}  {name}")
    for p in mtc.pairwise():
        print(f"  {p.system_a} - {p.system_b}: E={p.expected_difference:+.4f} sd={p.variance ** 0.5:.4f} confidence={p.confidence:.4f}")
    print("next to judge (qid doc weight):")
    for proposal in proposals:
        print(f"  {proposal['qid']} {proposal['doc']} {proposal['weight']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write the metrics table and plots of several runs into --out."""
    from app.eval import report as rep

    runs = _load_runs(args.runs)
    qrels = read_qrels(args.qrels)
    args.out.mkdir(parents=True, exist_ok=True)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    table = {name: aggregate(evaluate(rankings, qrels, metrics)[1]) for name, rankings in runs.items()}
    doc = rep.Report(args.title, table, notes=[f"{len(qrels)} judged queries, {len(runs)} runs"])
    curves = {name: rep.mp_at_k_curve(rankings, qrels, args.k_max) for name, rankings in runs.items()}
    doc.images.append(("MP@K against K", rep.plot_mp_at_k(curves, args.out / "mp_at_k.png")))
    pr = {name: rep.interpolated_precision_recall(rankings, qrels) for name, rankings in runs.items()}
    doc.images.append(("Precision-recall (11-point interpolated)", rep.plot_precision_recall(pr, args.out / "precision_recall.png")))
    if args.query_classes:
        with open(args.query_classes, newline="", encoding="utf-8") as handle:
            classes = {row["qid"]: row["class"] for row in csv.DictReader(handle)}
        per_class = {name: rep.per_class_precision(rankings, qrels, classes, args.class_k) for name, rankings in runs.items()}
        doc.images.append((f"P@{args.class_k} per class", rep.plot_per_class(per_class, args.class_k, args.out / "per_class.png")))
    if args.embeddings:
        data = np.load(args.embeddings, allow_pickle=False)
        labels = [str(label) for label in data["labels"]]
        doc.images.append(("t-SNE of embeddings by class", rep.plot_tsne(data["vectors"], labels, args.out / "tsne.png")))
    if args.mtc_k > 0 and len(runs) >= 2:
        doc.images.append(("MTC: confidence and accuracy against judgments", _mtc_plot(runs, qrels, args.mtc_k, args.out, doc)))
    path = rep.write_report(doc, args.out, args.format)
    print(f"wrote {path}")
    return 0


def _mtc_plot(runs: dict[str, dict[str, list[str]]], qrels: Any, k: int, out: Path, doc: Any) -> Path:
    """Simulate MTC (uniform prior) with the qrels as assessor and plot its curve."""
    from app.eval.mtc import build_pool
    from app.eval.mtc_simulation import simulate_mtc
    from app.eval.report import plot_confidence

    levels = sorted({0.0} | {float(g) for docs in qrels.values() for g in docs.values() if g >= 0})
    result = simulate_mtc(build_pool(runs, k), qrels, levels)
    if result.at_target is not None:
        doc.notes.append(f"MTC (AG@{k}, uniform prior): 95% confidence after {result.judgments_at_target} of "
                         f"{result.pool_size} pooled judgments, accuracy {result.at_target.accuracy:.3f}")
    trace = [(t.judgments, t.confidence, t.accuracy) for t in result.trace]
    return plot_confidence({"uniform prior": trace}, out / "mtc_confidence.png")
