"""How deep a search's rounds go: the segments a first round scans per wanted item, and how many of a
round's nearest segments are mapped to items (an audio item has many windows, an image one segment).
``query`` and ``options`` are app/search/pipeline.py's Query and SearchOptions."""

from __future__ import annotations

from typing import Any

from app.storage.catalog import Collection


def wanted(query: Any, options: Any) -> int:
    """Items a round must find: k, plus the query's own item when it is excluded from the answer."""
    return options.k + (1 if query.exclude_item else 0)


# The most images a two-stage image search shortlists k x oversample codes for (:func:`per_item`).
SHALLOW_IMAGES = 20_000


def first_depth(collection: Collection, query: Any, options: Any, total: int) -> int:
    return min(total, max(wanted(query, options) * per_item(collection, options, total), 32))


def per_item(collection: Collection, options: Any, total: int) -> int:
    """Segments a first round scans per wanted item: 4 (an audio item has many windows), but 1 for a
    two-stage search of at most ``SHALLOW_IMAGES`` images (one segment each, no filter or distance limit):
    a re-ranked text query's shortlist (the head's top 100 x oversample 10) is 1,000 codes and float rows
    instead of 4,000. It changes answers, so it had to meet issue 35's rule (``bench.image.text_shortlist``,
    the dev sets among generated distractors; README, Numbers): met among 10^4 and 2 x 10^4 images, missed
    among 10^5 (the held-out photos' re-ranked top-10 overlap 0.87), where 4 stays. Binary and float
    searches keep 4: their depth decides which of many tied distances are kept."""
    if options.depth_per_item is not None:
        return options.depth_per_item
    shallow = options.mode == "two_stage" and total <= SHALLOW_IMAGES and items_are_segments(collection, options)
    return 1 if shallow else 4


def items_are_segments(collection: Collection, options: Any) -> bool:
    """Whether a round's k nearest segments are its k nearest answers: one segment per item (an image),
    and no filter or distance limit that drops some of them."""
    return collection.modality == "image" and not options.filter and options.max_distance is None


def map_top(collection: Collection, query: Any, options: Any, depth: int) -> int:
    """How many of a round's nearest segments are mapped to items (a catalog read per segment).

    A segment scan goes ``depth`` deep because an audio item has many windows; an image is one
    segment, so its k nearest segments are its k nearest items and reading 4x as many rows was
    waste (a text query's re-rank shortlist of 100: 400 rows, ~4 ms of a 2-core machine). With a
    filter or a distance limit some of those items drop out and the next, deeper round needs the
    rest, so they keep the whole depth.
    """
    if not items_are_segments(collection, options):
        return depth
    return min(depth, wanted(query, options))
