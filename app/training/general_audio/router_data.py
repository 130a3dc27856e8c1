"""The router's training windows for `recall train general-audio`: labelled speech and non-speech at the service rate.

Below the recipe's command line (app/training/general_audio/recipe.py) and its post-hoc steps, which both read it, so
neither has to import the other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# ``--router-negatives varied``: generated non-speech windows of the basic kinds (at least) and of the varied ones
VARIED_BASIC_FLOOR = 600
VARIED_WINDOWS = 1800
SERVICE_RATE = 16000
WINDOW_S, HOP_S = 1.0, 0.5


def router_data(manifests: dict[str, Path], synth: dict[str, Path], seed: int, per_source: int = 600,
                negatives: str = "basic"):
    """(speech windows, non-speech windows) at the service rate, a seeded sample of each source.

    ``negatives`` says which generated non-speech joins the real sounds: ``basic`` (versions 1-3):
    silence, noise and tones, half as many windows as the real sounds, at least 20; ``varied``
    (version 4): at least 600 of those plus 1,800 of nine richer kinds (app/training/synthesis/non_speech.py),
    so the router learns "not speech" from more than one corpus's classes.
    """
    from app.training.general_audio.router_fit import clip_windows, short_in_window, with_noise

    rng = np.random.default_rng(seed)
    sample = lambda path: sample_waves(path, per_source, rng)  # noqa: E731 (one generator across sources)

    speech = [w for key in ("asc", "fsdd") if key in manifests for w in sample(manifests[key])]
    speech += [w for path in synth.values() for w in sample(path)]
    speech_windows = clip_windows(speech, SERVICE_RATE, WINDOW_S, HOP_S)
    speech_windows += with_noise(speech_windows[::2], seed)
    speech_windows += short_in_window(speech[::2], SERVICE_RATE, WINDOW_S, seed)
    others = sample(manifests["esc"]) if "esc" in manifests else []
    other_windows = clip_windows(others, SERVICE_RATE, WINDOW_S, HOP_S)
    other_windows += short_in_window(others[::2], SERVICE_RATE, WINDOW_S, seed)
    return speech_windows, other_windows + generated_negatives(len(other_windows), negatives, seed)


def sample_waves(manifest: Path, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A seeded sample of up to ``n`` of a manifest's clips, in manifest order, at the service rate."""
    from app.training.audio.data import load_waves, read_manifest

    records = read_manifest(manifest)
    chosen = sorted(rng.choice(len(records), size=min(n, len(records)), replace=False))
    return load_waves([records[i] for i in chosen], SERVICE_RATE, cache_dir="/tmp/recall-audio-cache")


def generated_negatives(real: int, negatives: str, seed: int) -> list[np.ndarray]:
    """The generated non-speech that joins ``real`` real sound windows (see :func:`router_data`)."""
    from app.training.general_audio.router_fit import generated_non_speech
    from app.training.synthesis.non_speech import varied_non_speech

    window = int(WINDOW_S * SERVICE_RATE)
    floor = VARIED_BASIC_FLOOR if negatives == "varied" else 20
    basic = generated_non_speech(max(floor, real // 2), window, SERVICE_RATE, seed)
    return basic + (varied_non_speech(VARIED_WINDOWS, window, SERVICE_RATE, seed) if negatives == "varied" else [])
