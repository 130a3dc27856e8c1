"""Every shipped encoder on CPU and on CUDA: same embeddings, same codes, and the GPU's throughput.

    python -m bench.encoders.device_parity [--out bench/results/device_parity.json] [--tf32 off|on] [--encoders A,B]

Needs a CUDA device (it says so and exits 2 without one); the test suite never does. The service
picks CUDA by itself when present (RECALL_DEVICE=auto), so this is the check that the GPU path
gives users the same results as the CPU path the suite covers:

* floats: largest absolute difference and lowest cosine between a window's CPU and GPU embedding;
* codes: fraction of bits that differ, and of windows whose code differs at all (a bit can flip
  where an embedding coordinate sits within float rounding of zero);
* ranking: for each input as a query, whether its top-10 neighbours among the others (float
  cosine) are the same list on both devices;
* speed: windows (and seconds of audio) per wall-second at batch 256 on the GPU and on CPU.

Inputs are synthetic and seeded (noise, tones, chirps, bursts for audio; smooth random images),
so the script needs nothing but the package. Audio encoders are also checked on the real clips
shipped for the demo (``app/assets/demo``: spoken words and everyday sounds, cut into the
service's windows), because synthetic noise and tones never reach a speech branch: for the
routed default (general-audio) the "demo_clips" entry is where a window routed to the other
half on one device would show, as a code differing in about half its bits. The text side of the image-text encoder needs the
MiniLM package and is skipped, with the reason recorded, where that is not installed.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.encoders.base import Encoder
from app.encoders.registry import create_encoder, discover
from app.encoders.runtime import configure_torch

N_INPUTS = 256


def audio_inputs(sample_rate: int, window_s: float, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(int(round(window_s * sample_rate))) / sample_rate
    makers = [
        lambda: rng.standard_normal(t.size) * rng.uniform(0.01, 0.3),
        lambda: np.sin(2 * np.pi * rng.uniform(100, 3000) * t) * rng.uniform(0.05, 0.5),
        lambda: np.sin(2 * np.pi * (rng.uniform(200, 500) + rng.uniform(500, 2000) * t) * t) * 0.3,
        lambda: rng.standard_normal(t.size) * (np.sin(2 * np.pi * rng.uniform(1, 8) * t) > 0.5) * 0.2,
    ]
    return [makers[i % len(makers)]().astype(np.float32) for i in range(n)]


def demo_audio_inputs(sample_rate: int, window_s: float, hop_s: float) -> list[np.ndarray]:
    """The demo's real words and sounds at ``sample_rate``, cut into windows as the service cuts them
    (the last one may be short: the encoder pads it, as it pads a short query)."""
    from app.features.windows import cut_windows
    from app.usecases.demo_data import DEMO_DIR, SOUNDS, WORDS, read_mono

    return [window for folder in (WORDS, SOUNDS) for path in sorted((DEMO_DIR / folder).iterdir())
            for window in cut_windows(read_mono(path, sample_rate), sample_rate, window_s, hop_s)[0]]


def image_inputs(n: int, seed: int = 0) -> list[np.ndarray]:
    """Smooth random RGB images (upsampled noise), 240x320: structured enough to spread the embeddings."""
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(0, 255, (n, 6, 8, 3))
    return [np.kron(c, np.ones((40, 40, 1))).astype(np.uint8) for c in coarse]


def _top10(floats: np.ndarray) -> np.ndarray:
    unit = floats / np.maximum(np.linalg.norm(floats, axis=1, keepdims=True), 1e-12)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1, kind="stable")[:, :10]


def compare(cpu: Any, gpu: Any) -> dict[str, float]:
    a, b = cpu.floats.astype(np.float64), gpu.floats.astype(np.float64)
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    bits_a = np.unpackbits(cpu.codes, axis=1)
    bits_b = np.unpackbits(gpu.codes, axis=1)
    return {
        "max_abs_diff": float(np.abs(a - b).max()),
        "min_cosine": float(cos.min()),
        "bits_differing": float((bits_a != bits_b).mean()),
        "windows_with_any_bit_differing": float((bits_a != bits_b).any(1).mean()),
        "same_top10_lists": float((_top10(a) == _top10(b)).all(1).mean()),
    }


def throughput(encoder: Encoder, inputs: list, repeat: int = 3) -> float:
    """Inputs per wall-second, best of ``repeat`` (after one warm-up call)."""
    encoder.encode(inputs[:8])
    best = float("inf")
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        encoder.encode(inputs)  # encode returns numpy: the device work is finished when it returns
        best = min(best, time.perf_counter() - start)
    return len(inputs) / best


def check(cpu: Encoder, gpu: Encoder, inputs: list, seconds_per_input: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"inputs": len(inputs), **compare(cpu.encode(inputs), gpu.encode(inputs))}
    for device, encoder in (("cuda", gpu), ("cpu", cpu)):
        per_s = throughput(encoder, inputs)
        out[f"{device}_inputs_per_s"] = per_s
        if seconds_per_input is not None:
            out[f"{device}_audio_s_per_s"] = per_s * seconds_per_input
    out["cuda_speedup"] = out["cuda_inputs_per_s"] / out["cpu_inputs_per_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/results/device_parity.json")
    parser.add_argument("--tf32", choices=["off", "on"], default="off",
                        help="off: as the service runs (app.encoders.runtime); on: TF32 in cuDNN and matmuls, "
                             "cuDNN's own default, to see what it costs in parity")
    parser.add_argument("--encoders", default="",
                        help="comma-separated encoder names to check (default: every shipped one)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("device_parity: no CUDA device here; run it on a machine with one")
        return 2
    configure_torch(torch.get_num_threads())  # the service's settings
    if args.tf32 == "on":
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
    specs = discover()
    wanted = [name for name in args.encoders.split(",") if name]
    unknown = sorted(set(wanted) - set(specs))
    if unknown:
        parser.error(f"unknown encoder(s): {', '.join(unknown)}; shipped: {', '.join(sorted(specs))}")
    if wanted:
        specs = {name: specs[name] for name in wanted}
    report: dict[str, Any] = {
        "machine": {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cpu_threads": torch.get_num_threads(),
                    "cudnn_tf32": torch.backends.cudnn.allow_tf32, "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
                    "platform": platform.platform()},
        "encoders": {},
    }
    for name, spec in sorted(specs.items()):
        cpu = create_encoder(name, specs, device="cpu")
        gpu = create_encoder(name, specs, device="cuda")
        if spec.modality == "audio":
            inputs = audio_inputs(cpu.sample_rate, cpu.default_window_s, N_INPUTS)
            result = check(cpu, gpu, inputs, cpu.default_window_s)
            demo = demo_audio_inputs(cpu.sample_rate, cpu.default_window_s, cpu.default_hop_s or cpu.default_window_s / 2)
            result["demo_clips"] = {"inputs": len(demo), **compare(cpu.encode(demo), gpu.encode(demo))}
        else:
            result = check(cpu, gpu, image_inputs(N_INPUTS), None)
            try:
                texts = [f"a photo of {n} things on a table" for n in range(32)]
                result["text"] = compare(cpu.encode_text(texts), gpu.encode_text(texts))
            except (ImportError, ModuleNotFoundError, NotImplementedError) as exc:
                result["text"] = f"not checked: {type(exc).__name__}: {exc}"
        report["encoders"][name] = result
        print(name, json.dumps(result), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
