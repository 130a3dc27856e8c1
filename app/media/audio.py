"""Decode an uploaded audio (or video) file to mono float32 at the encoder's sample rate.

Uncompressed WAV, the usual query format, takes a fast path (``app.media.wav``: the header is
parsed here and the samples converted in one numpy step, identical to libsndfile's). Otherwise
libsndfile (through soundfile) is tried first: it is fast, exact about lengths and covers WAV,
FLAC, Ogg Vorbis/Opus and MP3. Anything it cannot open goes to ffmpeg (through PyAV): M4A/AAC,
WebM/Opus from a browser's MediaRecorder, the sound track of a video. Both decoders are lenient
about truncated files, so the container framing is checked first (see ``_truncation``) and the
decoded length is compared with the length the header promised.
"""

from __future__ import annotations

import io

import av
import numpy as np
import soundfile as sf
import soxr

from app.errors import InvalidInput, PayloadTooLarge, UnsupportedMedia
from app.media import _truncation
from app.media.sniff import Sniffed, sniff
from app.media.wav import parse_pcm_wav, pcm_samples

SUPPORTED_AUDIO = "WAV, FLAC, OGG (Vorbis/Opus), MP3, M4A/AAC, WebM/Opus or a video with a sound track"

# ffmpeg containers whose header states the exact stream length. Others (raw MP3, ADTS AAC,
# MPEG-TS) only get an estimate from the bitrate, which must not be mistaken for truncation.
_EXACT_LENGTH_CONTAINERS = {"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "ogg", "flac", "wav", "w64", "aiff", "caf"}

# How far short of the declared length a decode may end and still count as complete: codecs
# drop encoder priming/padding (Opus pre-skip, MP3 decoder delay) of up to a few frames.
_SLACK_SECONDS = 0.06
_SLACK_FRACTION = 0.01


def decode_audio(
    data: bytes,
    *,
    target_rate: int,
    filename: str = "upload",
    min_seconds: float = 0.1,
    max_seconds: float = 3600.0,
) -> np.ndarray:
    """Decode an audio or video file to a mono waveform at ``target_rate``.

    Channels are averaged to mono, then resampled with soxr when the file's rate differs.

    Args:
        data: The uploaded file's bytes.
        target_rate: Sample rate of the returned waveform, in Hz.
        filename: Name used in error messages, so a client uploading many files knows which
            one failed.
        min_seconds: Shortest accepted duration (before resampling).
        max_seconds: Longest accepted duration. Checked against the header before decoding
            when the header states a length, and while decoding otherwise.

    Returns:
        A 1-D float32 array in [-1, 1] sampled at ``target_rate``.

    Raises:
        InvalidInput: The file is empty, truncated or corrupt, decodes to no samples or to
            NaN/inf samples, is shorter than ``min_seconds``, or is a video with no sound track.
        UnsupportedMedia: The file is not audio in a format either decoder reads (this
            includes images).
        PayloadTooLarge: The audio is longer than ``max_seconds``.
        ValueError: ``target_rate`` is not positive (a programming error, not a client's).
    """
    if target_rate <= 0:
        raise ValueError(f"target_rate must be positive, got {target_rate}")
    if not data:
        raise InvalidInput(f"'{filename}' is empty (0 bytes): upload a file that contains audio")
    sniffed = sniff(data)
    if sniffed is not None and sniffed.modality == "image":
        raise UnsupportedMedia(
            f"'{filename}' is an image ({sniffed.format}), not audio: upload {SUPPORTED_AUDIO}"
        )
    _check_framing(data, sniffed, filename)

    decoded = _decode_wav_fast(data, sniffed, filename, max_seconds)
    if decoded is None:
        decoded = _decode_soundfile(data, sniffed, filename, max_seconds)
    if decoded is None:
        decoded = _decode_pyav(data, sniffed, filename, max_seconds)
    wave, rate = decoded

    if wave.size == 0:
        raise InvalidInput(f"'{filename}' decodes to no audio samples: upload a file that contains sound")
    if not np.isfinite(wave).all():
        raise InvalidInput(f"'{filename}' contains NaN or infinite samples: re-export it as ordinary PCM audio")
    duration = wave.size / rate
    if duration < min_seconds:
        raise InvalidInput(
            f"'{filename}' is {duration:.3f} s long; audio must be at least {min_seconds:g} s: upload a longer clip"
        )
    _check_max_duration(duration, max_seconds, filename)

    if rate != target_rate:
        wave = soxr.resample(wave, rate, target_rate)
    # Float sources may exceed full scale and resampling overshoots slightly near it.
    return np.clip(wave, -1.0, 1.0).astype(np.float32, copy=False)


def _check_framing(data: bytes, sniffed: Sniffed | None, filename: str) -> None:
    """Refuse files whose container framing shows they were cut short."""
    if sniffed is None:
        return
    truncated = False
    if sniffed.format == "WAV":
        truncated = bool(_truncation.wav_missing_bytes(data))
    elif sniffed.format.startswith("Ogg"):
        truncated = bool(_truncation.ogg_is_truncated(data))
    elif sniffed.format == "MP3":
        truncated = bool(_truncation.mp3_is_truncated(data))
    elif sniffed.format in ("M4A", "MP4"):
        truncated = bool(_truncation.iso_bmff_is_truncated(data))
    elif sniffed.format in ("WebM", "Matroska"):
        truncated = bool(_truncation.matroska_is_truncated(data))
    if truncated:
        raise InvalidInput(
            f"'{filename}' is truncated: the {sniffed.format} file stops part-way through its data. "
            "Upload the complete file"
        )


def uses_fast_path(data: bytes) -> bool:
    """Whether ``data`` is a WAV the fast path decodes (cheap enough to decode inline)."""
    return parse_pcm_wav(data) is not None


def _mono(frames: np.ndarray) -> np.ndarray:
    """(frames, channels) -> (frames,): the channel mean (one channel is returned as it is)."""
    return frames[:, 0] if frames.shape[1] == 1 else frames.mean(axis=1, dtype=np.float32)


def _decode_wav_fast(data: bytes, sniffed: Sniffed | None, filename: str, max_seconds: float) -> tuple[np.ndarray, int] | None:
    """Uncompressed WAV without libsndfile; None for any other file (the general path reads it)."""
    if sniffed is None or sniffed.format != "WAV":
        return None
    layout = parse_pcm_wav(data)
    if layout is None:
        return None
    _check_max_duration(layout.declared_frames / layout.rate, max_seconds, filename)
    frames = pcm_samples(data, layout)
    _check_complete(len(frames) / layout.rate, layout.declared_frames / layout.rate, filename, sniffed)
    return _mono(frames), layout.rate


def _decode_soundfile(
    data: bytes, sniffed: Sniffed | None, filename: str, max_seconds: float
) -> tuple[np.ndarray, int] | None:
    """Decode with libsndfile; None when libsndfile does not recognise the format."""
    try:
        sound = sf.SoundFile(io.BytesIO(data))
    except (sf.LibsndfileError, RuntimeError, TypeError):
        return None  # not a libsndfile format (or broken header): let ffmpeg try
    with sound:
        rate = sound.samplerate
        declared = sound.frames
        if rate <= 0:
            return None
        # libsndfile estimates MP3 length from the bitrate unless a Xing/Info header gives it;
        # a VBR estimate can be several times off, so it decides neither "too long" nor "cut".
        trust_declared = sound.format != "MP3" or _truncation.mp3_has_frame_count(data)
        if trust_declared:
            _check_max_duration(declared / rate, max_seconds, filename)
        try:
            frames = sound.read(dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError) as exc:
            raise _corrupt(filename, sniffed, str(exc)) from exc
    if trust_declared:
        _check_complete(len(frames) / rate, declared / rate, filename, sniffed)
    return _mono(frames), rate


def _decode_pyav(data: bytes, sniffed: Sniffed | None, filename: str, max_seconds: float) -> tuple[np.ndarray, int]:
    """Decode the first audio stream with ffmpeg."""
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.FFmpegError, EOFError, ValueError, OSError) as exc:
        raise _undecodable(filename, sniffed, exc) from exc
    with container:
        audio_streams = [stream for stream in container.streams if stream.type == "audio"]
        if not audio_streams:
            if sniffed is not None and sniffed.modality == "video" and len(container.streams) > 0:
                raise InvalidInput(
                    f"'{filename}' is a video ({sniffed.format}) with no audio track: upload a file with sound"
                )
            # ffmpeg "opens" many non-media files (e.g. text as ANSI art) as a video stream;
            # only trust that claim when the magic bytes agree.
            raise _undecodable(filename, sniffed, None)
        stream = audio_streams[0]
        declared, exact = _declared_seconds(container, stream, data)
        if declared is not None and exact:
            _check_max_duration(declared, max_seconds, filename)

        # fltp keeps each frame's channels and rate; later frames are converted to the first
        # frame's layout and rate, so a mid-stream change cannot corrupt the concatenation.
        resampler = av.AudioResampler(format="fltp")
        chunks: list[np.ndarray] = []
        total = 0
        rate = 0
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    rate = rate or out.sample_rate
                    chunk = out.to_ndarray().mean(axis=0, dtype=np.float32)
                    chunks.append(chunk)
                    total += chunk.size
                # Without an exact header length (a MediaRecorder WebM, raw MP3/AAC) stop as
                # soon as the limit is passed instead of decoding hours only to refuse them.
                if rate and total > max_seconds * rate:
                    _check_max_duration(total / rate, max_seconds, filename)
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().mean(axis=0, dtype=np.float32))
        except (av.FFmpegError, EOFError, ValueError) as exc:
            raise _corrupt(filename, sniffed, str(exc)) from exc
    wave = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    if rate == 0:  # nothing decoded: the caller refuses the empty wave; avoid dividing by 0
        rate = stream.rate or 1
    if declared is not None and exact:
        _check_complete(wave.size / rate, declared, filename, sniffed)
    return wave, rate


