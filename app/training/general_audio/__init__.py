"""The general-audio recipe: `recall train general-audio` and its steps (speech and sounds branches, router, speech views, the speech swap of version 6 and general-audio-commercial)."""
