"""DATA.md of a general-audio checkpoint: which data trained which part, under which licence.

Written next to the weights so the licences travel with the checkpoint; a corpus left out with
``--without`` is not listed, and what replaced it is.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from app.training.general_audio.data import left_out

DATA_MD = """# Data behind `{name}`

An encoder of the general-audio recipe (speech and sounds, routed into one code). Its parts were trained on:

| part | data | licence |
|---|---|---|
{rows}

{use}Held out of every step (for reports/audio/generalisation.md): {holdout}.
"""
NON_COMMERCIAL = """Because ESC-50 is non-commercial, this checkpoint is for **non-commercial research use**; the speech
branch alone (`speech/`) was trained on CC BY / CC BY-SA data and synthetic speech only. """
ASC_ROW = ("| {part} | **Arabic Speech Commands** (Ghandoura, Hjabo, Al Dakkak, Engineering Applications of AI 2021; "
           "https://github.com/abdulkaderghandoura/arabic-speech-commands-dataset): 13 of 18 speakers | CC BY 4.0 |")
FSDD_ROW = ("| {part} | **Free Spoken Digit Dataset** (https://github.com/Jakobovski/free-spoken-digit-dataset): "
            "speakers george and lucas{how} | CC BY-SA 4.0 |")
SYNTH_ROW = ("| {part} | speech synthesised here by **espeak-ng**: made-up words in 30 languages, 184 English words and "
             "the English digits, many voices (app/training/synthesis/pseudowords.py, speech.py){how} | made by this project |")
ESC_ROW = ("| sounds branch, router | **ESC-50** (K. J. Piczak, ACM Multimedia 2015; https://github.com/karolpiczak/ESC-50): "
           "17 of the 25 classes in ../shared/data; per-clip attributions in `sounds/DATA.md` | CC BY-NC 3.0 (ESC-10 clips CC BY 3.0) |")
GIVEN_ROW = "| speech branch | the `speech-attn-hash` checkpoint: see `speech/DATA.md` | CC BY 4.0 |"
GENERATED_ROW = ("| {part} | non-speech generated here: silence, noise and tones{varied} (app/training/general_audio/router_fit.py"
                 "{module}) | made by this project |")
VARIED = ", and bursts, impacts, sweeps, harmonic tones, click trains, crackle and tones in noise"
UNLABELLED_SOUNDS_ROW = ("| sounds branch (no labels) | the texture statistics' whitening alone, fitted on the synthetic "
                         "English words and the generated non-speech above | made by this project |")
WORDS_AS_SOUND_LABELS_ROW = ("| sounds branch (no sound labels) | the synthetic English words above, as the texture "
                             "head's classes | made by this project |")
ESC_ATTRIBUTIONS = Path(__file__).resolve().parents[2] / "assets" / "models" / "sounds-texture" / "DATA.md"
# what GET /v1/encoders shows as the checkpoint's licence (config "licence"); a speech swap and the speech views
# copy it from the checkpoint they start from, whose sounds branch and router decide it (the speech head's data are
# CC BY / CC BY-SA either way)
COMMERCIAL_LICENCE = ("commercial use allowed: CC BY 4.0 and CC BY-SA 4.0 recordings (credit them; share adapted "
                      "material alike), an Apache-2.0 front-end, data made here (DATA.md)")
NON_COMMERCIAL_LICENCE = "non-commercial: its sounds branch and router learnt from ESC-50 (CC BY-NC 3.0; DATA.md)"


# what each training-side manifest the recipe writes is (data.py), as a speech head's card names it
HEAD_SOURCES = (
    (lambda p: p.name.startswith("asc"), "**Arabic Speech Commands** (Ghandoura, Hjabo, Al Dakkak, "
     "Engineering Applications of AI 2021): every speaker but {held}", "CC BY 4.0"),
    (lambda p: p.name.startswith("fsdd"), "**Free Spoken Digit Dataset**: speakers george and lucas, "
     "digits 0 1 3 4 6 8", "CC BY-SA 4.0"),
    (lambda p: p.parent.name == "pseudo", "espeak-ng made-up words in 30 languages, each take in its own voice "
     "(app/training/synthesis/pseudowords.py)", "made by this project"),
    (lambda p: p.parent.name == "synth-en", "espeak-ng English everyday words in 12 voices", "made by this project"),
    (lambda p: p.name == "digits-train.csv", "espeak-ng English digits 0 1 3 4 6 8 in many voices", "made by this project"),
)


def speech_head_row(speech_config: dict[str, Any], held_speakers: list[str]) -> str:
    """The card's row for a speech head, from the manifests its own config says it trained on."""
    training = speech_config.get("training", {})
    manifests = [Path(m) for m in [training.get("manifest", ""), *training.get("extra_manifests", [])] if m]
    data, terms = [], []
    for path in manifests:
        known = [(text, term) for match, text, term in HEAD_SOURCES if match(path)]
        text, term = known[0] if known else (f"`{path.name}`", "see that manifest's source")
        data.append(text.format(held=", ".join(held_speakers)))
        terms += [term] if term not in terms else []
    return (f"| speech head (paper 004's BLSTM, attentive pooling and hash layer) | {'; '.join(data)} | "
            f"{'; '.join(terms)} |")


