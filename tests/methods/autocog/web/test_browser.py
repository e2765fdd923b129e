"""AC-9: a real headless Chromium participant clicks through consent, quiz and 100 trials, with a refresh at trial
40, a double key press at 41 and 3 injected 503s; one stored row per trial; exported metric equals the script's;
a second (always-left, 100 ms) bot is excluded; CSV/JSON round-trip."""

from __future__ import annotations

import json
import shutil
import time

import httpx
import numpy as np
import pytest

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.web.exclusion import drop_reasons
from agentmill.methods.autocog.web.export import export, read_csv_trials, rows

pytestmark = pytest.mark.browser


def _driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("Debian chromium/chromium-driver missing")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", "--disable-extensions"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


def _gt_choice(a, b) -> int:
    """The ground-truth participant: TTB's deterministic core (ties -> A)."""
    ctx = {"validities": np.array([0.9, 0.8, 0.7, 0.6]), "n_features": 4, "rating_max": 1}
    s = L.ttb().core_sign(np.array([[a]], float), np.array([[b]], float), ctx)[0, 0]
    return 1 if s < 0 else 0


def test_participant_in_headless_chromium(study, tmp_path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    st, db, port, proc = study
    tok, bot_tok = st.create_sessions("o1", 2)
    base = f"http://127.0.0.1:{port}"
    sched = httpx.get(f"{base}/api/s/{tok}").json()["schedule"]
    n = len(sched)
    assert n == 100
    t0 = time.time()
    drv = _driver()
    expected: dict[int, int] = {}
    try:
        wait = WebDriverWait(drv, 30)
        drv.get(f"{base}/s/{tok}")
        wait.until(lambda d: d.find_element(By.ID, "screen-consent").is_displayed())
        drv.save_screenshot(str(tmp_path / "consent.png"))
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
            if i == 10:
                httpx.post(f"{base}/test/faults?trials=3")  # the next 3 PUTs get 503
            if i == 40 and 40 not in expected:
                wait.until(shown(40))
                drv.refresh()
            wait.until(shown(i))
            if i == 20:
                drv.save_screenshot(str(tmp_path / "trial.png"))
            t = sched[i]
            opt = _gt_choice(t["a"], t["b"])
            side = t["side_a"] if opt == 0 else ("R" if t["side_a"] == "L" else "L")
            key = "f" if side == "L" else "j"
            expected[i] = opt
            if i == 41:
                ActionChains(drv).send_keys(key).send_keys(key).perform()  # double press
                time.sleep(0.3)
                cur = int(drv.find_element(By.ID, "screen-trial").get_attribute("data-trial") or -1)
                if cur == 43 or not drv.find_element(By.ID, "screen-trial").is_displayed():
                    # the second press landed on trial 42 as its answer (same side)
                    t2 = sched[42]
                    expected[42] = 0 if side == t2["side_a"] else 1
                    i = 43
                    continue
            else:
                ActionChains(drv).send_keys(key).perform()
            i += 1
        WebDriverWait(drv, 60).until(lambda d: d.find_element(By.ID, "completion-code").text.strip() != "")
        code = drv.find_element(By.ID, "completion-code").text
        severe = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"
                  and not any(c in e["message"] for c in ("503", "429", "422"))]
        # 503 injected, 429 rate limit, 422 ahead-of-window writes: all retried by the client until acknowledged
        assert not severe, severe
    finally:
        drv.quit()
    wall = time.time() - t0
    assert code.startswith("C")
    sess = st.session(tok)
    trials = st.trials(sess["session_id"])
    idx = [t["trial_idx"] for t in trials]
    assert idx == list(range(n))  # exactly one row per trial: 0 lost, 0 duplicated
    assert {t["trial_idx"]: t["response_option"] for t in trials} == expected
    assert sess["refresh_count"] >= 1 and sess["status"] == "completed"
    # the metric (share of A choices, catch trials removed) on exported data equals the script's
    exp_rows, _ = rows(st, include_excluded=True)
    mine = [r for r in exp_rows if r["participant"] == "p001" and not r["is_catch"]]
    script = [expected[t["trial_idx"]] for t in sched if t["trial_idx"] in expected
              and not st.trials(sess["session_id"])[t["trial_idx"]]["is_catch"]]
    assert np.mean([r["response"] == 0 for r in mine]) == np.mean([x == 0 for x in script])
    assert "single_side" not in drop_reasons(sess, trials) and "catch_failed" not in drop_reasons(sess, trials)

    # second bot: always left, 100 ms, over HTTP
    c = httpx.Client(base_url=base)
    assert c.post(f"/api/s/{bot_tok}/consent", json={"agree": True, "consent_version": "v1"}).status_code == 200
    assert c.post(f"/api/s/{bot_tok}/quiz", json={"best_expert": 0, "left_key": "f"}).json()["status"] == "in_task"
    for k in range(n):
        assert c.put(f"/api/s/{bot_tok}/trials/{k}", json={"side_pressed": "L", "rt_ms": 100}).status_code == 200
        time.sleep(0.06)  # stay under the 20 requests/s rate limit
    assert c.post(f"/api/s/{bot_tok}/complete").status_code == 200
    bs = st.session(bot_tok)
    assert {"single_side", "fast_rt"} <= set(drop_reasons(bs, st.trials(bs["session_id"])))

    # CSV / JSON round trip
    paths = export(st, tmp_path / "exp", fmt="csv", include_excluded=True)
    assert read_csv_trials(paths[0]) == rows(st, include_excluded=True)[0]
    pj = export(st, tmp_path / "expj", fmt="jsonl", include_excluded=True)
    assert [json.loads(x) for x in pj[0].read_text().splitlines()] == rows(st, include_excluded=True)[0]
    assert wall < 90, f"browser session took {wall:.1f} s (P5 target 90 s)"
