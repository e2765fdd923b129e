// AutoCog participant task: plain JS, no CDN. Every response is written to a localStorage outbox first, sent with
// an idempotent PUT and retried with back-off (250 ms * 2^k, <= 8 s) until the server acknowledges it. On reload the
// page bootstraps from the server, flushes the outbox and resumes at the smallest unanswered trial.
(function () {
  "use strict";
  const token = location.pathname.split("/").filter(Boolean).pop();
  const api = "/api/s/" + token;
  const OUTBOX = "autocog-outbox-" + token;
  const pageLoadId = Math.random().toString(36).slice(2);
  let boot = null, current = -1, shownAt = 0, answered = new Set(), acked = new Set(), listening = false;
  let blurStart = null, flushing = false, enableTimer = null;
  const params = new URLSearchParams(location.search);

  const $ = (id) => document.getElementById(id);
  function show(name) {
    for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== "screen-" + name;
  }
  function outbox() { try { return JSON.parse(localStorage.getItem(OUTBOX) || "{}"); } catch (e) { return {}; } }
  function saveOutbox(o) { localStorage.setItem(OUTBOX, JSON.stringify(o)); }
  // every request is retried on network errors, 429 (rate limit) and 5xx with back-off; other answers are final
  async function req(path, opts) {
    for (let k = 0; ; k++) {
      try {
        const r = await fetch(api + path, opts);
        if (r.status !== 429 && r.status < 500) return r;
      } catch (e) { /* offline: retry */ }
      await sleep(Math.min(8000, 250 * Math.pow(2, k)));
    }
  }
  function post(path, body) {
    return req(path, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body || {}) });
  }
  function sleep(ms) { return new Promise((res) => setTimeout(res, ms)); }

  async function sendTrial(idx, item) {
    for (let k = 0; ; k++) {
      try {
        const r = await fetch(api + "/trials/" + idx, { method: "PUT", headers: { "Content-Type": "application/json" },
          body: JSON.stringify(item) });
        // 422 is retried too: a write far ahead of the last acknowledged trial is accepted once earlier ones land
        if (r.ok || r.status === 409 || r.status === 403 || r.status === 404) {
          const o = outbox(); delete o[idx]; saveOutbox(o);
          if (r.ok) acked.add(Number(idx));
          return;
        }
      } catch (e) { /* offline: retry */ }
      await sleep(Math.min(8000, 250 * Math.pow(2, k)));
    }
  }
  async function flush() {
    if (flushing) return; flushing = true;
    try {
      const o = outbox();
      await Promise.all(Object.keys(o).sort((a, b) => a - b).map((i) => sendTrial(i, o[i])));
    } finally { flushing = false; }
  }
  window.addEventListener("online", flush);

  function renderRatings(el, ratings) {
    el.textContent = "";
    ratings.forEach((x, i) => {
      const row = document.createElement("div"); row.className = "row";
      const lab = document.createElement("span"); lab.textContent = "Expert " + (i + 1) + ": ";
      const bar = document.createElement("span"); bar.className = "bar";
      bar.style.width = (20 + 160 * x / boot.rating_max) + "px";
      const num = document.createElement("span"); num.textContent = " " + x + " / " + boot.rating_max;
      row.append(lab, bar, num); el.append(row);
    });
  }
  function nextIndex() {
    for (let i = 0; i < boot.schedule.length; i++) if (!answered.has(i)) return i;
    return -1;
  }
  function showTrial() {
    current = nextIndex();
    if (current < 0) { finish(); return; }
    const t = boot.schedule[current];
    $("progress").textContent = "Trial " + (current + 1) + " of " + boot.schedule.length;
    const left = t.side_a === "L" ? t.a : t.b, right = t.side_a === "L" ? t.b : t.a;
    renderRatings($("ratings-L"), left); renderRatings($("ratings-R"), right);
    $("screen-trial").dataset.trial = String(current);
    show("trial"); shownAt = performance.now(); listening = true;
    // min_rt_ms: the buttons stay disabled (and keys are ignored) until the minimum response time has passed
    setButtons(boot.min_rt_ms <= 0);
    clearTimeout(enableTimer);
    if (boot.min_rt_ms > 0) enableTimer = setTimeout(() => setButtons(true), boot.min_rt_ms);
  }
  function setButtons(on) { $("btn-L").disabled = !on; $("btn-R").disabled = !on; }
  function respond(side) {
    if (!listening || performance.now() - shownAt < boot.min_rt_ms) return;
    listening = false;  // detach on the first response: double presses are ignored
    const idx = current;
    const item = { side_pressed: side, rt_ms: Math.round(performance.now() - shownAt), client_ts: Date.now(),
      page_load_id: pageLoadId };
    const o = outbox(); o[idx] = item; saveOutbox(o);
    answered.add(idx);
    sendTrial(idx, item);
    setTimeout(showTrial, 0);
  }
  document.addEventListener("keydown", (e) => {
    if (e.repeat || !boot) return;
    const k = e.key.toLowerCase();
    if (k === boot.keys.left) respond("L"); else if (k === boot.keys.right) respond("R");
  });
  $("btn-L").addEventListener("click", () => respond("L"));
  $("btn-R").addEventListener("click", () => respond("R"));

  async function finish() {
    show("done"); $("done-msg").textContent = "Saving your answers…";
    for (let k = 0; ; k++) {
      await flush();
      if (Object.keys(outbox()).length === 0) {
        const r = await post("/complete");
        if (r.ok) { const j = await r.json(); $("completion-code").textContent = j.completion_code;
          $("done-msg").textContent = "All answers saved.";
          // completion_url (validated http(s) by the server's study config): go back to the recruiter
          if (j.completion_url) { $("done-msg").textContent = "All answers saved. Redirecting…";
            location.assign(j.completion_url); }
          return; }
      }
      await sleep(Math.min(8000, 250 * Math.pow(2, k)));
    }
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) blurStart = Date.now();
    else if (blurStart !== null) {
      post("/events", { event_id: "blur-" + pageLoadId + "-" + blurStart, kind: "blur",
        payload: { ms: Date.now() - blurStart } });
      blurStart = null;
    }
  });

  async function start() {
    const r = await req("", {});
    if (!r.ok) { show("end"); $("end-msg").textContent = "This link is not valid."; return; }
    boot = await r.json();
    boot.acked.forEach((i) => { acked.add(i); answered.add(i); });
    Object.keys(outbox()).forEach((i) => answered.add(Number(i)));
    if (sessionStorage.getItem("autocog-loaded-" + token)) {
      post("/events", { event_id: "refresh-" + pageLoadId, kind: "refresh" });
    }
    sessionStorage.setItem("autocog-loaded-" + token, "1");
    $("title").textContent = boot.title; $("consent-text").textContent = boot.consent_text;
    $("instructions").textContent = boot.instructions;
    const sel = $("quiz-expert"); sel.textContent = "";
    const o0 = document.createElement("option"); o0.value = ""; o0.textContent = "choose…"; sel.append(o0);
    boot.validities.forEach((v, i) => { const o = document.createElement("option"); o.value = String(i);
      o.textContent = "Expert " + (i + 1) + " (" + Math.round(v * 100) + "% accurate)"; sel.append(o); });
    renderValidities();
    if (boot.status === "completed") { finish(); return; }
    if (boot.status === "in_task") { flush(); showTrial(); return; }
    if (boot.status === "declined" || boot.status === "failed_quiz") {
      show("end"); $("end-msg").textContent = "Thank you. The session has ended."; return; }
    if (boot.status === "consented") { show("instructions"); return; }
    show("consent");
  }
  function renderValidities() {
    const el = $("validities"); el.textContent = "";
    const h = document.createElement("h3"); h.textContent = "How accurate each expert is"; el.append(h);
    boot.validities.forEach((v, i) => { const row = document.createElement("div"); row.className = "row";
      const s = document.createElement("span"); s.textContent = "Expert " + (i + 1);
      const t = document.createElement("b"); t.textContent = Math.round(v * 100) + "%"; row.append(s, t); el.append(row); });
  }
  $("btn-agree").addEventListener("click", async () => {
    const r = await post("/consent", { agree: true, consent_version: boot.consent_version,
      honeypot: $("honeypot").value, pid: params.get("PROLIFIC_PID"), study_ref: params.get("STUDY_ID"),
      session_ref: params.get("SESSION_ID") });
    if (r.ok) show("instructions");
  });
  $("btn-decline").addEventListener("click", async () => {
    await post("/consent", { agree: false, consent_version: boot.consent_version, honeypot: "" });
    show("end"); $("end-msg").textContent = "Thank you. The session has ended.";
  });
  $("btn-instructions").addEventListener("click", async () => {
    if (boot.quiz) { show("quiz"); return; }
    // quiz: false — the server moves the session to the task without a quiz (it ignores the answers)
    const j = await (await post("/quiz", {})).json();
    if (j.status === "in_task") showTrial();
  });
  $("btn-quiz").addEventListener("click", async () => {
    const r = await post("/quiz", { best_expert: Number($("quiz-expert").value), left_key: $("quiz-key").value });
    const j = await r.json();
    if (j.status === "in_task") showTrial();
    else if (j.status === "failed_quiz") { show("end"); $("end-msg").textContent = "Thank you. The session has ended."; }
    else $("quiz-msg").textContent = "Not quite — please read the instructions and try once more.";
  });
  start();
})();
