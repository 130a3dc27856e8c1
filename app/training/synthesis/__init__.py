"""Training data made here: espeak-ng speech, generated non-speech, procedurally captioned images."""
