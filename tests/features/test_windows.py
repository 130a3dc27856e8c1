"""Windows the service indexes: silent ones are skipped (app.features.windows.audible)."""

import numpy as np

from app.features.windows import SILENCE_DBFS, audible, cut_audible_windows, cut_windows

RATE = 16000


def _tone(seconds: float, level_dbfs: float) -> np.ndarray:
    """A sine whose RMS is ``level_dbfs``."""
    t = np.arange(int(seconds * RATE)) / RATE
    return (np.sqrt(2) * 10 ** (level_dbfs / 20) * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def test_windows_of_digital_silence_are_skipped_with_their_times():
    wave = np.concatenate([_tone(1.0, -20), np.zeros(2 * RATE, np.float32)])  # a sound, then 2 s of zeros
    windows, times = cut_audible_windows(wave, RATE, 1.0, 0.5)
    every, every_times = cut_windows(wave, RATE, 1.0, 0.5)
    assert len(every) == 5
    # windows at 0 and 0.5 s hold the sound; those at 1.0, 1.5 and 2.0 s are silent
    np.testing.assert_array_equal(times, every_times[:2])
    assert all(np.array_equal(a, b) for a, b in zip(windows, every[:2]))


def test_the_threshold_is_the_window_rms_level():
    just_above, just_below = _tone(1.0, SILENCE_DBFS + 1), _tone(1.0, SILENCE_DBFS - 1)
    np.testing.assert_array_equal(audible([just_above, just_below, np.zeros(RATE, np.float32)]), [True, False, False])


def test_a_clip_with_no_audible_window_keeps_its_loudest():
    quiet = np.concatenate([np.zeros(RATE, np.float32), _tone(1.0, -80), np.zeros(RATE, np.float32)])
    windows, times = cut_audible_windows(quiet, RATE, 1.0, 0.5)
    assert len(windows) == 1 and times[0, 0] == 1.0  # the window that is all quiet tone
    windows, times = cut_audible_windows(np.zeros(RATE // 2, np.float32), RATE, 1.0, 0.5)
    assert len(windows) == 1 and times.tolist() == [[0.0, 0.5]]  # pure silence still becomes one segment
