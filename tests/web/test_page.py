"""The page in a real chromium against the real service (real demo data, API keys on)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import soundfile as sf
from playwright.sync_api import Page, expect

from app.usecases import demo_data
from tests.web.conftest import API_KEY, choose_collection, enter_key, snap

pytestmark = pytest.mark.browser

DEMO = demo_data.DEMO_DIR
MANIFEST = {row["id"]: row for row in map(json.loads, (DEMO / demo_data.MANIFEST).read_text().splitlines())}


def _word_from_recording(tmp_path: Path, recording: str = "recording-1") -> tuple[Path, str]:
    """A take of a word cut out of a long recording: the same speaker's other take, never indexed alone."""
    occurrence = MANIFEST[recording]["metadata"]["occurrences"][0]
    wave, rate = sf.read(DEMO / MANIFEST[recording]["file"], dtype="float32")
    start, end = int((occurrence["start"] - 0.2) * rate), int((occurrence["end"] + 0.2) * rate)
    path = tmp_path / f"my {occurrence['word']}.wav"
    sf.write(path, wave[start:end], rate)
    return path, occurrence["word"]


def test_the_key_is_asked_for_kept_for_the_tab_and_not_beyond(page: Page) -> None:
    expect(page.get_by_role("alert")).to_contain_text("Enter the service's API key in the API key field")
    enter_key(page)
    options = page.get_by_label("Collection", exact=True).locator("option")
    expect(options).to_have_count(3)
    expect(page.locator("#collection-info")).to_contain_text(re.compile(r"\d+ items, \d+ segments · encoder"))
    page.reload()  # the same tab keeps the key
    expect(page.locator("#collection-info")).to_contain_text(re.compile(r"\d+ items"))
    assert page.evaluate("sessionStorage.getItem('recall.apiKey')") == API_KEY
    assert page.evaluate("localStorage.getItem('recall.apiKey')") is None
    other = page.context.new_page()  # a new tab starts without it
    other.goto(page.url)
    expect(other.get_by_role("alert")).to_contain_text("API key")
    other.close()


def test_a_word_finds_other_speakers_and_both_places_in_a_long_recording(page: Page, tmp_path: Path) -> None:
    enter_key(page)
    choose_collection(page, "demo-words", "audio")
    query, word = _word_from_recording(tmp_path)
    page.get_by_label("Search with an example file:").set_input_files(query)
    results = page.locator("#results .result")
    expect(page.locator("#query-summary")).to_contain_text(f"file {query.name}")
    expect(results.first).to_be_visible()
    ids = results.locator(".result-id").all_inner_texts()
    # the same word said by other speakers (never the speaker of the query) ranks high
    assert sum(re.fullmatch(rf"{word}-s[2-5]", i) is not None for i in ids[:6]) >= 2, ids
    # the recording it was cut from: a timeline marks each occurrence and the player starts at the best
    card = page.locator("#results .result[data-id='recording-1']")
    player = card.locator("audio")
    page.wait_for_function("(a) => a.readyState >= 1 && a.src.startsWith('blob:')", arg=player.element_handle())
    marks = card.locator(".timeline .mark")
    expect(marks.first).to_be_visible()
    spans = [o for o in MANIFEST["recording-1"]["metadata"]["occurrences"] if o["word"] == word]
    starts = sorted(float(re.search(r"at ([\d.]+) s", m.get_attribute("aria-label")).group(1)) for m in marks.all()[:2])
    for span, start in zip(spans, starts):  # the two best marks are where the word is said
        assert start < span["end"] and span["start"] < start + 1.0, (spans, starts)
    best = float(re.match(r"▶ ([\d.]+)", card.locator("button.segment").first.inner_text()).group(1))
    assert abs(player.evaluate("a => a.currentTime") - best) < 0.05
    marks.nth(1).click()  # a click on another mark plays from there
    second = float(re.search(r"at ([\d.]+) s", marks.nth(1).get_attribute("aria-label")).group(1))
    page.wait_for_function("([a, t]) => Math.abs(a.currentTime - t) < 0.5", arg=[player.element_handle(), second])
    snap(page, "page-audio-results", docs=True)


def test_record_from_the_microphone_and_search(page: Page) -> None:
    enter_key(page)
    choose_collection(page, "demo-sounds", "audio")
    page.get_by_role("button", name="● Record").click()
    expect(page.locator("#record-status")).to_contain_text("Recording")
    page.wait_for_timeout(2200)  # chromium's fake microphone plays a beep; the encoder's window is 2 s
    page.get_by_role("button", name="■ Stop and search").click()
    expect(page.locator("#query-summary")).to_contain_text(re.compile(r"\d+ results for file recording\.webm"))
    expect(page.locator("#results .result").first).to_be_visible()


