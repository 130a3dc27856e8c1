"""Procedurally generated captioned images and their graded relevance labels.

80 real captioned images are far too few to train an image tower from scratch, so training adds
scenes drawn here: one to three shapes of one kind and colour, placed in one region of a
textured, coloured background, with five captions that mention different subsets of those
attributes. Because every caption records which attributes it mentions, the relevance of any
caption to any image is known exactly, which gives the paper's graded triples
(1 / 0.66 / 0 for RELEVANT_PLUS / RELEVANT_MINUS / IRRELEVANT).

A scene is rendered deterministically from its attributes and seed, so a training set is a list
of small :class:`Scene` records (captions can be embedded once and cached) and the pixels are
drawn on demand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

SIZE = 256  # scenes are drawn at the size the image tower crops from

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "green": (40, 165, 60),
    "blue": (40, 80, 215),
    "yellow": (240, 215, 40),
    "orange": (245, 135, 20),
    "purple": (135, 50, 175),
    "pink": (245, 150, 190),
    "brown": (115, 70, 35),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
    "grey": (128, 128, 128),
}
SHAPES = ("circle", "square", "triangle", "cross", "star")
COUNTS = {1: "a", 2: "two", 3: "three"}
POSITIONS = {
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
    "centre": "in the middle",
}
TEXTURES = ("plain", "striped", "dotted", "checkered", "noisy")
SIZES = ("small", "large")

# Where the objects' centres may fall, as fractions of the image side: (x0, x1, y0, y1).
_REGIONS = {
    "left": (0.15, 0.32, 0.2, 0.8),
    "right": (0.68, 0.85, 0.2, 0.8),
    "top": (0.2, 0.8, 0.15, 0.32),
    "bottom": (0.2, 0.8, 0.68, 0.85),
    "centre": (0.4, 0.6, 0.4, 0.6),
}

RELEVANT_PLUS, RELEVANT_MINUS, IRRELEVANT = 1.0, 0.66, 0.0


@dataclass(frozen=True)
class Scene:
    """Attributes of one generated image, its captions and what each caption mentions."""

    shape: str
    colour: str
    count: int
    position: str
    size: str
    background: str
    texture: str
    seed: int
    captions: tuple[str, ...] = field(default=())
    mentions: tuple[frozenset[str], ...] = field(default=())

    def attribute(self, name: str) -> str:
        return str(getattr(self, name))


def _plural(shape: str, count: int) -> str:
    if count == 1:
        return shape
    return shape + ("es" if shape.endswith("s") else "s")


# Caption templates and the attributes each one mentions. Several leave attributes out, like
# people do, so a caption is fully satisfied by many scenes, not only its own.
_TEMPLATES: tuple[tuple[str, frozenset[str]], ...] = (
    ("{count} {size} {colour} {shapes} {position}", frozenset({"count", "size", "colour", "shape", "position"})),
    ("{count} {colour} {shapes} on a {texture} {background} background",
     frozenset({"count", "colour", "shape", "texture", "background"})),
    ("a {background} background with {count} {colour} {shapes}", frozenset({"background", "count", "colour", "shape"})),
    ("{colour} {shapes} {position} of the picture", frozenset({"colour", "shape", "position"})),
    ("a picture of {count} {shapes} coloured {colour}", frozenset({"count", "shape", "colour"})),
    ("{count} {size} {colour} {shapes}", frozenset({"count", "size", "colour", "shape"})),
    ("{colour} {shapes} {position} over a {background} {texture} pattern",
     frozenset({"colour", "shape", "position", "background", "texture"})),
    ("the {shapes} {position} are {colour}", frozenset({"shape", "position", "colour"})),
)


def _caption(template: str, scene: Scene) -> str:
    texture = scene.texture if scene.texture != "plain" else "plain"
    text = template.format(
        count=COUNTS[scene.count],
        size=scene.size,
        colour=scene.colour,
        shapes=_plural(scene.shape, scene.count),
        position=POSITIONS[scene.position],
        texture=texture,
        background=scene.background,
    )
    if scene.count == 1:
        text = text.replace(" are ", " is ")
    return text[0].upper() + text[1:]


def random_scene(rng: np.random.Generator, n_captions: int = 5) -> Scene:
    """Draw attributes for one scene (background colour always differs from the shapes')."""
    colour = str(rng.choice(list(COLOURS)))
    background = str(rng.choice([c for c in COLOURS if c != colour]))
    bare = Scene(
        shape=str(rng.choice(SHAPES)),
        colour=colour,
        count=int(rng.choice(list(COUNTS))),
        position=str(rng.choice(list(POSITIONS))),
        size=str(rng.choice(SIZES)),
        background=background,
        texture=str(rng.choice(TEXTURES)),
        seed=int(rng.integers(2**31)),
    )
    chosen = rng.choice(len(_TEMPLATES), size=n_captions, replace=False)
    captions = tuple(_caption(_TEMPLATES[i][0], bare) for i in chosen)
    mentions = tuple(_TEMPLATES[i][1] for i in chosen)
    return Scene(**{**bare.__dict__, "captions": captions, "mentions": mentions})


def generate_scenes(n: int, seed: int, n_captions: int = 5) -> list[Scene]:
    """``n`` scenes from one seed; the same seed always gives the same scenes."""
    rng = np.random.default_rng(seed)
    return [random_scene(rng, n_captions) for _ in range(n)]


# ---------------------------------------------------------------- rendering


def _background(scene: Scene, rng: np.random.Generator) -> np.ndarray:
    base = np.array(COLOURS[scene.background], np.float32)
    # the texture is drawn as a darker/lighter version of the background colour so the colour
    # name stays true while the pattern is visible
    alt = np.clip(base * 0.6 + 20, 0, 255) if base.mean() > 60 else np.clip(base + 70, 0, 255)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    period = int(rng.integers(16, 40))
    if scene.texture == "striped":
        angle = rng.uniform(0, np.pi)
        mask = (np.cos(angle) * xx + np.sin(angle) * yy) % period < period / 2
    elif scene.texture == "dotted":
        mask = ((xx % period - period / 2) ** 2 + (yy % period - period / 2) ** 2) < (period / 4) ** 2
    elif scene.texture == "checkered":
        mask = ((xx // period) + (yy // period)) % 2 == 0
    elif scene.texture == "noisy":
        mask = rng.random((SIZE, SIZE)) < 0.3
    else:
        mask = np.zeros((SIZE, SIZE), bool)
    image = np.where(mask[..., None], alt, base)
    return image.astype(np.uint8)


def _star(cx: float, cy: float, r: float, rotation: float) -> list[tuple[float, float]]:
    points = []
    for i in range(10):
        radius = r if i % 2 == 0 else r * 0.45
        angle = rotation + i * np.pi / 5
        points.append((cx + radius * np.cos(angle), cy + radius * np.sin(angle)))
    return points


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, fill: tuple[int, int, int],
                rotation: float) -> None:
    if shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "square":
        corners = [(cx + r * np.cos(rotation + k * np.pi / 2), cy + r * np.sin(rotation + k * np.pi / 2)) for k in range(4)]
        draw.polygon(corners, fill=fill)
    elif shape == "triangle":
        corners = [(cx + r * np.cos(rotation + k * 2 * np.pi / 3), cy + r * np.sin(rotation + k * 2 * np.pi / 3))
                   for k in range(3)]
        draw.polygon(corners, fill=fill)
    elif shape == "cross":
        w = r * 0.35
        draw.rectangle([cx - r, cy - w, cx + r, cy + w], fill=fill)
        draw.rectangle([cx - w, cy - r, cx + w, cy + r], fill=fill)
    elif shape == "star":
        draw.polygon(_star(cx, cy, r, rotation), fill=fill)
    else:
        raise ValueError(f"unknown shape {shape!r}")


def render(scene: Scene) -> np.ndarray:
    """The scene as a (256, 256, 3) uint8 RGB array; deterministic given the scene."""
    rng = np.random.default_rng(scene.seed)
    image = Image.fromarray(_background(scene, rng))
    draw = ImageDraw.Draw(image)
    x0, x1, y0, y1 = _REGIONS[scene.position]
    radius = (0.13 if scene.size == "large" else 0.07) * SIZE / (1.0 if scene.count == 1 else 1.3)
    # several objects spread along the region's long axis so they do not cover each other
    for k in range(scene.count):
        frac = (k + 0.5) / scene.count + rng.uniform(-0.05, 0.05)
        if (x1 - x0) >= (y1 - y0):
            cx, cy = x0 + frac * (x1 - x0), rng.uniform(y0, y1)
        else:
            cx, cy = rng.uniform(x0, x1), y0 + frac * (y1 - y0)
        jitter = np.array(COLOURS[scene.colour]) + rng.integers(-12, 13, size=3)
        fill = tuple(int(v) for v in np.clip(jitter, 0, 255))
        _draw_shape(draw, scene.shape, cx * SIZE, cy * SIZE, radius, fill, rng.uniform(0, 2 * np.pi))
    return np.asarray(image, dtype=np.uint8)


# ---------------------------------------------------------------- graded relevance


def caption_relevance(caption_scene: Scene, caption_index: int, image_scene: Scene, same_image: bool) -> float:
    """Graded relevance of one caption to one image, the paper's three classes as numbers.

    * 1.0 (RELEVANT_PLUS): the caption was written for this image.
    * 0.66 (RELEVANT_MINUS): another image that shares the caption's main object (its shape and
      colour) but may differ in what else the caption says.
    * 0.0 (IRRELEVANT): everything else.
    """
    if same_image:
        return RELEVANT_PLUS
    mentioned = caption_scene.mentions[caption_index]
    main = {"shape", "colour"} & mentioned
    if main and all(caption_scene.attribute(a) == image_scene.attribute(a) for a in main):
        return RELEVANT_MINUS
    return IRRELEVANT


def relevance_matrix(scenes: list[Scene], caption_indices: list[int]) -> np.ndarray:
    """(n, n) labels: row i is caption ``caption_indices[i]`` of scene i against every scene's image."""
    n = len(scenes)
    labels = np.zeros((n, n), np.float32)
    for i, (scene, c) in enumerate(zip(scenes, caption_indices)):
        for j, other in enumerate(scenes):
            labels[i, j] = caption_relevance(scene, c, other, same_image=(i == j))
    return labels


def graded_triples(scenes: list[Scene], n: int, seed: int) -> list[tuple[int, int, int, float]]:
    """``n`` triples (scene of the caption, caption index, scene of the image, label), classes balanced.

    Partly relevant pairs are rare under uniform sampling (1 in ~55), so each class is drawn on
    its own until it has a third of the triples.
    """
    rng = np.random.default_rng(seed)
    by_key: dict[tuple[str, str], list[int]] = {}
    for j, scene in enumerate(scenes):
        by_key.setdefault((scene.shape, scene.colour), []).append(j)
    triples: list[tuple[int, int, int, float]] = []
    for k in range(n):
        i = int(rng.integers(len(scenes)))
        c = int(rng.integers(len(scenes[i].captions)))
        wanted = (RELEVANT_PLUS, RELEVANT_MINUS, IRRELEVANT)[k % 3]
        if wanted == RELEVANT_PLUS:
            triples.append((i, c, i, RELEVANT_PLUS))
            continue
        pool = [j for j in by_key[(scenes[i].shape, scenes[i].colour)] if j != i] if wanted == RELEVANT_MINUS else []
        for _ in range(50):
            j = int(rng.choice(pool)) if pool else int(rng.integers(len(scenes)))
            label = caption_relevance(scenes[i], c, scenes[j], same_image=(i == j))
            if label == wanted:
                triples.append((i, c, j, label))
                break
    return triples
