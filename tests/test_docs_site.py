"""The built documentation site renders in a real browser: headless Chromium, no console errors.

Needs the site built (``sphinx-build -W -b html doc doc/_build/html``), Debian's ``chromium`` and
the ``playwright`` package (the ``doc`` extra). Skipped when any is missing, unless
``SKDP_REQUIRE_DOCS=1`` (set by ``.ci/run``, which builds the site first): then missing is a failure.
"""
import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

SITE = Path(__file__).resolve().parents[1] / "doc" / "_build" / "html"
GALLERY_PAGE = "auto_examples/plot_accuracy_vs_epsilon.html"
REQUIRED = os.environ.get("SKDP_REQUIRE_DOCS") == "1"
# Chromium's own background services try the network at start; this machine has none.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _missing(why):
    if REQUIRED:
        pytest.fail(f"SKDP_REQUIRE_DOCS=1 but {why}")
    pytest.skip(why)


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def site_url():
    if not (SITE / "index.html").exists():
        _missing(f"the site is not built ({SITE / 'index.html'} missing; run "
                 "`sphinx-build -W -b html doc doc/_build/html`)")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(SITE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[doc]')")
    executable = _chromium()
    if executable is None:
        _missing("Chromium is not installed (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _open(browser, url):
    """Load ``url``; return the page and every console error, page error and failed request."""
    page = browser.new_page()
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, f"{url}: HTTP {response and response.status}"
    page.wait_for_load_state("networkidle")
    return page, problems


def test_index_renders(browser, site_url):
    page, problems = _open(browser, f"{site_url}/index.html")
    assert "skdp" in page.title()
    assert page.locator("text=API reference").count() > 0
    assert problems == []
    page.close()


def test_gallery_page_renders_its_plot(browser, site_url):
    page, problems = _open(browser, f"{site_url}/{GALLERY_PAGE}")
    images = page.locator("img.sphx-glr-single-img")
    assert images.count() >= 1, "the example's plot is not on the page (was the gallery executed?)"
    # Loaded and decoded, not a broken-image icon.
    widths = images.evaluate_all("imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
    assert all(w > 100 for w in widths), widths
    assert problems == []
    page.close()


def test_api_reference_lists_every_public_name(site_url):
    from skdp._public import public_objects

    html = (SITE / "api.html").read_text()
    missing = [f"{m}.{n}" for m, n, _ in public_objects() if f"{m}.{n}" not in html]
    assert not missing, (f"not in the API reference: {missing}; if they were added since the site was built, "
                         "rebuild it: sphinx-build -W -b html doc doc/_build/html")
