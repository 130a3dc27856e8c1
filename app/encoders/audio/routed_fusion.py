"""``routed-fusion`` family: one embedding for speech and everyday sounds, from two specialised branches.

Why this design: each trained branch is good on its own kind of audio only (the speech network
finds the same word said by another voice, the texture model finds the same kind of sound), and a
single network trained on both kinds, on this project's small data, loses to each specialist on
its own ground (reports/audio/generalisation.md). So one encoder runs both branches and a small
router, learned from labelled speech and non-speech windows, says how much each window is speech.
The outputs are joined into ONE vector space (their direct sum), not mixed in one index:

- float: ``[sqrt(p) * speech, sqrt(1 - p) * sounds]``, unit length by construction. Two speech
  windows compare by their speech parts, two sound windows by their sound parts, and a speech
  window against a sound window scores near 0 (cosine), far below either.
- code: 2 x ``branch bits``. The speech half carries the speech branch's bits when the router says
  speech (p >= 0.5) and zeros otherwise; the sound half the other way round. Two speech windows then
  differ only in their speech halves, and a speech window against a sound window differs in about
  half of both halves: about ``branch bits`` in all, the far end of the range.

The router is a logistic regression on the texture statistics the sound branch computes anyway, so
it costs a dot product. The speech branch runs at its own rate (8 kHz): each 16 kHz window is
resampled with soxr, as training resampled its clips.

A checkpoint directory holds ``config.json`` and ``weights.safetensors`` (the router) and one
sub-directory per branch (``speech/``, ``sounds/``), each an ordinary checkpoint of its family.

Version 3 adds optional training-free views to the speech half (app/encoders/audio/speech_views.py): a
whitening of the speech float and a downsampled-MFCC part with its own bits, which ride in the sounds
half of the code that a speech window leaves empty (``fuse``). They are on only when
the config has ``speech_views``; their buffers sit in the same weights file under ``views.``, loaded
strictly. A checkpoint without them (versions 1 and 2) loads and answers exactly as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch

from app.encoders.audio._trained_audio import example_windows, take_audio_config
from app.encoders.audio.audio_nets import fit_to_window
from app.encoders.base import Embeddings, Encoder, l2_normalise, sign_codes
from app.encoders.checkpoint import CheckpointError, load_checkpoint, load_state_strict
from app.encoders.faster_path import FasterPath
from app.encoders.side_thread import run_beside, spare_core
from app.encoders.audio.speech_views import PREFIX as VIEWS_PREFIX, SpeechViews, views_from_config
from app.encoders.traced import CpuTraces, Step, trace_step
from app.features.pretrained import ort_convs

FAMILY = "routed-fusion"
BRANCHES = ("speech", "sounds")
ENCODE_CHUNK = 64
SIDE_THREAD_MAX_WINDOWS = 2  # batches up to this size run their two halves on two threads, if no other request is in flight
# such a batch's speech_embedding front-end: on two onnxruntime threads before the sounds half ("both_cores"), on
# one beside it ("one_core"), or whichever has been faster lately ("choose", app/encoders/faster_path.py)
LONE_QUERY_FRONTEND = "choose"


class Router(torch.nn.Module):
    """Texture statistics (B, n) -> probability that a window is speech (B,)."""

    def __init__(self, n_in: int) -> None:
        super().__init__()
        self.n_in = n_in
        self.register_buffer("mean", torch.zeros(n_in))
        self.register_buffer("scale", torch.ones(n_in))
        self.register_buffer("weight", torch.zeros(n_in))
        self.register_buffer("bias", torch.zeros(1))

    def forward(self, stats: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(((stats - self.mean) / self.scale) @ self.weight + self.bias)


def fuse(speech: torch.Tensor, speech_code: torch.Tensor, sounds: torch.Tensor, sounds_code: torch.Tensor,
         p_speech: torch.Tensor, extra_code: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(float embedding, code values) of the direct sum; code value > 0 is bit 1, filler halves are all -1.

    ``extra_code`` (speech views' bits, version 3) rides at the start of the sounds half, which a speech
    window otherwise fills with -1: two speech windows compare those bits, two sound windows their sound
    bits, and a speech window against a sound window still differs in about half of all bits. So the code
    stays speech bits + sound bits long (512: the one-query Hamming kernel takes at most 512 bits).
    """
    p = p_speech.clamp(0.0, 1.0)[:, None]
    floats = torch.cat([torch.sqrt(p) * torch.nn.functional.normalize(speech, dim=1),
                        torch.sqrt(1.0 - p) * torch.nn.functional.normalize(sounds, dim=1)], 1)
    is_speech = p >= 0.5
    sounds_filler = -torch.ones_like(sounds_code)
    if extra_code is not None:
        sounds_filler = torch.cat([extra_code, sounds_filler[:, extra_code.shape[1]:]], 1)
    codes = torch.cat([torch.where(is_speech, speech_code, -torch.ones_like(speech_code)),
                       torch.where(is_speech, sounds_filler, sounds_code)], 1)
    return floats, codes


