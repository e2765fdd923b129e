"""The report renders in a real headless browser (Debian chromium): the overview and a paper's page load, every image
loads, no console errors, and neither scrolls sideways on a 1,280-px laptop screen. Chromium and chromedriver are
installed by the README's test command (``make test``)."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading

import pytest

from agentmill.experiments.runner import run_suite
from agentmill.report import render_report
from agentmill.report.results import save_summaries
from tests.helpers.fake_experiments import COIN, CRASH

pytestmark = pytest.mark.browser


@pytest.fixture()
def served_report(tmp_path):
    recs = run_suite([COIN, CRASH], profile="quick", runs_dir=tmp_path / "runs")
    from agentmill.experiments import registry

    exps = {e.id: e for e in (COIN, CRASH)}
    real = registry()
    exps["e162.collapse_law"] = real["e162.collapse_law"]
    recs += run_suite([real["e162.collapse_law"]], profile="smoke", runs_dir=tmp_path / "runs")
    # a committed full record of the coin, so the fake paper's page shows the full column filled in
    save_summaries(run_suite([COIN], profile="full", runs_dir=tmp_path / "runs"), exps, tmp_path / "results")
    render_report(recs, exps, tmp_path / "report", results_dir=tmp_path / "results")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "report"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    server.shutdown()


def _driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "Debian chromium/chromium-driver missing: run the README's 'make test'"
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


def _check_page(drv, url: str, shot) -> None:
    """Loads, every image loads, no console error, no horizontal scroll at the window's 1,280 px."""
    from selenium.webdriver.common.by import By

    drv.get(url)
    assert "agentmill" in drv.title
    imgs = drv.find_elements(By.TAG_NAME, "img")
    assert imgs, f"no image on {url}"
    for img in imgs:
        ok = drv.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img)
        assert ok, f"image did not load: {img.get_attribute('src')}"
    severe = [e for e in drv.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert not severe, severe
    inner, scroll, client = drv.execute_script(
        "return [window.innerWidth, document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert inner == 1280 and scroll <= client, f"{url} scrolls sideways at 1,280 px: {scroll} > {client}"
    drv.save_screenshot(str(shot))


def test_report_renders_in_headless_chromium(served_report, tmp_path) -> None:
    from selenium.webdriver.common.by import By

    drv = _driver()
    try:
        _check_page(drv, served_report, tmp_path / "overview.png")
        rows = drv.find_elements(By.CSS_SELECTOR, "table.overview tbody tr")
        assert len(rows) == 2  # the fake paper and E162
        links = [a.get_attribute("href") for a in drv.find_elements(By.CSS_SELECTOR, "table.overview td a")]
        assert any(h.endswith("/e162_tree_rollouts.html") for h in links)
        _check_page(drv, served_report.replace("index.html", "fake.html"), tmp_path / "fake.png")
        full = drv.find_elements(By.XPATH, "//td[b='F-1']/following-sibling::td[3]")[0].text
        assert full.startswith("supported")  # the committed full record's verdict beside this smoke run's
        _check_page(drv, served_report.replace("index.html", "e162_tree_rollouts.html"), tmp_path / "e162.png")
        assert drv.find_elements(By.CSS_SELECTOR, "section.exp figure img")
    finally:
        drv.quit()
