"""The general-audio recipe: `recall train general-audio` and its steps (speech and sounds branches, router, speech views, soups, the speech swap of version 6)."""
