"""Windows the service indexes: silent ones are skipped (app.features.windows.audible)."""

import numpy as np

from app.features.windows import SILENCE_BELOW_LOUDEST_DB, SILENCE_DBFS, audible, cut_audible_windows, cut_windows

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


def test_a_window_is_silent_under_the_threshold_and_far_under_the_loudest():
    loud = _tone(1.0, -20)
    just_above, just_below = _tone(1.0, SILENCE_DBFS + 1), _tone(1.0, SILENCE_DBFS - 1)
    np.testing.assert_array_equal(audible([loud, just_above, just_below, np.zeros(RATE, np.float32)]), [True, True, False, False])
    # under the threshold but within 30 dB of the clip's loudest window: kept; further under: skipped
    loudest = -58.0
    within, beyond = loudest - SILENCE_BELOW_LOUDEST_DB + 1, loudest - SILENCE_BELOW_LOUDEST_DB - 1  # -87, -89 dBFS
    np.testing.assert_array_equal(audible([_tone(1.0, loudest), _tone(1.0, within), _tone(1.0, beyond)]), [True, True, False])


def test_a_recording_quiet_throughout_keeps_every_window():
    quiet = np.concatenate([_tone(1.0, -75), _tone(1.0, -80), _tone(1.0, -72)])  # all under -60 dBFS
    windows, times = cut_audible_windows(quiet, RATE, 1.0, 0.5)
    assert len(windows) == len(cut_windows(quiet, RATE, 1.0, 0.5)[0]) == 5


def test_digital_silence_around_a_quiet_sound_is_skipped_and_pure_silence_keeps_one_window():
    quiet = np.concatenate([np.zeros(RATE, np.float32), _tone(1.0, -80), np.zeros(RATE, np.float32)])
    windows, times = cut_audible_windows(quiet, RATE, 1.0, 0.5)
    assert times[:, 0].tolist() == [0.5, 1.0, 1.5]  # the windows that hear the tone; the all-zero ones go
    windows, times = cut_audible_windows(np.zeros(RATE // 2, np.float32), RATE, 1.0, 0.5)
    assert len(windows) == 1 and times.tolist() == [[0.0, 0.5]]  # pure silence still becomes one segment
