import json

import numpy as np
import pytest

from app.cli import main
from tests.conftest import make_settings, tone_wav, wave_bytes
from tests.live_server import live_server


@pytest.fixture
def server(tmp_path):
    with live_server(make_settings(tmp_path, api_keys=["secret"])) as url:
        yield url


def test_ingest_a_folder_resumes_and_search(server, tmp_path, capsys):
    folder = tmp_path / "clips"
    (folder / "sub").mkdir(parents=True)
    for i, freq in enumerate([300, 900, 2700]):
        (folder / f"c{i}.wav").write_bytes(tone_wav(freq))
    (folder / "sub" / "broken.wav").write_bytes(b"RIFF not audio")
    (folder / "notes.txt").write_text("ignored: not media")
    args = ["--url", server, "--api-key", "secret"]

    assert main(["ingest", str(folder), "--collection", "c", "--modality", "audio", "--batch", "2", *args]) == 1
    err = capsys.readouterr().err
    assert "sub/broken.wav" in err
    state = json.loads((folder / ".recall-ingest-c.json").read_text())
    assert state["done"] == ["c0.wav", "c1.wav", "c2.wav"]

    # a rerun only retries what is not done yet
    (folder / "sub" / "broken.wav").write_bytes(tone_wav(5000))
    assert main(["ingest", str(folder), "--collection", "c", *args]) == 0
    assert "4 of 4 files indexed" in capsys.readouterr().out

    query = tmp_path / "q.wav"
    query.write_bytes(tone_wav(900, seconds=0.7))
    assert main(["search", str(query), "--collection", "c", "-k", "2", "--json", *args]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert results[0]["id"] == "c1.wav" and len(results) == 2
    # a 2-second query of two tones: c1 holds the first only; by the nearest pair it matches exactly
    two = tmp_path / "two.wav"
    two.write_bytes(wave_bytes(np.concatenate([0.3 * np.sin(2 * np.pi * f * np.arange(16000) / 16000) for f in (900, 5000)])))
    distances = {}
    for rule in ("mean", "min"):
        assert main(["search", str(two), "--collection", "c", "-k", "4", "--json", "--item-distance", rule, *args]) == 0
        distances[rule] = {r["id"]: r["distance"] for r in json.loads(capsys.readouterr().out)["results"]}
    assert distances["mean"]["c1.wav"] > distances["min"]["c1.wav"]


def test_ingest_into_a_missing_collection_needs_a_modality(server, tmp_path):
    (tmp_path / "a.wav").write_bytes(tone_wav())
    with pytest.raises(SystemExit, match="--modality"):
        main(["ingest", str(tmp_path / "a.wav"), "--collection", "nope", "--url", server, "--api-key", "secret"])


def test_parser_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("serve", "ingest", "search", "train", "eval"):
        assert command in out
