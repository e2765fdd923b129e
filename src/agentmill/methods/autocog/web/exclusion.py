"""Participant exclusion ([C] ``filter_participants.py``; [R]). Single-side and alternation rates are computed on the
*screen side* pressed, not on the option [R]: rates on options would exclude
consistent rule-followers where one option usually wins. Exclusion never deletes data. The thresholds are the study
config's pre-registered ``exclusion`` block (``Store.study()``); the constants below are its defaults."""

from __future__ import annotations

import json

# [C `src/heuristic_decision_making/filter_participants.py`]; >= vs > are the project's choice [R]
SINGLE_SIDE = 0.95
MIN_MEAN_RT_MS = 1200
ALTERNATION = 0.95
MAX_BLUR_MS = 60_000
CATCH_MIN_CORRECT = 3  # of 4 [R]


def drop_reasons(sess: dict, trials: list[dict], rules: dict | None = None) -> list[str]:
    """Reasons to exclude one participant; ``rules`` holds the study config's ``exclusion`` thresholds."""
    r = rules or {}
    single_side, alternation = r.get("single_side", SINGLE_SIDE), r.get("alternation", ALTERNATION)
    min_rt, max_blur = r.get("min_mean_rt_ms", MIN_MEAN_RT_MS), r.get("max_blur_ms", MAX_BLUR_MS)
    catch_min = r.get("catch_min_correct", CATCH_MIN_CORRECT)
    reasons = []
    if sess.get("honeypot"):
        reasons.append("honeypot")
    main = [t for t in trials if not t["is_catch"]]
    if main:
        sides = [t["side_pressed"] for t in main]
        if max(sides.count("L"), sides.count("R")) / len(sides) >= single_side:
            reasons.append("single_side")
        if len(sides) > 1 and sum(a != b for a, b in zip(sides, sides[1:])) / (len(sides) - 1) >= alternation:
            reasons.append("alternation")
    if trials and sum(t["rt_ms"] for t in trials) / len(trials) < min_rt:
        reasons.append("fast_rt")
    if (sess.get("blur_ms") or 0) > max_blur:
        reasons.append("high_blur")
    catch = [t for t in trials if t["is_catch"]]
    if catch:
        correct = 0
        for t in catch:
            a, b = json.loads(t["a_json"]), json.loads(t["b_json"])
            better = 0 if sum(a) > sum(b) else 1  # dominance pair: every rule picks the dominant option
            correct += t["response_option"] == better
        if correct < catch_min * len(catch) / r.get("n_catch", 4):  # "catch_min of n_catch", scaled to the session
            reasons.append("catch_failed")
    return reasons


def exclusion_rules(store) -> dict:
    """The pinned study's exclusion thresholds plus its catch-trial count."""
    st = store.study()
    return {**st["exclusion"], "n_catch": st["n_catch"]}


def valid_data(store, obs_id: str) -> list[dict]:
    """Completed, non-excluded participants of an observation, as pair_idx/resp lists (catch trials removed)."""
    out, rules = [], exclusion_rules(store)
    for s in store.sessions(obs_id):
        if s["status"] != "completed":
            continue
        tr = store.trials(s["session_id"])
        if drop_reasons(s, tr, rules):
            continue
        main = [t for t in tr if not t["is_catch"]]
        out.append({"session_id": s["session_id"], "pair_idx": [t["pair_idx"] for t in main],
                    "resp": [t["response_option"] for t in main]})
    return out
