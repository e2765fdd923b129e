"""A scripted participant in a real headless Chromium (AC-9 [R]; offline, loopback only).

It clicks through consent, instructions and the quiz, then answers every trial of the server's schedule with a
given choice rule, while exercising the client's fault paths: 3 injected 503s (test mode), a page refresh at one
trial and a double key press at the next. Shared by AC-9's experiment and its test. Selenium is driven with Debian's
``chromedriver`` given explicitly, so Selenium Manager never downloads a driver; a missing browser raises
``BrowserMissing`` (the test turns it into a skip, the experiment into a run whose claim is not judged).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class BrowserMissing(RuntimeError):
    pass


FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic", "--disable-extensions")


def chromium_installed() -> bool:
    """Whether Debian's ``chromium`` and ``chromedriver`` are on PATH (``make browser-deps`` installs both)."""
    return bool(shutil.which("chromium") and shutil.which("chromedriver"))


def chrome_driver():
    """Headless Chromium through Debian's chromedriver (temporary profile, no extensions, no downloads)."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        raise BrowserMissing("Debian chromium/chromium-driver missing (`make browser-deps`, or apt-get install "
                             "chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        raise BrowserMissing("selenium missing: pip install 'agentmill[autocog-e2e]'") from e
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


@dataclass
class BrowserSession:
    expected: dict[int, int] = field(default_factory=dict)
    """trial_idx -> option (0 = A, 1 = B) the script chose (what the database must hold)."""
    code: str = ""
    """Completion code shown on the last screen ('' if none)."""
    severe_logs: list = field(default_factory=list)
    """Browser console errors other than the injected 503 / rate-limit 429 / ahead-of-window 422 retries."""
    wall_s: float = 0.0
    screenshots: list[str] = field(default_factory=list)


def run_participant(base: str, token: str, schedule: list[dict], choose: Callable[[list, list], int], *,
                    faults_at: int = 10, refresh_at: int = 40, double_at: int = 41,
                    screenshot_dir: Path | None = None) -> BrowserSession:
    """Play one session in Chromium. ``choose(a, b)`` returns 0 (option A) or 1 (option B) for a trial's ratings."""
    import httpx
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    out = BrowserSession()
    n = len(schedule)
    t0 = time.time()
    drv = chrome_driver()
    try:
        wait = WebDriverWait(drv, 30)
        drv.get(f"{base}/s/{token}")
        wait.until(lambda d: d.find_element(By.ID, "screen-consent").is_displayed())
        if screenshot_dir is not None:
            out.screenshots.append(str(screenshot_dir / "consent.png"))
            drv.save_screenshot(out.screenshots[-1])
        drv.find_element(By.ID, "btn-agree").click()
        wait.until(lambda d: d.find_element(By.ID, "screen-instructions").is_displayed())
        drv.find_element(By.ID, "btn-instructions").click()
        Select(drv.find_element(By.ID, "quiz-expert")).select_by_value("0")
        Select(drv.find_element(By.ID, "quiz-key")).select_by_value("f")
        drv.find_element(By.ID, "btn-quiz").click()

        def shown(i):
            return lambda d: d.find_element(By.ID, "screen-trial").is_displayed() and \
                d.find_element(By.ID, "screen-trial").get_attribute("data-trial") == str(i)

        i = 0
        while i < n:
            if i == faults_at:
                httpx.post(f"{base}/test/faults?trials=3")  # the next 3 PUTs get 503
            if i == refresh_at and refresh_at not in out.expected:
                wait.until(shown(refresh_at))
                drv.refresh()
            wait.until(shown(i))
            if i >= min(20, n // 2) and screenshot_dir is not None and len(out.screenshots) == 1:
                out.screenshots.append(str(screenshot_dir / "trial.png"))
                drv.save_screenshot(out.screenshots[-1])
            t = schedule[i]
            opt = choose(t["a"], t["b"])
            side = t["side_a"] if opt == 0 else ("R" if t["side_a"] == "L" else "L")
            key = "f" if side == "L" else "j"
            out.expected[i] = opt
            if i == double_at:
                ActionChains(drv).send_keys(key).send_keys(key).perform()  # double press
                time.sleep(0.3)
                cur = int(drv.find_element(By.ID, "screen-trial").get_attribute("data-trial") or -1)
                if cur == i + 2 or not drv.find_element(By.ID, "screen-trial").is_displayed():
                    # the second press landed on the next trial as its answer (same screen side)
                    t2 = schedule[i + 1]
                    out.expected[i + 1] = 0 if side == t2["side_a"] else 1
                    i += 2
                    continue
            else:
                ActionChains(drv).send_keys(key).perform()
            i += 1
        WebDriverWait(drv, 60).until(lambda d: d.find_element(By.ID, "completion-code").text.strip() != "")
        out.code = drv.find_element(By.ID, "completion-code").text
        out.severe_logs = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"
                           and not any(c in e["message"] for c in ("503", "429", "422"))]
    finally:
        drv.quit()
    out.wall_s = time.time() - t0
    return out


def always_left_bot(base: str, token: str, n: int, *, rt_ms: float = 100.0, pace_s: float = 0.06) -> int:
    """The NC-6 bot over HTTP: always the left key, ``rt_ms`` per trial. Returns the completion status code."""
    import httpx

    from agentmill.methods.autocog.web.loadtest import prepare

    with httpx.Client(base_url=base) as c:
        prepare(c, token)
        for k in range(n):
            r = c.put(f"/api/s/{token}/trials/{k}", json={"side_pressed": "L", "rt_ms": rt_ms})
            if r.status_code != 200:
                raise RuntimeError(f"bot trial {k}: status {r.status_code}")
            time.sleep(pace_s)  # stay under the 20 requests/s rate limit
        return c.post(f"/api/s/{token}/complete").status_code