def test_a_sentence_finds_the_photo_and_thumbnails_search_by_image(page: Page) -> None:
    enter_key(page)
    choose_collection(page, "demo-images", "image")
    page.get_by_label("Describe an image").fill("horses on a hill by a lake")
    page.get_by_role("button", name="Search", exact=True).click()
    # generous: the first sentence loads the text model (MiniLM) in the service
    expect(page.locator("#query-summary")).to_contain_text('results for text "horses on a hill by a lake"', timeout=60_000)
    first = page.locator("#results .result").first
    expect(first.locator(".result-id")).to_have_text("coco-78499")  # a photo the model was not trained on
    expect(first.locator(".scores")).to_contain_text(re.compile(r"stage 1 .* re-rank"))
    thumbs = page.locator("#results .result img.thumb")
    expect(thumbs.first).to_have_attribute("src", re.compile(r"^blob:"))
    page.wait_for_function("() => [...document.querySelectorAll('#results img.thumb')].every(i => i.complete && i.naturalWidth > 0)")
    snap(page, "page-image-results", docs=True)
    chosen = page.locator("#results .result").nth(1)
    chosen_id = chosen.locator(".result-id").inner_text()
    chosen.get_by_role("button", name=f"Search with image {chosen_id}").click()
    expect(page.locator("#query-summary")).to_contain_text(f"item {chosen_id}")
    expect(page.locator("#results .result").first).to_be_visible()
    assert chosen_id not in page.locator("#results .result-id").all_inner_texts()  # never the query itself


def _ogg(tmp_path: Path, source: str, name: str) -> Path:
    wave, rate = sf.read(DEMO / MANIFEST[source]["file"], dtype="float32")
    path = tmp_path / name
    sf.write(path, wave[::-1].copy(), rate, format="OGG", subtype="VORBIS")  # reversed: a new sound, not a copy
    return path


def test_several_files_run_as_a_job_with_progress_and_per_file_errors(page: Page, tmp_path: Path) -> None:
    enter_key(page)
    choose_collection(page, "demo-sounds", "audio")
    before = int(re.match(r"(\d+) items", page.locator("#collection-info").inner_text()).group(1))
    good = [_ogg(tmp_path, "rain-1", "rain-backwards.ogg"), _ogg(tmp_path, "dog-1", "dog-backwards.ogg")]
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt this is not really audio")
    page.get_by_label("Add files to this collection:").set_input_files([*good, bad])
    job = page.locator("#uploads li.job").first
    expect(job.locator(".status")).to_contain_text("2 of 3 indexed, 1 failed")
    expect(job.locator("progress")).to_have_js_property("value", 1)
    expect(page.locator("#uploads li[data-file='rain-backwards.ogg'] .status")).to_have_text("indexed")
    bad_row = page.locator("#uploads li[data-file='broken.wav']")
    expect(bad_row).to_have_class(re.compile("failed"))
    message = bad_row.get_by_role("alert").inner_text()
    assert message.startswith("broken.wav was not added:") and "Check that the file is complete" in message, message
    assert "Traceback" not in message and "{" not in message
    expect(page.locator("#collection-info")).to_contain_text(f"{before + 2} items")
    snap(page, "page-upload-job", docs=True)


def test_drag_and_drop_a_file_to_add_it(page: Page) -> None:
    enter_key(page)
    choose_collection(page, "demo-sounds", "audio")
    before = int(re.match(r"(\d+) items", page.locator("#collection-info").inner_text()).group(1))
    buffer = io.BytesIO()
    wave, rate = sf.read(DEMO / MANIFEST["helicopter-1"]["file"], dtype="float32")
    sf.write(buffer, wave[: 3 * rate] * 0.5, rate, format="WAV")
    # a real drop event carrying a File, as the browser makes one when a file is dragged in
    page.locator("#ingest-drop").evaluate(
        """(zone, bytes) => {
            const data = new DataTransfer();
            data.items.add(new File([new Uint8Array(bytes)], "dropped.wav", { type: "audio/wav" }));
            zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: data, bubbles: true, cancelable: true }));
            zone.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
        }""",
        list(buffer.getvalue()),
    )
    expect(page.locator("#uploads li[data-file='dropped.wav'] .status")).to_contain_text("indexed as dropped.wav")
    expect(page.locator("#collection-info")).to_contain_text(f"{before + 1} items")


def test_delete_an_item_after_confirming(page: Page) -> None:
    enter_key(page)
    choose_collection(page, "demo-words", "audio")
    row = page.locator("#items li[data-id='five-s1']")
    if not row.count():  # items are listed 12 to a page
        while not row.count():
            page.get_by_role("button", name="Next").click()
            page.wait_for_timeout(100)
    count = lambda: int(re.match(r"(\d+) items", page.locator("#collection-info").inner_text()).group(1))  # noqa: E731
    before = count()
    row.get_by_role("button", name="Delete five-s1").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete five-s1 from demo-words?")
    page.keyboard.press("Escape")  # cancelling keeps it
    expect(dialog).to_be_hidden()
    assert count() == before and row.count() == 1
    row.get_by_role("button", name="Delete five-s1").click()
    dialog.get_by_role("button", name="Delete item").click()
    expect(page.locator("#collection-info")).to_contain_text(f"{before - 1} items")
    expect(page.locator("#items li[data-id='five-s1']")).to_have_count(0)


