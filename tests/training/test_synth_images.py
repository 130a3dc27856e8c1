"""Generated scenes: deterministic, drawn where their captions say, graded labels as defined."""

from __future__ import annotations

import numpy as np

from app.training.synthesis.images import (
    COLOURS,
    IRRELEVANT,
    RELEVANT_MINUS,
    RELEVANT_PLUS,
    Scene,
    caption_relevance,
    generate_scenes,
    graded_triples,
    relevance_matrix,
    render,
)


def _scene(shape: str = "circle", colour: str = "red", position: str = "left", background: str = "blue",
           count: int = 1, seed: int = 3) -> Scene:
    return Scene(shape=shape, colour=colour, count=count, position=position, size="large", background=background,
                 texture="plain", seed=seed, captions=(f"a {colour} {shape} {position}", f"a {shape}"),
                 mentions=(frozenset({"colour", "shape", "position"}), frozenset({"shape"})))


def test_same_seed_gives_same_scenes_and_pixels() -> None:
    a, b = generate_scenes(5, seed=7), generate_scenes(5, seed=7)
    assert a == b
    assert np.array_equal(render(a[2]), render(b[2]))
    assert generate_scenes(5, seed=8) != a


def test_captions_mention_the_scene_attributes() -> None:
    for scene in generate_scenes(30, seed=1):
        assert len(scene.captions) == 5 and len(set(scene.captions)) == 5
        for caption, mentioned in zip(scene.captions, scene.mentions):
            assert scene.colour in caption.lower() and scene.shape in caption.lower()
            if "background" in mentioned:
                assert scene.background in caption.lower()


def test_render_draws_the_object_colour_in_its_region() -> None:
    for position, (axis, side) in {"left": (1, "low"), "right": (1, "high"), "top": (0, "low"),
                                   "bottom": (0, "high")}.items():
        image = render(_scene(position=position))
        assert image.shape == (256, 256, 3) and image.dtype == np.uint8
        # jitter is at most 12 per channel; red and blue are far apart, so 40 separates them
        close = np.abs(image.astype(int) - np.array(COLOURS["red"])).max(axis=2) < 40
        assert close.sum() > 300  # a large circle has radius ~33 px: ~3400 px
        centre = np.argwhere(close).mean(axis=0)[axis]
        assert centre < 100 if side == "low" else centre > 156


def test_caption_relevance_grades() -> None:
    query = _scene()
    assert caption_relevance(query, 0, query, same_image=True) == RELEVANT_PLUS
    # same shape and colour, other position: the main object matches, the rest may not
    assert caption_relevance(query, 0, _scene(position="right"), same_image=False) == RELEVANT_MINUS
    assert caption_relevance(query, 0, _scene(colour="green"), same_image=False) == IRRELEVANT
    # caption 1 mentions only the shape: any circle shares its main object
    assert caption_relevance(query, 1, _scene(colour="green"), same_image=False) == RELEVANT_MINUS
    assert caption_relevance(query, 1, _scene(shape="star"), same_image=False) == IRRELEVANT


def test_relevance_matrix_has_ones_on_the_diagonal() -> None:
    scenes = [_scene(), _scene(position="right", seed=4), _scene(colour="green")]
    labels = relevance_matrix(scenes, [0, 0, 0])
    expected = np.array([[1, 0.66, 0], [0.66, 1, 0], [0, 0, 1]], np.float32)
    assert np.array_equal(labels, expected)


def test_graded_triples_are_balanced_and_correct() -> None:
    scenes = generate_scenes(400, seed=2)
    triples = graded_triples(scenes, 90, seed=0)
    assert len(triples) == 90
    counts = {label: sum(t[3] == label for t in triples) for label in (RELEVANT_PLUS, RELEVANT_MINUS, IRRELEVANT)}
    assert counts == {RELEVANT_PLUS: 30, RELEVANT_MINUS: 30, IRRELEVANT: 30}
    for i, c, j, label in triples:
        assert caption_relevance(scenes[i], c, scenes[j], same_image=(i == j)) == label
