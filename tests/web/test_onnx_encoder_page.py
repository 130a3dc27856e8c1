"""The page with a bring-your-own ONNX encoder (issue 33): it is offered when creating an image
collection, with its licence and source, and a sentence search from the page shows the ranking the
API gives (which tests/api/test_onnx_encoders.py checks against the model run directly)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import BrowserContext, Page, expect

from app.settings import Settings
from tests.encoders.onnx_models import clip_folder
from tests.live_server import live_server
from tests.web.conftest import fresh_page

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def onnx_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("onnx-page")
    clip_folder(root / "encoders" / "tiny-clip")
    settings = Settings(data_dir=root / "data", demo=False,
                        encoders={"default_audio": "audio-baseline", "default_image": "image-baseline",
                                  "onnx_dir": str(root / "encoders")})
    with live_server(settings) as url:
        yield url


@pytest.fixture
def onnx_page(browser: BrowserContext, onnx_service: str) -> Iterator[Page]:
    with fresh_page(browser, onnx_service) as page:
        yield page


def _photos(folder: Path) -> list[Path]:
    rng = np.random.default_rng(5)
    paths = []
    for i in range(4):
        path = folder / f"photo-{i}.png"
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def test_an_onnx_encoder_is_offered_and_searches_from_the_page(onnx_page: Page, onnx_service: str, tmp_path: Path) -> None:
    page = onnx_page
    page.get_by_role("button", name="Create a collection").click()
    page.get_by_label("Images", exact=True).check()
    encoder = page.get_by_label("Encoder", exact=True)
    expect(encoder.locator("option")).to_contain_text(["image-baseline (default)", "image-text-minilm", "tiny-clip"])
    encoder.select_option("tiny-clip")
    info = page.locator("#encoder-info")
    expect(info).to_contain_text("a tiny random CLIP-style pair")  # the manifest's description
    expect(info).to_contain_text("licence MIT")
    expect(info).to_contain_text("source tests/encoders/onnx_models.py (random weights)")
    page.get_by_label("Name", exact=True).fill("byo-photos")
    page.get_by_role("button", name="Create collection").click()
    expect(page.locator("#collection-info")).to_contain_text("encoder tiny-clip")
    page.get_by_label("Add files to this collection:").set_input_files(_photos(tmp_path))
    expect(page.locator("#collection-info")).to_contain_text("4 items")
    page.get_by_label("Describe an image").fill("a red circle")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator("#query-summary")).to_contain_text('results for text "a red circle"')
    expected = httpx.post(f"{onnx_service}/v1/collections/byo-photos/search", json={"text": "a red circle", "k": 4}).json()
    ids = [r["id"] for r in expected["results"]]
    expect(page.locator("#results .result .result-id")).to_have_text(ids)