def _declared_seconds(
    container: av.container.InputContainer, stream: av.audio.stream.AudioStream, data: bytes
) -> tuple[float | None, bool]:
    """The length the header states for ``stream``, and whether it is exact (not a bitrate guess)."""
    seconds: float | None = None
    if stream.duration is not None and stream.time_base is not None:
        seconds = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        # Container length is the longest stream: exact for the audio only when it is alone.
        seconds = container.duration / av.time_base
        if len(container.streams) > 1:
            return seconds, False
    format_name = container.format.name
    exact = format_name in _EXACT_LENGTH_CONTAINERS or (
        format_name == "mp3" and _truncation.mp3_has_frame_count(data)
    )
    return seconds, exact


def _check_complete(decoded: float, declared: float, filename: str, sniffed: Sniffed | None) -> None:
    if declared <= 0:
        return  # length unknown (streamed file)
    if decoded < declared - _SLACK_SECONDS - _SLACK_FRACTION * declared:
        kind = sniffed.format if sniffed else "audio"
        raise InvalidInput(
            f"'{filename}' is truncated: the {kind} header promises {declared:.2f} s of audio "
            f"but only {decoded:.2f} s could be decoded. Upload the complete file"
        )


def _check_max_duration(seconds: float, max_seconds: float, filename: str) -> None:
    if seconds > max_seconds:
        raise PayloadTooLarge(
            f"'{filename}' is {seconds:.1f} s long; the limit is {max_seconds:g} s: split it into shorter files"
        )


def _corrupt(filename: str, sniffed: Sniffed | None, reason: str) -> InvalidInput:
    kind = sniffed.format if sniffed else "audio"
    return InvalidInput(
        f"'{filename}' looks like {kind} but could not be decoded ({reason}); the file is corrupt or "
        "truncated: export or upload it again"
    )


def _undecodable(filename: str, sniffed: Sniffed | None, exc: BaseException | None) -> InvalidInput | UnsupportedMedia:
    """415 for content we do not recognise at all, 422 for a known format that is broken."""
    if sniffed is None:
        return UnsupportedMedia(f"'{filename}' is not an audio format this service can read: upload {SUPPORTED_AUDIO}")
    return _corrupt(filename, sniffed, str(exc) if exc else "no decodable audio stream")
