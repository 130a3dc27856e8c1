"""Where a routed-fusion encoder's router sends windows: the share of each set's audible windows it
embeds in the speech half (p(speech) >= 0.5), for the held-out sets of bench/audio/generalisation.py
and for fresh generated non-speech of every kind (new draws, not the windows any router trained on).

    python -m bench.audio.routing --data ../shared/data [--encoders general-audio@3,general-audio]
        [--loco "esc=.gl/loco-esc-v4,esc:version 1-3 recipe=.gl/loco-esc-ckpt"] [--out reports/audio]

Writes OUT/routing.{json,md}. A speech window routed to the sounds half, or a sound routed to the
speech half, is compared with the wrong kind of window by the wrong branch; this is the check that
it does not happen on data nobody trained on (reports/audio/README.md, version 4).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.training.general_audio.router_fit import generated_non_speech
from app.training.synthesis.non_speech import VARIED_KINDS, varied_non_speech

FRESH_SEED = 12345  # the recipe draws its router's windows with seed 0 (or --seed): these are others
PER_KIND = 100
RATE = 16000


def generated_sets(per_kind: int = PER_KIND, seed: int = FRESH_SEED) -> dict[str, list[np.ndarray]]:
    """Fresh generated non-speech, one set per kind: the basic four together, then each varied kind."""
    out = {"generated: silence, noise, tones": generated_non_speech(4 * per_kind, RATE, RATE, seed)}
    varied = varied_non_speech(per_kind * len(VARIED_KINDS), RATE, RATE, seed)
    for k, kind in enumerate(VARIED_KINDS):
        out[f"generated: {kind.__name__.replace('_', ' ')}"] = varied[k:: len(VARIED_KINDS)]
    return out


def speech_share(encoder: Any, windows: list[np.ndarray]) -> float:
    return float((encoder.speech_probability(windows) >= 0.5).mean()) if windows else float("nan")


def load_encoder(spec: str) -> Any:
    """A registry key (``general-audio@3``) or a checkpoint directory."""
    from app.encoders.registry import create_encoder, discover, load_checkpoint_dir

    return load_checkpoint_dir(spec) if Path(spec).is_dir() else create_encoder(spec, discover())


def measure(data: Path, encoders: list[str], loco: str = "") -> dict[str, Any]:
    """``loco``: leave-one-corpus-out checkpoints as ``corpus[:tag]=DIR`` pairs (bench/audio/loco.py)."""
    from bench.audio.generalisation import CORPUS_OF, evaluation_sets, load_clips, windowed
    from bench.audio.loco import parse_loco

    windows: dict[str, list[np.ndarray]] = {}
    for name, (_, paths) in evaluation_sets(data).items():
        if not paths:
            continue
        flat, _, keep = windowed(load_clips(paths), 1.0, 0.5)  # the default's windows, silent ones skipped
        windows[name] = [w for w, kept in zip(flat, keep) if kept]
    windows.update(generated_sets(PER_KIND))
    systems = {spec: load_encoder(spec) for spec in encoders}
    rows = parse_loco(loco, tuple(sorted(set(CORPUS_OF.values()))))
    systems.update({row: load_encoder(directory) for row, _, directory in rows})
    shares = {}
    for label, encoder in systems.items():
        if not hasattr(encoder, "speech_probability"):
            raise SystemExit(f"{label} is not a routed-fusion encoder: it has no router")
        shares[label] = {name: round(speech_share(encoder, w), 4) for name, w in windows.items()}
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{platform.machine()}, fresh seed {FRESH_SEED}",
            "windows": {name: len(w) for name, w in windows.items()},
            "loco": {row: directory for row, _, directory in rows}, "speech_share": shares}


def markdown(report: dict[str, Any]) -> str:
    systems = list(report["speech_share"])
    lines = ["# Routing: the share of windows each router sends to the speech half", "",
             f"Written by `python -m bench.audio.routing` on {report['date']} ({report['machine']}). Audible 1 s windows "
             "(hop 0.5 s) of the held-out sets of `generalisation.md`, and fresh draws of the generated non-speech "
             "kinds (`app/training/synthesis/non_speech.py`, a seed no router trained on). Speech sets should be near 1, "
             "everything else near 0.", "",
             "| windows | n | " + " | ".join(systems) + " |", "|---|---|" + "---|" * len(systems)]
    for name, n in report["windows"].items():
        cells = [f"{report['speech_share'][s][name]:.3f}" for s in systems]
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    if report["loco"]:
        lines += ["", "Leave-one-corpus-out checkpoints: " + ", ".join(f"{row} = `{d}`" for row, d in report["loco"].items())
                  + " (`generalisation.md` lists their commands)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audio.routing")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--encoders", default="general-audio@3,general-audio",
                        help="registry keys or checkpoint directories of routed-fusion encoders")
    parser.add_argument("--loco", default="", help="corpus[:tag]=checkpoint dir pairs, e.g. esc=.gl/loco-esc-v4")
    parser.add_argument("--out", default="reports/audio")
    args = parser.parse_args(argv)
    report = measure(Path(args.data), [e for e in args.encoders.split(",") if e], args.loco)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "routing.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "routing.md").write_text(markdown(report))
    print(f"-> {out / 'routing.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
