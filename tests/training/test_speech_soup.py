"""`recall train general-audio --speech-soup`: the speech branches of several fine-tunes averaged, the hash
layer's statistics estimated again on training-side windows; tiny checkpoints, no ../shared needed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import soundfile as sf
import torch

from app.encoders.checkpoint import CheckpointError, load_checkpoint, read_config, save_checkpoint
from app.encoders.registry import load_checkpoint_dir
from app.training.general_audio.recipe import main as general_audio_main
from app.training.general_audio.speech_soup import average_states, reestimate_hash_norm
from app.training.general_audio.speech_views_fit import fit_paths, window_batches
from tests.encoders.test_routed_fusion import fused_dir  # noqa: F401 (fixture)
from tests.training.test_speech_views_fit import data  # noqa: F401 (fixture)

START = {"name": "speech-attn-hash", "weights_sha256": "0" * 64}


def test_average_states_is_the_elementwise_mean_and_keeps_integer_buffers() -> None:
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(5)}
    b = {"w": torch.tensor([3.0, -2.0]), "n": torch.tensor(9)}
    c = {"w": torch.tensor([2.0, 3.0]), "n": torch.tensor(1)}
    out = average_states([a, b, c])
    assert torch.equal(out["w"], torch.tensor([2.0, 1.0])) and out["w"].dtype == torch.float32
    assert out["n"].item() == 5  # batch-norm's step counter: the first's, not an average


def test_average_states_refuses_different_tensors() -> None:
    with pytest.raises(CheckpointError, match="other tensors"):
        average_states([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}])
    with pytest.raises(CheckpointError, match="shape"):
        average_states([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])


def test_hash_norm_statistics_are_those_of_the_batches_seen_in_eval_mode() -> None:
    from app.encoders.audio.audio_nets import AttnHashNet

    torch.manual_seed(0)
    net = AttnHashNet(n_in=5, hidden=4, d_a=3, heads=2, bits=8, hash_norm=True, dropout=0.5)
    batches = [torch.randn(6, 7, 5), torch.randn(4, 7, 5)]
    assert reestimate_hash_norm(net, batches) == 10
    # by hand: the hash layer's pre-activations of all 10 windows, dropout off
    with torch.no_grad():
        pre = []
        for feats in batches:
            h, _ = net.blstm((feats - net.input_mean) / net.input_std)
            attention = torch.softmax(net.w2(torch.tanh(net.w1(h))).transpose(1, 2), dim=-1)
            pre.append(net.hash((attention @ h).flatten(1)))
        z = torch.cat(pre)
    torch.testing.assert_close(net.hash_norm.running_mean, z.mean(0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(net.hash_norm.running_var, z.var(0, unbiased=True), atol=1e-5, rtol=1e-4)
    assert not net.training and not net.hash_norm.training


def _fine_tune(fused: Path, target: Path, seed: int) -> Path:
    """A copy of the tiny fused checkpoint whose speech weights moved by a seeded step, as a fine-tune would."""
    shutil.copytree(fused, target)
    state, config = load_checkpoint(target / "speech")
    generator = torch.Generator().manual_seed(seed)
    moved = {k: v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() and not k.startswith("input_")
             else v for k, v in state.items()}
    save_checkpoint(target / "speech", moved, {**config, "init_from": START, "split": {"val": [f"v{seed}", "both"]}})
    return target


def test_cli_averages_fine_tunes_and_reestimates_the_bit_thresholds(data: Path, fused_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    sources = [_fine_tune(fused_dir, tmp_path / f"ft{seed}", seed) for seed in (1, 2, 3)]
    out = tmp_path / "soup"
    argv = ["--data", str(data), "--speech-soup", ",".join(map(str, sources)), "--out", str(out), "--version", "5"]
    assert general_audio_main(argv) == 0
    config, speech_config = read_config(out), read_config(out / "speech")
    assert config["version"] == "5" and [i["path"] for i in config["speech_soup"]["of"]] == [str(s) for s in sources]
    assert config["reproduce"]["train"].startswith("recall train general-audio --data")
    assert config["description"].endswith("; its speech branch the weight average of 3 fine-tunes")
    assert speech_config["split"]["val"] == ["both"]  # only the speaker no ingredient trained on stays out
    state, _ = load_checkpoint(out / "speech")
    states = [load_checkpoint(s / "speech")[0] for s in sources]
    for key, value in state.items():
        if key.startswith("hash_norm."):
            continue
        torch.testing.assert_close(value, sum(s[key] for s in states) / 3 if value.is_floating_point() else states[0][key])
    # the statistics: the averaged network's pre-activations on the training-side windows, by hand
    encoder = load_checkpoint_dir(out)
    net = encoder.speech.net
    clips = [sf.read(p, dtype="float32")[0] for p in fit_paths(data, speech_config, 0)]
    with torch.no_grad():
        pre = []
        for waves in window_batches(clips, 16000, 1.0, 0.5, 16000):
            feats = encoder.speech.features(encoder._speech_waves(waves))
            h, _ = net.blstm((feats - net.input_mean) / net.input_std)
            attention = torch.softmax(net.w2(torch.tanh(net.w1(h))).transpose(1, 2), dim=-1)
            pre.append(net.hash((attention @ h).flatten(1)))
    z = torch.cat(pre)
    torch.testing.assert_close(state["hash_norm.running_mean"], z.mean(0), atol=1e-4, rtol=1e-4)
    assert read_config(out / "speech")["soup_of"][0]["val"] == ["v1", "both"]
    assert config["speech_soup"]["sounds_and_router_from"] == str(sources[0])
    assert (out / "sounds" / "weights.safetensors").read_bytes() == (sources[0] / "sounds" / "weights.safetensors").read_bytes()
    assert "weight average (`--speech-soup`) of 3 fine-tunes" in (out / "DATA.md").read_text()
    assert encoder.encode([clips[0][:16000]]).codes.shape == (1, encoder.bits // 8)
    # and it is a base for the views, like any fine-tune
    assert general_audio_main(["--data", str(data), "--views-from", str(out), "--mfcc-bits", "8",
                               "--out", str(tmp_path / "soup-views")]) == 0


def test_cli_refuses_ingredients_that_do_not_average(data: Path, fused_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    a, b = _fine_tune(fused_dir, tmp_path / "a", 1), _fine_tune(fused_dir, tmp_path / "b", 2)
    run = lambda *sources, out="soup": general_audio_main(  # noqa: E731
        ["--data", str(data), "--speech-soup", ",".join(map(str, sources)), "--out", str(tmp_path / out)])
    with pytest.raises(SystemExit, match="at least two"):
        run(a)
    with pytest.raises(SystemExit, match="must differ"):
        general_audio_main(["--data", str(data), "--speech-soup", f"{a},{b}", "--out", str(a)])
    other = tmp_path / "other-start"
    shutil.copytree(b, other)
    cfg = json.loads((other / "speech" / "config.json").read_text())
    cfg["init_from"] = {**START, "weights_sha256": "1" * 64}
    (other / "speech" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="started from other weights"):
        run(a, other)
    scratch = []
    for seed in (0, 1):  # from scratch: the seed that drew the initial weights must agree
        target = tmp_path / f"scratch-{seed}"
        shutil.copytree(b, target)
        cfg = json.loads((target / "speech" / "config.json").read_text())
        cfg.pop("init_from")
        cfg["training"] = {"seed": seed}
        (target / "speech" / "config.json").write_text(json.dumps(cfg))
        scratch.append(target)
    with pytest.raises(CheckpointError, match="started from other weights"):
        run(*scratch)
    with pytest.raises(CheckpointError, match="started from other weights"):
        run(a, scratch[0])
    loco = tmp_path / "loco"
    shutil.copytree(b, loco)
    cfg = json.loads((loco / "config.json").read_text())
    cfg["without"] = "fsdd"
    (loco / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="left out other data"):
        run(a, loco)
    assert not (tmp_path / "soup").exists()  # nothing written by a refused run


def test_cli_refuses_two_steps_of_the_chain_at_once(data: Path, fused_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(SystemExit, match="--speech-soup and --views-from are separate steps"):
        general_audio_main(["--data", str(data), "--speech-soup", f"{fused_dir},{fused_dir}", "--views-from",
                            str(fused_dir), "--mfcc-bits", "8", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()
