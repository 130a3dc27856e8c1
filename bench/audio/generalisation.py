"""Does the default audio encoder generalise? Query-by-example on data disjoint from its training.

    python -m bench.audio.generalisation --data ../shared/data [--loco asc=DIR,fsdd=DIR,esc=DIR]

Writes reports/audio/generalisation.{json,md}. The protocol is what a user of the service gets:
an audio collection with the encoder's default window and hop, every clip searches the others
(leave-one-out), relevant = same label, and clips are windowed and ranked as the service does by
default: silent windows skipped (``app.features.windows.audible``) and ``item_distance = mean`` (each of
the query's windows scores its best window of the item, averaged over the query's windows). The
``*_before`` keys hold the service's rule before 2026-11-26: every window, the best pair of windows.
MAP is reported for float (cosine) and Hamming search. Sets (held-out lists in app/training/general_audio/recipe.py):

- ``asc_unseen_speakers``: Arabic keywords trained on, said by 5 speakers no model trained on;
- ``asc_unseen_words``: the 8 keywords held out of training, by the same unseen speakers;
- ``fsdd_unseen_speakers``: English digits by the 2 FSDD speakers held out;
- ``fsdd_unseen_words``: the digit words no training step heard (real or synthetic), by those speakers;
- ``esc_unseen_classes``: the 8 ESC-50 classes held out.

With ``--loco``, each checkpoint trained without one corpus (``recall train general-audio
--without X``) is scored on that corpus's sets: leave-one-corpus-out. Training-free baselines
(app/eval/audio_baselines.py and the ``audio-baseline`` encoder) are measured in the same run.
``--loco-only`` measures just the LOCO checkpoints and their baselines and merges them into the
existing report (bench/audio/loco.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

from app.encoders.base import Encoder
from app.eval.audio_baselines import BASELINES
from app.eval.frontend_baselines import FRONTENDS
from bench.audio.sets import (  # noqa: F401 (re-exported: the sets and scoring are this bench's own API)
    CORPUS_OF, RATE, baseline_system, best_pair_scores, encoder_system, evaluation_sets, frontend_system, load_clips,
    qbe_map, score, windowed,
)

TRAINED = ("general-audio-commercial", "general-audio-commercial@1", "general-audio-commercial-voices", "general-audio", "general-audio-broad", "general-audio@5", "speech-attn-hash", "sounds-texture")


def spoken_term_localisation(data: Path, encoders: dict[str, Encoder]) -> dict[str, Any]:
    """bench.audio.quality's localisation task (long recordings of held-out speakers' keywords) for these encoders."""
    from app.training.audio.data import read_manifest
    from app.training.general_audio.data import ASC_HOLDOUT_SPEAKERS
    from bench.audio.quality import localisation

    held = set(ASC_HOLDOUT_SPEAKERS)
    return localisation(encoders, [r for r in read_manifest(data / "asc" / "asc.csv") if r.speaker in held])


def _before_table(report: dict[str, Any], sets: list[str]) -> list[str]:
    """The sets where the service's previous windowing and item rule rank differently, under that rule."""
    multi = [s for s in sets if any("float_before" in row.get(s, {}) and row[s]["float_before"] != row[s]["float"]
                                    for row in report["results"].values())]
    if not multi:  # only sets with clips of several windows or with silent windows differ
        return []
    lines = ["", "The same systems as the service ranked before 2026-11-26: every window indexed (silent ones "
             "too) and an item scored by its nearest pair of windows (`item_distance = min`). The sets not "
             "shown have one audible window per clip, where both agree:", "",
             "| system | " + " | ".join(multi) + " |", "|---|" + "---|" * len(multi)]
    for system, row in report["results"].items():
        cells = [f"{row[s]['float_before']:.3f}" + (f" / {row[s]['hamming_before']:.3f}" if "hamming_before" in row[s] else "")
                 if s in row and "float_before" in row[s] else "" for s in multi]
        if any(cells):
            lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    sets = list(report["sets"])
    lines = ["# Audio generalisation: query-by-example on data disjoint from training", "",
             f"Written by `python -m bench.audio.generalisation` on {report['date']} ({report['machine']}).",
             "MAP, float / Hamming; baselines are training-free and measured in the same run.", "",
             "| system | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    for system, row in report["results"].items():
        cells = []
        for s in sets:
            r = row.get(s)
            cells.append("" if r is None else f"{r['float']:.3f}" + (f" / {r['hamming']:.3f}" if "hamming" in r else ""))
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += _before_table(report, sets)
    if report.get("loco_note"):
        lines += ["", f"Leave-one-corpus-out: {report['loco_note']}."]
    lines += ["", "Sets: " + "; ".join(f"`{s}` {v['clips']} clips, {v['labels']} labels" for s, v in report["sets"].items()), ""]
    from bench.audio.loco import markdown_section

    lines += markdown_section(report)
    if report.get("localisation"):
        loc = report["localisation"]
        lines += ["## Spoken-term localisation", "",
                  f"{loc['recordings']} long recordings of {loc['words_per_recording']} keywords each by held-out speakers, "
                  f"{loc['queries']} queries said by another held-out speaker (bench/audio/quality.py's task).", "",
                  "| encoder | search | AxIoU@5 | R@1, IoU > 0.5 |", "|---|---|---|---|"]
        for name, value in loc.items():
            if isinstance(value, dict) and "float" in value:
                for kind in ("float", "hamming"):
                    lines.append(f"| {name} | {kind} | {value[kind]['axiou@5']:.3f} | {value[kind]['r@1,iou>0.5']:.3f} |")
        lines.append("")
    if report.get("targets"):
        lines += ["## Targets (issue 37)", "", "| target | needed | result | met | by |", "|---|---|---|---|---|"]
        for t in report["targets"]:
            lines.append(f"| {t['what']} | {t['needed']} | {t['result']} | {'yes' if t['met'] else '**no**'} | {t.get('margin', '')} |")
    return "\n".join(lines) + "\n"


PREVIOUS_DEFAULT = "general-audio@5"  # the default before the pretrained front-ends (issue 37)


def targets(results: dict[str, dict[str, Any]], default: str, holdout: dict[str, Any],
            localisation: dict[str, Any] | None = None, loco_runs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Issue 37's targets for the default encoder; ``holdout`` is its checkpoint's record of what it never trained on;
    a leave-one-corpus-out row measured on its own (``loco_runs``) is compared with the baselines of its own run."""
    from bench.audio.loco import best_baseline

    d, logmel = results[default], results["logmel-mean-std"]
    out = []
    # unseen words: the held-out keywords when the speech branch held them out; else the held-out
    # digit words when it trained on the others; else all English digits
    words = ("asc_unseen_words" if holdout.get("asc_words") else
             "fsdd_unseen_words" if holdout.get("fsdd_words") else "fsdd_unseen_speakers")

    def add(what: str, needed: float, value: float, kind: str = "float") -> None:
        out.append({"what": f"{what} ({kind})", "needed": f">= {needed:.3f}", "result": f"{value:.3f}", "met": value >= needed,
                    "margin": f"{value - needed:+.3f}"})

    for kind in ("float", "hamming"):
        add("English digits, unseen speakers MAP >= 0.93", 0.93, d["fsdd_unseen_speakers"][kind], kind)
        add(f"unseen words ({words}) MAP >= 0.93", 0.93, d[words][kind], kind)
        add("Arabic keywords, unseen speakers MAP >= 0.90", 0.90, d["asc_unseen_speakers"][kind], kind)
        add("unseen sound classes >= 1.5x log-mel", 1.5 * logmel["esc_unseen_classes"]["float"], d["esc_unseen_classes"][kind], kind)
    for s in results[default]:
        add(f"Hamming >= 0.95x float, {s}", 0.95 * d[s]["float"], d[s]["hamming"], "ratio")
    before = PREVIOUS_DEFAULT if localisation and PREVIOUS_DEFAULT in localisation else "speech-attn-hash"
    if localisation and default in localisation and before in localisation and before != default:
        for kind in ("float", "hamming"):
            for metric in ("axiou@5", "r@1,iou>0.5"):
                add(f"localisation {metric} no worse than {before}", localisation[before][kind][metric],
                    localisation[default][kind][metric], kind)
    for name, row in results.items():
        if not name.startswith("loco"):
            continue
        for s, r in row.items():
            best = best_baseline(results, loco_runs or {}, name, s)
            for kind in ("float", "hamming"):
                add(f"{name} on {s} >= 1.3x the best baseline", 1.3 * best, r[kind], kind)
    return out


def main(argv: list[str] | None = None) -> int:
    import platform

    from app.encoders.registry import create_encoder, discover, load_checkpoint_dir
    from app.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m bench.audio.generalisation")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--out", default="reports/audio")
    parser.add_argument("--encoders", default=",".join(TRAINED))
    parser.add_argument("--loco", default="", help="corpus[:tag]=checkpoint dir pairs, e.g. asc=.gl/loco-asc,esc=.gl/loco-esc")
    parser.add_argument("--loco-only", action="store_true",
                        help="measure only the --loco checkpoints and the baselines (same run) and merge them into "
                             "OUT/generalisation.json, every other row unchanged")
    parser.add_argument("--localisation", action="store_true",
                        help="with --rerender: add the spoken-term localisation task to an existing report")
    parser.add_argument("--keep-loco", action="store_true",
                        help="a full run: keep OUT/generalisation.json's leave-one-corpus-out rows (each with its own "
                             "run's baselines) instead of dropping them")
    parser.add_argument("--rerender", action="store_true",
                        help="recompute targets and the markdown from OUT/generalisation.json without measuring again")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.rerender:
        report = json.loads((out / "generalisation.json").read_text())
        if "default_holdout" not in report:  # a report written before the holdout was recorded
            from app.encoders.checkpoint import read_config
            from app.encoders.registry import discover

            report["default_holdout"] = read_config(discover()[report["default_encoder"]].source).get("holdout", {})
        if args.localisation and "localisation" not in report:
            from app.encoders.registry import create_encoder, discover

            specs = discover()
            names = [report["default_encoder"], "speech-attn-hash", "audio-baseline"]
            report["localisation"] = spoken_term_localisation(Path(args.data), {n: create_encoder(n, specs) for n in names})
        report["targets"] = targets(report["results"], report["default_encoder"], report["default_holdout"],
                                    report.get("localisation"), report.get("loco_runs"))
        (out / "generalisation.json").write_text(json.dumps(report, indent=2) + "\n")
        (out / "generalisation.md").write_text(markdown(report))
        return 0
    if args.loco_only:
        from bench.audio.loco import measure

        if not args.loco:
            raise SystemExit("--loco-only needs --loco")
        report = measure(Path(args.data), args.loco, json.loads((out / "generalisation.json").read_text()))
        report["targets"] = targets(report["results"], report["default_encoder"], report["default_holdout"],
                                    report.get("localisation"), report.get("loco_runs")) \
            if report["default_encoder"] in report["results"] else []
        (out / "generalisation.json").write_text(json.dumps(report, indent=2) + "\n")
        (out / "generalisation.md").write_text(markdown(report))
        print(f"-> {out / 'generalisation.md'}")
        return 0

    sets = evaluation_sets(Path(args.data))
    clips = {name: load_clips(paths) for name, (_, paths) in sets.items()}
    specs = discover()
    systems: dict[str, tuple[Callable, float, float]] = {name: baseline_system(fn) for name, fn in BASELINES.items()}
    systems |= {name: frontend_system(fn) for name, fn in FRONTENDS.items()}
    for name in ["audio-baseline", *[e for e in args.encoders.split(",") if e]]:
        # a registered name, or a checkpoint directory (a run not installed in app/assets/models)
        encoder = load_checkpoint_dir(name) if Path(name).is_dir() else create_encoder(name, specs)
        systems[name if not Path(name).is_dir() else encoder.name] = encoder_system(encoder)
    from bench.audio.loco import parse_loco, run_info

    loco = parse_loco(args.loco, tuple(sorted(set(CORPUS_OF.values()))))
    loco_runs = {row: run_info(directory, corpus) for row, corpus, directory in loco}  # refuse before measuring
    for run in loco_runs.values():  # measured in this run, beside its baselines
        run["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    results: dict[str, dict[str, Any]] = {}
    for name, system in systems.items():
        results[name] = {s: score(system, clips[s], sets[s][0]) for s in sets}
        print(name, {s: (r["float"], r.get("hamming")) for s, r in results[name].items()}, flush=True)
    for row, corpus, directory in loco:
        system = encoder_system(load_checkpoint_dir(directory))
        results[row] = {s: score(system, clips[s], sets[s][0]) for s in sets if CORPUS_OF[s] == corpus}
        print(row, results[row], flush=True)

    default = Settings().encoders.default_audio
    holdout = getattr(create_encoder(default, specs), "config", {}).get("holdout", {}) if default in specs else {}
    report = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
              "default_encoder": default,
              "sets": {s: {"clips": len(v[0]), "labels": len(set(v[0]))} for s, v in sets.items()},
              "results": results,
              "default_holdout": holdout,
              **({"loco_runs": loco_runs} if loco_runs else {}),
              "localisation": spoken_term_localisation(
                  Path(args.data), {n: create_encoder(n, specs) for n in dict.fromkeys(
                      (default, PREVIOUS_DEFAULT, "speech-attn-hash", "audio-baseline")) if n in specs})}
    if args.keep_loco and (out / "generalisation.json").is_file():
        from bench.audio.loco import keep_loco_rows

        keep_loco_rows(report, json.loads((out / "generalisation.json").read_text()))
    report["targets"] = targets(results, default, holdout, report["localisation"],
                                report.get("loco_runs")) if default in results else []
    out.mkdir(parents=True, exist_ok=True)
    (out / "generalisation.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "generalisation.md").write_text(markdown(report))
    print(f"-> {out / 'generalisation.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