def test_judging_a_comparison_saves_qrels_and_shows_confidence(page: Page, service: tuple[str, Path]) -> None:
    _, data_dir = service
    enter_key(page)
    choose_collection(page, "demo-sounds", "audio")
    page.locator("#options summary").click()
    page.get_by_label("Compare two configurations for judging:").check()
    page.locator("#items li").filter(has_text="crackling-fire-1").get_by_role("button", name="Search with this").click()
    expect(page.locator("#query-summary")).to_contain_text("binary vs float")
    panel = page.locator("#confidence")
    expect(panel).to_contain_text(re.compile(r"Confidence \d+%"))
    first = page.locator("#results .result").first
    doc = first.locator(".result-id").inner_text()
    relevant = first.get_by_role("button", name="Relevant", exact=True)
    relevant.click()
    expect(relevant).to_have_attribute("aria-pressed", "true")
    expect(panel).to_contain_text("1 of")
    snap(page, "judging-confidence")
    qrels = (data_dir / "judgments" / "demo-sounds.qrels").read_text().split()
    assert qrels[-4:] == ["item:crackling-fire-1", "0", doc, "2"]
    assert (data_dir / "judgments" / "demo-sounds" / "binary.run").is_file()
    page.reload()  # the judgment survives a reload: the buttons show what was saved
    choose_collection(page, "demo-sounds", "audio")
    page.locator("#items li").filter(has_text="crackling-fire-1").get_by_role("button", name="Search with this").click()
    card = page.locator(f"#results .result[data-id='{doc}']")
    expect(card.get_by_role("button", name="Relevant", exact=True)).to_have_attribute("aria-pressed", "true")


def test_keyboard_only_key_collection_and_search(page: Page) -> None:
    page.get_by_label("API key").focus()
    page.keyboard.type(API_KEY)
    page.keyboard.press("Enter")  # submits the key form
    expect(page.locator("#collection-info")).to_contain_text(re.compile(r"\d+ items"))
    page.get_by_label("Collection", exact=True).focus()
    page.keyboard.press("End")  # the last collection: demo-words
    expect(page.locator("#audio-query")).to_be_visible()
    expect(page.get_by_label("Collection", exact=True)).to_have_value("demo-words")
    expect(page.locator("#items li[data-id='digit-6-george']")).to_be_visible()  # its items, not the last ones
    button = page.locator("#items li").first.get_by_role("button", name="Search with this")
    for _ in range(80):  # Tab through the page to the first item's button
        page.keyboard.press("Tab")
        if button.evaluate("b => b === document.activeElement"):
            break
    else:
        pytest.fail("the item's search button cannot be reached with Tab")
    page.keyboard.press("Enter")
    expect(page.locator("#query-summary")).to_contain_text(re.compile(r"\d+ results for item "))
    # focus is visible: the focused button has an outline
    assert button.evaluate("b => getComputedStyle(b).outlineStyle") != "none"


def test_phone_width_fits_the_screen(page: Page) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    enter_key(page)
    choose_collection(page, "demo-images", "image")
    page.get_by_label("Describe an image").fill("a cat looking in a mirror")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator("#results .result").first).to_be_visible(timeout=60_000)
    page.wait_for_function("() => [...document.querySelectorAll('#results img.thumb')].every(i => i.complete && i.naturalWidth > 0)")
    overflow = page.evaluate("() => document.documentElement.scrollWidth")
    assert overflow <= 390, f"the page is {overflow} px wide on a 390 px screen"
    snap(page, "page-phone", docs=True, full_page=False)  # what the phone shows: the top of the results


def test_the_item_distance_option_goes_with_file_and_item_searches(page: Page) -> None:
    enter_key(page)
    choose_collection(page, "demo-sounds", "audio")
    fire = DEMO / MANIFEST["crackling-fire-1"]["file"]  # 5 s: a query of several windows
    second = page.locator("#results .result").nth(1)

    def distance_of_second() -> float:
        expect(page.locator("#query-summary")).to_contain_text("results for file")
        return float(re.search(r"distance ([\d.]+)", second.locator(".scores").inner_text()).group(1))

    page.get_by_label("Search with an example file:").set_input_files(fire)
    by_mean = distance_of_second()
    page.locator("#options summary").click()
    page.get_by_label("Item distance").select_option("min")
    page.locator("#query-summary").evaluate("e => e.textContent = ''")
    page.get_by_label("Search with an example file:").set_input_files([])
    page.get_by_label("Search with an example file:").set_input_files(fire)
    by_min = distance_of_second()
    assert by_min < by_mean  # the nearest pair of windows is closer than the mean over the query's windows
    first = page.locator("#results .result").first
    with page.expect_request(lambda r: r.url.endswith("/search") and r.method == "POST") as sent:
        first.get_by_role("button", name=re.compile(r"^Search with")).first.click()
    assert sent.value.post_data_json["item_distance"] == "min"
    expect(page.locator("#query-summary")).to_contain_text("results for item")