def licence(without: str | None) -> str:
    """The licence a recipe checkpoint inherits from its training data: ESC-50 alone makes it non-commercial."""
    return COMMERCIAL_LICENCE if "esc" in left_out(without) else NON_COMMERCIAL_LICENCE


def data_md(name: str, holdout: dict[str, Any], speech: str, without: str | None = None, negatives: str = "basic",
            sounds_without_labels: str = "words") -> str:
    """DATA.md for a checkpoint whose speech branch was ``given`` (--speech-from) or trained from ``scratch``,
    with the corpora ``without`` names left out."""
    skipped = left_out(without)
    held = ", ".join(holdout.get("fsdd_words", []))
    rows = [GIVEN_ROW] if speech == "given" else []
    asc = ASC_ROW.format(part="speech branch, router")
    if speech == "given":
        fsdd, synth = FSDD_ROW.format(part="router", how=""), SYNTH_ROW.format(part="router", how="")
    else:
        fsdd = FSDD_ROW.format(part="speech branch, router", how=f"; digits {held} left out")
        synth = SYNTH_ROW.format(part="speech branch, router", how="")
    rows += [row for corpus, row in (("asc", asc), ("fsdd", fsdd), ("", synth)) if corpus not in skipped]
    varied = negatives == "varied"
    whitening = "esc" in skipped and sounds_without_labels == "whiten"
    rows.append(GENERATED_ROW.format(part="router" + (", sounds branch" if whitening else ""),
                                     varied=VARIED if varied else "", module=", synthesis/non_speech.py" if varied else ""))
    if "esc" in skipped:
        rows.append(UNLABELLED_SOUNDS_ROW if whitening else WORDS_AS_SOUND_LABELS_ROW)
    else:
        rows.append(ESC_ROW)
    return DATA_MD.format(name=name, rows="\n".join(rows), holdout=json.dumps(holdout),
                          use="" if "esc" in skipped else NON_COMMERCIAL)


def write_data_card(out: Path, name: str, holdout: dict[str, Any], speech: str, without: str | None, negatives: str,
                    sounds_without_labels: str) -> None:
    """DATA.md in ``out``, and the ESC-50 clips' Freesound credits in ``out/sounds`` when they trained it."""
    (out / "DATA.md").write_text(data_md(name, holdout, speech, without, negatives, sounds_without_labels))
    if "esc" not in left_out(without) and ESC_ATTRIBUTIONS.is_file():  # the same ESC-50 training clips
        shutil.copyfile(ESC_ATTRIBUTIONS, out / "sounds" / "DATA.md")
