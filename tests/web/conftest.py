"""Browser tests: one demo service with API keys on, one chromium, a fresh page per test.

Chromium is Debian's (/usr/bin/chromium, installed by .ci/run); Playwright only drives it.
Its fake media device stands in for a microphone (a steady beep), so recording is tested too.
Screenshots go to test-artifacts/web/; with RECALL_DOCS_SCREENSHOTS=1 the ones the README shows
are also written to docs/ (that is how the committed ones were made).
"""

from __future__ import annotations

import io
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from PIL import Image
from playwright.sync_api import BrowserContext, Page, Playwright, expect, sync_playwright

from app.settings import Settings
from tests.live_server import live_server

API_KEY = "browser-test-key"
CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "web"
DOCS = ROOT / "docs"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
    "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream", "--autoplay-policy=no-user-gesture-required",
]


@pytest.fixture(scope="package")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The demo service with keys required; yields (base URL, data dir)."""
    data_dir = tmp_path_factory.mktemp("web") / "data"
    settings = Settings(
        data_dir=data_dir, demo=True, api_keys=[API_KEY],
        encoders={"default_audio": "audio-baseline", "default_image": "image-baseline"},
    )
    with live_server(settings) as url:
        yield url, data_dir


@pytest.fixture(scope="package")
def playwright_driver() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="package")
def browser(playwright_driver: Playwright, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    # a persistent context is how Playwright takes a fresh --user-data-dir
    profile = tmp_path_factory.mktemp("chromium-profile")
    context = playwright_driver.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS, viewport={"width": 1280, "height": 1000},
    )
    context.grant_permissions(["microphone"])
    yield context
    context.close()


@contextmanager
def fresh_page(browser: BrowserContext, url: str) -> Iterator[Page]:
    """A page at ``url``'s root with no saved key, closed after; any JavaScript error on it fails the test."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url + "/")
    page.evaluate("localStorage.clear()")  # the profile is shared by the tests of this package
    page.reload()  # a new tab: sessionStorage (the key) starts empty anyway
    yield page
    page.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def page(browser: BrowserContext, service: tuple[str, Path], request: pytest.FixtureRequest) -> Iterator[Page]:
    """A page at the service root with no saved key; a screenshot of it is kept after the test."""
    with fresh_page(browser, service[0]) as page:
        yield page
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)


def snap(page: Page, name: str, docs: bool = False, full_page: bool = True) -> None:
    """Keep a screenshot of the page; README screenshots also go to docs/ when asked to."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)
    if docs and os.environ.get("RECALL_DOCS_SCREENSHOTS") == "1":
        # 256 colours: the committed copies stay small; the page is flat colours and text anyway
        image = Image.open(io.BytesIO(page.screenshot(full_page=full_page))).convert("RGB")
        DOCS.mkdir(exist_ok=True)
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(DOCS / f"{name}.png", optimize=True)


def enter_key(page: Page) -> None:
    """Type the API key into the page's key field and save it, as a user would."""
    page.get_by_label("API key").fill(API_KEY)
    page.get_by_role("button", name="Save key").click()
    expect(page.locator("#collection-info")).to_contain_text(re.compile(r"\d+ items"))


def choose_collection(page: Page, name: str, modality: str) -> None:
    page.get_by_label("Collection", exact=True).select_option(name)
    expect(page.locator(f"#{modality}-query")).to_be_visible()
    expect(page.locator("#items li").first).to_be_visible()