class SoundsStep(torch.nn.Module):
    """16 kHz windows -> (sound float, sound code values, p(speech), the speech views' standardised MFCC).

    The sounds half as one module, so it can run traced (app/encoders/traced.py). The speech views'
    MFCC needs only the audio: it runs here, beside the speech BLSTM (the longer half), instead of
    lengthening it. Without the MFCC view, that output is empty.
    """

    def __init__(self, sounds: Encoder, router: Router, views: SpeechViews | None) -> None:
        super().__init__()
        self.features, self.net, self.router = sounds.features, sounds.net, router
        self.views = views if views is not None and views.mfcc_bits else None
        # The sound statistics' 64-band log-mel and the MFCC view's 40-band one frame the audio alike
        # (25 ms Hann every 10 ms, 512-point FFT): one STFT serves both, the same numbers as two.
        logmel = getattr(self.features, "logmel", None)
        self.shared_stft = (self.views is not None and logmel is not None and hasattr(self.features, "from_log_mel")
                            and logmel.same_framing(self.views.logmel))

    def forward(self, audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.views is None:
            stats, z = self.features(audio), audio.new_zeros(0)
        elif self.shared_stft:
            power = self.features.logmel.power(audio)
            stats = self.features.from_log_mel(self.features.logmel.from_power(power))
            z = self.views.standardised_mfcc_of_power(power)
        else:
            stats, z = self.features(audio), self.views.standardised_mfcc(audio)
        sounds, sounds_code = self.net.embed(stats)
        return sounds, sounds_code, self.router(stats[:, 0]), z


class SpeechFrames(torch.nn.Module):
    """(B, window) speech-rate waveforms -> (B, frames, n) the speech branch's feature frames: the half's
    front-end, a step of its own so that a lone query's pretrained front-end can take both cores first."""

    def __init__(self, features: torch.nn.Module) -> None:
        super().__init__()
        self.features = features

    def forward(self, waves: torch.Tensor) -> torch.Tensor:
        return self.features(waves)


class SpeechHead(torch.nn.Module):
    """Feature frames -> (speech float, code values, the frames averaged over time).

    The averaged frames feed the speech views' front-end view (version 7); without it that output is empty,
    so the step costs what the branch alone costs."""

    def __init__(self, net: torch.nn.Module, keep_frames: bool) -> None:
        super().__init__()
        self.net, self.keep_frames = net, keep_frames

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        values, codes = self.net.embed(frames)
        return values, codes, frames.mean(dim=1) if self.keep_frames else frames.new_zeros(0)


class JoinStep(torch.nn.Module):
    """Both halves' outputs -> (float embedding, code values): the speech views, then :func:`fuse`."""

    def __init__(self, views: SpeechViews | None) -> None:
        super().__init__()
        self.views = views

    def forward(self, speech: torch.Tensor, speech_code: torch.Tensor, pooled: torch.Tensor, sounds: torch.Tensor,
                sounds_code: torch.Tensor, p_speech: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        extra_code = None
        if self.views is not None:  # fuse() normalises the speech half, so the views' weights hold
            speech, extra_code = self.views(speech, z if z.numel() else None, pooled if pooled.numel() else None)
        return fuse(speech, speech_code, sounds, sounds_code, p_speech, extra_code)


class Steps(NamedTuple):
    """The encoder's tensor work in four modules: the sounds half, the speech half's frames and head, the join."""

    sounds: Step
    frames: Step
    head: Step
    join: Step


class RoutedFusionEncoder(Encoder):
    modality = "audio"

    def __init__(self, config: dict[str, Any], speech: Encoder, sounds: Encoder, router: Router,
                 views: SpeechViews | None = None) -> None:
        super().__init__()
        take_audio_config(self, config)
        self.speech, self.sounds, self.router = speech, sounds, router.eval()
        self.views = views.eval() if views is not None else None
        self.dim = speech.dim + (views.extra_dim if views is not None else 0) + sounds.dim
        self.bits = speech.bits + sounds.bits  # the views' bits ride in the sounds half (fuse)
        self.keeps_frames = views is not None and views.frontend_bits > 0
        # speech_embedding's convolutions through onnxruntime: most of a lone query's time, and they split
        # over two cores with the same numbers (ort_convs.intra_op_threads); see embed_batch
        frontend = getattr(speech.features, "frontend", None)
        self.frontend_splits = getattr(speech.features, "kind", None) == "speech-embedding" and bool(
            getattr(frontend, "onnx_on_cpu", False))
        self.lone_schedules = FasterPath()  # way 0: the halves side by side; way 1: the front-end on both cores first
        self.steps = CpuTraces(Steps(SoundsStep(sounds, self.router, self.views).eval(),
                                     SpeechFrames(speech.features).eval(),
                                     SpeechHead(speech.net, self.keeps_frames).eval(),
                                     JoinStep(self.views).eval()),
                               self._trace_steps)

    def to(self, device: str) -> "RoutedFusionEncoder":
        self.speech.to(device)
        self.sounds.to(device)
        self.router.to(device)
        if self.views is not None:
            self.views.to(device)
        self.device = device
        self.steps.reset()
        return self

    def _trace_steps(self) -> Steps:
        """The steps traced, so on CPU they run without the GIL (app/encoders/traced.py)."""
        batches = example_windows(self.window)  # the first is traced, the others check it
        if self.frontend_splits:
            ort_convs.prepare((1, 2))  # the front-end's sessions for a query and a lone query's two cores
        eager = self.steps.eager
        audio = [torch.from_numpy(b) for b in batches]
        speech_waves = [self._speech_waves(b) for b in batches]
        with torch.no_grad():
            frames = [eager.frames(w) for w in speech_waves]
            halves = [(*eager.head(f), *eager.sounds(a)) for a, f in zip(audio, frames)]
        return Steps(trace_step(eager.sounds, audio[0], audio[1:], f"{self.name} sounds half"),
                     trace_step(eager.frames, speech_waves[0], speech_waves[1:], f"{self.name} speech frames"),
                     trace_step(eager.head, frames[0], frames[1:], f"{self.name} speech head"),
                     trace_step(eager.join, halves[0], halves[1:], f"{self.name} join"))

    def _speech_waves(self, waves: np.ndarray) -> torch.Tensor:
        """(B, window) at the service rate -> (B, speech window) at the speech branch's rate (soxr, as in training)."""
        if self.speech.sample_rate == self.sample_rate:
            resampled = waves
        else:
            import soxr

            # soxr treats columns as channels: one call resamples every window of the batch
            resampled = soxr.resample(np.ascontiguousarray(waves.T), self.sample_rate, self.speech.sample_rate).T
        window = int(round(self.speech.default_window_s * self.speech.sample_rate))
        return torch.stack([fit_to_window(torch.from_numpy(np.ascontiguousarray(w, np.float32)), window) for w in resampled])

    def embed_batch(self, waves: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, window) float32 at the service rate -> (floats, code values, p(speech)) tensors."""
        steps = self.steps.get(self.device)

        def sounds_half() -> tuple[torch.Tensor, ...]:
            with torch.inference_mode():
                return steps.sounds(torch.from_numpy(waves).to(self.device))

        def speech_frames() -> torch.Tensor:
            with torch.inference_mode():
                return steps.frames(self._speech_waves(waves).to(self.device))

        def speech_head(frames: torch.Tensor) -> tuple[torch.Tensor, ...]:
            with torch.inference_mode():
                return steps.head(frames)

        # the halves are independent: a query's one or two windows run them on two cores at once
        # (app/encoders/side_thread.py); bigger batches keep the cores busy one half after the other.
        # The longer speech half stays on this thread, so neither the side thread's wake-up nor the
        # wait for its result lies on the query's critical path. A pretrained speech front-end is most of
        # that half and splits itself: it can take both cores first, the sounds half then running beside the
        # head, which wins while no other process holds the second core (the faster lately runs, same answers).
        def side_by_side() -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
            return run_beside(lambda: speech_head(speech_frames()), sounds_half)

        def frontend_on_both_cores_first() -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
            with ort_convs.intra_op_threads(2):
                frames = speech_frames()
            return run_beside(lambda: speech_head(frames), sounds_half)

        if self.device == "cpu" and len(waves) <= SIDE_THREAD_MAX_WINDOWS and spare_core():
            schedule = LONE_QUERY_FRONTEND if self.frontend_splits else "one_core"
            if schedule == "choose":
                speech, sounds = self.lone_schedules.run(side_by_side, frontend_on_both_cores_first)
            else:
                speech, sounds = (frontend_on_both_cores_first if schedule == "both_cores" else side_by_side)()
        else:
            sounds = sounds_half()
            speech = speech_head(speech_frames())
        with torch.inference_mode():
            floats, codes = steps.join(*speech, *sounds)
        return floats, codes, sounds[2]

    def _fitted(self, chunk: Sequence[np.ndarray]) -> np.ndarray:
        """(B, window) float32: each input cut or zero-padded to the window."""
        return np.stack([fit_to_window(torch.from_numpy(np.require(w, np.float32, ["W"])), self.window).numpy()
                         for w in chunk])

    def speech_probability(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """The router's p(speech) of each window (service rate, fitted to the window as :meth:`encode`
        does): a window is embedded in the speech half of the code when this is >= 0.5."""
        out = []
        for start in range(0, len(inputs), ENCODE_CHUNK):
            waves = self._fitted(inputs[start: start + ENCODE_CHUNK])
            with torch.inference_mode():
                stats = self.sounds.features(torch.from_numpy(waves).to(self.device))
                out.append(self.router(stats[:, 0]).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def encode(self, inputs: Sequence[np.ndarray]) -> Embeddings:
        floats, values = [], []
        for start in range(0, len(inputs), ENCODE_CHUNK):
            f, v, _ = self.embed_batch(self._fitted(inputs[start: start + ENCODE_CHUNK]))
            floats.append(f.float().cpu().numpy())
            values.append(v.float().cpu().numpy())
        if not floats:
            return Embeddings(np.zeros((0, self.dim), np.float32), np.zeros((0, self.bits // 8), np.uint8))
        return Embeddings(floats=l2_normalise(np.concatenate(floats)), codes=sign_codes(np.concatenate(values)))


def load(directory: Path, config: dict[str, Any]) -> RoutedFusionEncoder:
    """Registry entry point: the branches from their sub-directories, the router from ``weights.safetensors``."""
    from app.encoders.registry import load_checkpoint_dir

    directory = Path(directory)
    state, stored = load_checkpoint(directory)
    config = {**stored, **config} if config else stored
    branches = {}
    for branch in BRANCHES:
        sub = directory / branch
        if not (sub / "config.json").is_file():
            raise CheckpointError(f"{directory}: the {branch!r} branch checkpoint ({sub}) is missing")
        branches[branch] = load_checkpoint_dir(sub)
        if branches[branch].modality != "audio":
            raise CheckpointError(f"{sub}: the {branch} branch must be an audio encoder")
    sounds = branches["sounds"]
    if sounds.sample_rate != int(config["sample_rate"]) or not hasattr(sounds, "features"):
        raise CheckpointError(f"{directory}: the sounds branch must run at the service rate ({config['sample_rate']} Hz)")
    router_state = {k: v for k, v in state.items() if not k.startswith(VIEWS_PREFIX)}
    views_state = {k[len(VIEWS_PREFIX):]: v for k, v in state.items() if k.startswith(VIEWS_PREFIX)}
    router = Router(int(router_state["mean"].numel()))
    load_state_strict(router, router_state, str(directory))
    if router.n_in != getattr(sounds.net, "n_in", None):
        raise CheckpointError(f"{directory}: the router reads {router.n_in} statistics, the sounds branch gives {sounds.net.n_in}")
    views = None
    if config.get("speech_views") is not None:
        if int(config["sample_rate"]) != 16000:
            raise CheckpointError(f"{directory}: speech_views need the service rate 16000 Hz, not {config['sample_rate']}")
        speech = branches["speech"]
        frontend_dim = int(getattr(speech.net, "n_in", 0)) if config["speech_views"].get("frontend_bits") else 0
        if frontend_dim and getattr(speech.features, "kind", None) != "speech-embedding":
            raise CheckpointError(f"{directory}: the front-end view needs a speech branch on a pretrained front-end")
        views = views_from_config(config["speech_views"], speech.dim, speech.bits, frontend_dim)
        load_state_strict(views, views_state, f"{directory} (speech_views)")
        if views.extra_bits > sounds.bits:
            raise CheckpointError(f"{directory}: {views.extra_bits} view bits do not fit the {sounds.bits}-bit sounds half")
    elif views_state:
        raise CheckpointError(f"{directory}: weights hold speech views ({sorted(views_state)[:3]}) but the config has no speech_views")
    return RoutedFusionEncoder(config, branches["speech"], sounds, router, views)
