"""The page in a real chromium against the real service (demo data, API keys on)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from playwright.sync_api import Page, expect

from app.demo_data import RATE, sound_kinds
from tests.web.conftest import ARTIFACTS, choose_collection, enter_key

pytestmark = pytest.mark.browser


def _siren_file(tmp_path: Path) -> Path:
    """A fresh take of the demo's 'siren' sound (not one of the indexed files)."""
    wave = sound_kinds(np.random.default_rng(99))["siren"](1.01)
    path = tmp_path / "my query.wav"
    sf.write(path, wave.astype(np.float32), RATE)
    return path


def test_page_asks_for_the_key_then_lists_collections(page: Page) -> None:
    expect(page.get_by_role("alert")).to_contain_text("API key")
    enter_key(page)
    options = page.get_by_label("Collection", exact=True).locator("option")
    expect(options).to_have_count(2)
    expect(page.locator("#collection-info")).to_contain_text(re.compile(r"\d+ items, \d+ segments · encoder"))


def test_upload_a_clip_and_play_results_from_the_matching_segment(page: Page, tmp_path: Path) -> None:
    enter_key(page)
    choose_collection(page, "demo-sounds", "audio")
    page.get_by_label("Search with an example file:").set_input_files(_siren_file(tmp_path))
    results = page.locator("#results .result")
    expect(results.first).to_be_visible()
    expect(page.locator("#query-summary")).to_contain_text("file my query.wav")
    assert results.count() == 10
    # the three other takes of the same sound rank near the top
    top = results.locator(".result-id").all_inner_texts()[:4]
    assert sum(re.fullmatch(r"siren-\d", i) is not None for i in top) >= 2, top
    expect(results.first.locator(".scores")).to_contain_text("distance")
    # every result lists its matching segments, and the player starts at the best one
    recording = results.filter(has_text=re.compile(r"recording-\d")).first
    segments = recording.locator("button.segment")
    assert segments.count() >= 1
    start = float(re.match(r"▶ ([\d.]+)", segments.first.inner_text()).group(1))
    player = recording.locator("audio")
    page.wait_for_function("(a) => a.readyState >= 1 && a.src.startsWith('blob:')", arg=player.element_handle())
    assert abs(player.evaluate("a => a.currentTime") - start) < 0.05
    # clicking another segment moves the player there
    if segments.count() > 1:
        second = float(re.match(r"▶ ([\d.]+)", segments.nth(1).inner_text()).group(1))
        segments.nth(1).click()
        assert abs(player.evaluate("a => a.currentTime") - second) < 0.5


def test_record_from_the_microphone_and_search(page: Page) -> None:
    enter_key(page)
    choose_collection(page, "demo-sounds", "audio")
    page.get_by_role("button", name="● Record").click()
    expect(page.locator("#record-status")).to_contain_text("Recording")
    page.wait_for_timeout(1500)  # chromium's fake microphone plays a beep
    page.get_by_role("button", name="■ Stop and search").click()
    expect(page.locator("#query-summary")).to_contain_text(re.compile(r"\d+ results for file recording\.webm"))
    expect(page.locator("#results .result").first).to_be_visible()


def test_images_show_thumbnails_and_a_click_searches_by_that_image(page: Page) -> None:
    enter_key(page)
    choose_collection(page, "demo-images", "image")
    text_box = page.get_by_label("Describe an image")
    if text_box.is_enabled():  # an image-text encoder is installed: search by a sentence
        text_box.fill("two red circles on the left")
        page.get_by_role("button", name="Search", exact=True).click()
        # generous: the first sentence loads the text model (MiniLM) in the service
        expect(page.locator("#query-summary")).to_contain_text('results for text "two red circles on the left"', timeout=60_000)
        expect(page.locator("#results .result .scores").first).to_contain_text(re.compile(r"stage 1 .* re-rank"))
    else:  # the training-free encoder: the page says why and offers search by example
        expect(page.locator("#text-note")).to_contain_text("searches by example only")
        page.locator("#items li").first.get_by_role("button", name="Search with this").click()
    thumbs = page.locator("#results .result img.thumb")
    expect(thumbs.first).to_have_attribute("src", re.compile(r"^blob:"))
    page.wait_for_function("() => [...document.querySelectorAll('#results img.thumb')].every(i => i.complete && i.naturalWidth > 0)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "image-results.png"), full_page=True)
    chosen = page.locator("#results .result").nth(1)
    chosen_id = chosen.locator(".result-id").inner_text()
    chosen.get_by_role("button", name=f"Search with image {chosen_id}").click()
    expect(page.locator("#query-summary")).to_contain_text(f"item {chosen_id}")
    # a query by an item never returns that item itself
    expect(page.locator("#results .result").first).to_be_visible()
    assert chosen_id not in page.locator("#results .result-id").all_inner_texts()


def test_ingest_shows_progress_and_a_readable_error_for_a_bad_file(page: Page, tmp_path: Path) -> None:
    enter_key(page)
    choose_collection(page, "demo-sounds", "audio")
    before = int(re.match(r"(\d+) items", page.locator("#collection-info").inner_text()).group(1))
    good = tmp_path / "new-siren.wav"
    good.write_bytes(_siren_file(tmp_path).read_bytes())
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt this is not really audio")
    page.get_by_label("Add files to this collection:").set_input_files([good, bad])
    good_row = page.locator("#uploads li[data-file='new-siren.wav']")
    bad_row = page.locator("#uploads li[data-file='broken.wav']")
    expect(good_row.locator(".status")).to_contain_text("indexed as new-siren.wav")
    expect(good_row.locator("progress")).to_have_js_property("value", 1)
    expect(bad_row).to_have_class(re.compile("failed"))
    message = bad_row.get_by_role("alert")
    expect(message).to_contain_text("broken.wav")
    assert "Traceback" not in message.inner_text() and "{" not in message.inner_text()
    expect(page.locator("#collection-info")).to_contain_text(f"{before + 1} items")


def test_judging_a_comparison_saves_qrels_and_shows_confidence(page: Page, service: tuple[str, Path]) -> None:
    _, data_dir = service
    enter_key(page)
    choose_collection(page, "demo-sounds", "audio")
    page.locator("#options summary").click()
    page.get_by_label("Compare two configurations for judging:").check()
    page.locator("#items li").filter(has_text="chirp-up-1").get_by_role("button", name="Search with this").click()
    expect(page.locator("#query-summary")).to_contain_text("binary vs float")
    panel = page.locator("#confidence")
    expect(panel).to_contain_text(re.compile(r"Confidence \d+%"))
    first = page.locator("#results .result").first
    doc = first.locator(".result-id").inner_text()
    relevant = first.get_by_role("button", name="Relevant", exact=True)
    relevant.click()
    expect(relevant).to_have_attribute("aria-pressed", "true")
    expect(panel).to_contain_text("1 of")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "judging-confidence.png"), full_page=True)
    qrels = (data_dir / "judgments" / "demo-sounds.qrels").read_text().split()
    assert qrels[-4:] == ["item:chirp-up-1", "0", doc, "2"]
    assert (data_dir / "judgments" / "demo-sounds" / "binary.run").is_file()
    # the judgment survives a reload: the buttons show what was saved
    page.reload()
    choose_collection(page, "demo-sounds", "audio")
    page.locator("#items li").filter(has_text="chirp-up-1").get_by_role("button", name="Search with this").click()
    card = page.locator(f"#results .result[data-id='{doc}']")
    expect(card.get_by_role("button", name="Relevant", exact=True)).to_have_attribute("aria-pressed", "true")
