"""Leave-one-corpus-out (LOCO) rows of reports/audio/generalisation.{json,md}, measured on their own.

    python -m bench.audio.generalisation --data ../shared/data --loco-only \\
        --loco "fsdd=.gl/loco-fsdd-v3,fsdd:version 1 recipe=.gl/loco-fsdd-v1"

A LOCO checkpoint (``recall train general-audio --without X``) is scored on corpus X's sets. Training it
takes an hour, the main run's systems do not change meanwhile, so ``--loco-only`` measures just the LOCO
checkpoints and, in the same run and on the same sets, the training-free baselines they are compared
with; it merges them into the existing report and leaves every other row as it was. Each pair's key is
the corpus, optionally ``corpus:tag`` for a second recipe on the same corpus (row "loco: without fsdd
(tag)"). A checkpoint whose ``without`` does not name that corpus is refused: a mislabelled run would
otherwise score a model on data it trained on.
"""

from __future__ import annotations

import platform
import shlex
import time
from pathlib import Path
from typing import Any

from app.training.general_audio.data import left_out

BASELINE_SYSTEMS = ("mfcc-levin", "logmel-mean-std", "audio-baseline")


def parse_loco(spec: str, corpora: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """``"fsdd=DIR,fsdd:tag=DIR2"`` -> [(row name, corpus, DIR), ...]."""
    out = []
    for pair in (p for p in spec.split(",") if p.strip()):
        key, sep, directory = pair.partition("=")
        corpus, _, tag = key.strip().partition(":")
        if not sep or not directory or corpus not in corpora:
            raise SystemExit(f"--loco: {pair!r} is not corpus[:tag]=DIR with corpus one of {', '.join(corpora)}")
        out.append((f"loco: without {corpus}" + (f" ({tag.strip()})" if tag.strip() else ""), corpus, directory))
    rows = [row for row, _, _ in out]
    if len(set(rows)) != len(rows):
        raise SystemExit("--loco: two checkpoints for the same row; tag one (corpus:tag=DIR)")
    return out


def _sources(command: str) -> list[str]:
    """The checkpoint a no-training ``--views-from`` command started from (versions 4 and 5's ``--router-from`` and
    ``--speech-soup`` chains left with their recipe code; their LOCO rows keep the commands they recorded)."""
    words = shlex.split(command)
    return [words[words.index("--views-from") + 1]] if "--views-from" in words[:-1] else []


def _chain(command: str, depth: int = 0) -> list[str]:
    """``command`` preceded by the commands that made its sources, oldest first (each source's chain in turn)."""
    from app.encoders.checkpoint import read_config

    earlier = []
    for source in _sources(command) if depth < 8 else []:
        if Path(source).is_dir():
            earlier += _chain(read_config(source).get("reproduce", {}).get("train", ""), depth + 1)
    return earlier + [command]


def run_info(directory: str, corpus: str) -> dict[str, Any]:
    """What trained the checkpoint (its commands, each source's first), refusing one not trained without ``corpus``."""
    from app.encoders.checkpoint import read_config

    config = read_config(directory)
    if corpus not in left_out(config.get("without")):
        raise SystemExit(f"--loco {corpus}={directory}: the checkpoint records without={config.get('without')!r}, "
                         f"not {corpus!r}; it would be scored on data it trained on")
    commands = _chain(config.get("reproduce", {}).get("train", ""))  # a chain: views <- the checkpoint they were fitted to
    return {"checkpoint": str(directory), "without": corpus, "name": config.get("name"), "version": config.get("version"),
            "commands": [c for c in commands if c]}


def measure(data: Path, spec: str, report: dict[str, Any]) -> dict[str, Any]:
    """Score each LOCO checkpoint and the baselines on its corpus's sets; merge them into ``report``."""
    from app.encoders.registry import create_encoder, discover, load_checkpoint_dir
    from app.eval.audio_baselines import BASELINES
    from bench.audio.sets import CORPUS_OF, baseline_system, encoder_system, evaluation_sets, load_clips, score

    loco = parse_loco(spec, tuple(sorted(set(CORPUS_OF.values()))))
    infos = {row: run_info(directory, corpus) for row, corpus, directory in loco}  # refuse before measuring
    sets = evaluation_sets(data)
    wanted = [s for s in sets if CORPUS_OF[s] in {corpus for _, corpus, _ in loco}]
    clips = {s: load_clips(sets[s][1]) for s in wanted}
    baselines = {name: baseline_system(fn) for name, fn in BASELINES.items()}
    baselines["audio-baseline"] = encoder_system(create_encoder("audio-baseline", discover()))
    measured = {name: {s: score(system, clips[s], sets[s][0]) for s in wanted} for name, system in baselines.items()}
    when = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores"}
    for row, corpus, directory in loco:
        system = encoder_system(load_checkpoint_dir(directory))
        ours = [s for s in wanted if CORPUS_OF[s] == corpus]
        report["results"][row] = {s: score(system, clips[s], sets[s][0]) for s in ours}
        report.setdefault("loco_runs", {})[row] = {
            **infos[row], **when, "baselines": {name: {s: measured[name][s] for s in ours} for name in measured}}
        print(row, {s: (r["float"], r.get("hamming")) for s, r in report["results"][row].items()}, flush=True)
    return report


def keep_loco_rows(report: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    """``report`` with ``previous``'s leave-one-corpus-out rows added, where ``report`` has no row of that name.

    A LOCO row does not depend on the default encoder and carries its own run's baselines, date and
    commands, so a full re-measure of the default (a new version) can keep the rows that took hours to train."""
    runs = report.setdefault("loco_runs", {})
    for row, run in (previous.get("loco_runs") or {}).items():
        if row not in runs and row in previous.get("results", {}):
            runs[row] = run
            report["results"][row] = previous["results"][row]
    if not runs:
        report.pop("loco_runs")
    if previous.get("loco_note") and not report.get("loco_note"):
        report["loco_note"] = previous["loco_note"]
    return report


def best_baseline(results: dict[str, Any], loco_runs: dict[str, Any], row: str, set_name: str) -> float:
    """The best training-free float MAP on ``set_name``: from the LOCO row's own run where it has one."""
    source = loco_runs.get(row, {}).get("baselines") or results
    return max(source[b][set_name]["float"] for b in BASELINE_SYSTEMS)


def markdown_section(report: dict[str, Any]) -> list[str]:
    runs = report.get("loco_runs") or {}
    if not runs:
        return []
    lines = ["## Leave-one-corpus-out runs", "",
             "Each row was trained without one corpus and scored on that corpus's sets, next to the training-free "
             "baselines measured in the same run (`--loco-only`; the other rows of the table above are not re-measured).", ""]
    for row, run in runs.items():
        lines.append(f"**{row}** (`{run['checkpoint']}`, {run.get('date', '')}):")
        lines += ["", "```sh", *run.get("commands", []), "```", ""]
        if run.get("note"):
            lines += [run["note"], ""]
        base = run.get("baselines") or {}
        if base:
            sets = list(next(iter(base.values())))
            lines += ["| same run | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
            for name, row_sets in [(row, report["results"][row]), *base.items()]:
                cells = [f"{r['float']:.3f}" + (f" / {r['hamming']:.3f}" if "hamming" in r else "") for r in
                         (row_sets[s] for s in sets)]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
            lines.append("")
    return lines
