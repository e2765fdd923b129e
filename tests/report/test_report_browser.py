"""The report renders in a real headless browser (Debian chromium): page loads, every image loads, no console
errors. Chromium and chromedriver are installed by the README's test command (``make test``)."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading

import pytest

from agentmill.experiments.runner import run_suite
from agentmill.report import render_report
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
    render_report(recs, exps, tmp_path / "report")
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
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


def test_report_renders_in_headless_chromium(served_report, tmp_path) -> None:
    from selenium.webdriver.common.by import By

    drv = _driver()
    try:
        drv.get(served_report)
        assert "agentmill" in drv.title
        rows = drv.find_elements(By.CSS_SELECTOR, "tbody tr")
        assert len(rows) >= 3
        imgs = drv.find_elements(By.TAG_NAME, "img")
        assert len(imgs) >= 2
        for img in imgs:
            ok = drv.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img)
            assert ok, f"image did not load: {img.get_attribute('src')}"
        severe = [e for e in drv.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
        assert not severe, severe
        drv.save_screenshot(str(tmp_path / "report.png"))
    finally:
        drv.quit()
