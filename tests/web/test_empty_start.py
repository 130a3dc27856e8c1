"""The page on a service with no data and no keys: the empty state, creating, filling and deleting
collections, errors in words, and loading the demo data from the page. The tests run in order."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import BrowserContext, Page, expect

from app.settings import Settings
from tests.live_server import live_server
from tests.web.conftest import fresh_page, snap

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def empty_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("empty") / "data", demo=False,
        encoders={"default_audio": "audio-baseline", "default_image": "image-baseline"},
    )
    with live_server(settings) as url:
        yield url


@pytest.fixture
def empty_page(browser: BrowserContext, empty_service: str) -> Iterator[Page]:
    with fresh_page(browser, empty_service) as page:
        yield page


def _photo(path: Path, colour: tuple[int, int, int]) -> Path:
    array = np.zeros((96, 128, 3), np.uint8)
    array[:] = colour
    array[30:60, 40:90] = (255 - np.asarray(colour)) // 2
    Image.fromarray(array).save(path)
    return path


def test_an_empty_service_explains_itself_and_offers_the_demo(empty_page: Page) -> None:
    page = empty_page
    empty = page.locator("#empty")
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("No collections yet")
    expect(empty.get_by_role("button", name="Load the demo data")).to_be_visible()
    expect(empty.get_by_role("button", name="Create a collection")).to_be_visible()
    for hidden in ("#search", "#ingest", "#browse"):
        expect(page.locator(hidden)).to_be_hidden()
    snap(page, "page-empty", docs=True)


def test_create_a_collection_choosing_its_encoder(empty_page: Page) -> None:
    page = empty_page
    page.get_by_role("button", name="Create a collection").click()
    expect(page.get_by_label("Name", exact=True)).to_be_focused()
    encoder = page.get_by_label("Encoder", exact=True)
    # audio first: the default audio encoder is preselected, and the choice says what it is good for
    expect(encoder).to_have_value("audio-baseline")
    options = encoder.locator("option").all_inner_texts()
    assert options[0] == "audio-baseline (default)" and "speech-attn-hash" in options and "image-baseline" not in options
    encoder.select_option("speech-attn-hash")
    expect(page.locator("#encoder-info")).to_contain_text("finds the same word said by other voices")
    expect(page.locator("#encoder-info")).to_contain_text("spoken keywords")  # the service's own description
    page.get_by_label("Images", exact=True).check()
    expect(encoder).to_have_value("image-baseline")
    expect(encoder.locator("option")).to_have_text(["image-baseline (default)", "image-text-minilm"])
    encoder.select_option("image-text-minilm")
    expect(page.locator("#encoder-info")).to_contain_text("describing them in a sentence")
    page.get_by_label("Name", exact=True).fill("my-photos")
    page.get_by_label("Description", exact=True).fill("holiday pictures")
    snap(page, "page-create", docs=True)
    page.get_by_role("button", name="Create collection").click()
    expect(page.get_by_label("Collection", exact=True)).to_have_value("my-photos")
    expect(page.locator("#collection-info")).to_contain_text("0 items, 0 segments · encoder image-text-minilm")
    expect(page.locator("#items")).to_contain_text("Empty: add files above")
    expect(page.locator("#empty")).to_be_hidden()
    # the same name again: refused, in words, with what to do
    page.get_by_role("button", name="New collection").click()
    page.get_by_label("Name", exact=True).fill("my-photos")
    page.get_by_role("button", name="Create collection").click()
    banner = page.get_by_role("alert")
    expect(banner).to_contain_text("The collection my-photos was not created:")
    expect(banner).to_contain_text("That name is taken. Choose another name")
    page.get_by_role("button", name="Cancel").click()


def test_add_photos_and_see_a_wrong_kind_of_file_explained(empty_page: Page, tmp_path: Path) -> None:
    page = empty_page
    expect(page.get_by_label("Collection", exact=True)).to_have_value("my-photos")
    expect(page.locator("#collection-info")).to_contain_text("0 items")
    photo = _photo(tmp_path / "red.png", (200, 30, 30))
    page.get_by_label("Add files to this collection:").set_input_files(photo)
    expect(page.locator("#uploads li[data-file='red.png'] .status")).to_contain_text("indexed as red.png")
    text = tmp_path / "notes.txt"
    text.write_text("this is not an image")
    page.get_by_label("Add files to this collection:").set_input_files(text)
    message = page.locator("#uploads li[data-file='notes.txt']").get_by_role("alert")
    expect(message).to_contain_text("notes.txt was not added:")
    expect(message).to_contain_text("Use a format the service decodes")
    expect(page.locator("#collection-info")).to_contain_text("1 items")
    # a thumbnail in the item list, and search by the stored image
    expect(page.locator("#items li[data-id='red.png'] img.mini")).to_have_attribute("src", re.compile("^blob:"))
    page.get_by_label("Search with an example file:").set_input_files(_photo(tmp_path / "query.png", (190, 40, 30)))
    expect(page.locator("#results .result .result-id").first).to_have_text("red.png")


def test_delete_a_collection_after_confirming_brings_the_empty_state_back(empty_page: Page) -> None:
    page = empty_page
    expect(page.locator("#collection-info")).to_contain_text("1 items")
    page.get_by_role("button", name="Delete this collection…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text('Delete the collection "my-photos" with its 1 items')
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()  # the safe choice
    page.keyboard.press("Enter")  # Enter on Cancel keeps it
    expect(dialog).to_be_hidden()
    expect(page.get_by_label("Collection", exact=True)).to_have_value("my-photos")
    page.get_by_role("button", name="Delete this collection…").click()
    dialog.get_by_role("button", name="Delete collection").click()
    expect(page.locator("#empty")).to_be_visible()
    expect(page.get_by_label("Collection", exact=True).locator("option")).to_have_count(0)


def test_load_the_demo_data_from_the_empty_state(empty_page: Page) -> None:
    page = empty_page
    page.get_by_role("button", name="Load the demo data").click()
    # real files through the real ingest path and the trained encoders: allow for a slow machine
    expect(page.get_by_label("Collection", exact=True)).to_have_value("demo-words", timeout=90_000)
    expect(page.get_by_label("Collection", exact=True).locator("option")).to_have_count(3)
    expect(page.locator("#demo-status")).to_contain_text("Added demo-words, demo-sounds, demo-images")
    expect(page.locator("#empty")).to_be_hidden()
    expect(page.locator("#items li").first).to_be_visible()


def test_a_collection_deleted_elsewhere_is_explained_and_the_list_refreshed(empty_page: Page, empty_service: str) -> None:
    page = empty_page
    expect(page.get_by_label("Collection", exact=True).locator("option")).to_have_count(3)
    assert httpx.delete(f"{empty_service}/v1/collections/demo-sounds").status_code == 204  # another tab, say
    page.get_by_label("Collection", exact=True).select_option("demo-sounds")
    banner = page.get_by_role("alert")
    expect(banner).to_contain_text("Cannot open the collection demo-sounds: no collection named 'demo-sounds'")
    expect(banner).to_contain_text("It may have been deleted, perhaps in another tab")
    expect(page.get_by_label("Collection", exact=True).locator("option")).to_have_count(2)
    expect(page.get_by_label("Collection", exact=True)).not_to_have_value("demo-sounds")
