"""Prompt builders and output parsers for the LLM roles [R]. Own wording. Prompts never contain
the ground truth's name, prose or code [R]: they are built only from the slot theories and the pool."""

from __future__ import annotations

import json
import re

from agentmill.methods.autocog.metrics import METRIC_DATA_DOC, TEMPLATE_NAMES

DESIGN_SCHEMA = ('{"design": {"validities": [4 to 8 numbers in [0.5, 1]], "rating_max": 1, '
                 '"pairs_a": [[ints in 0..rating_max] * n_features] * U, "pairs_b": same shape, "rationale": "..."}, '
                 '"metric": {"source": "import numpy as np\\ndef metric(data): ...", "name": optional fallback, one '
                 'of ' + ", ".join(TEMPLATE_NAMES) + '}}')
METRIC_RULES = ("The metric is Python source defining metric(data) -> float (one number, finite), computed on all "
                "subjects pooled and again on each subject's rows; " + METRIC_DATA_DOC + ". Only `import numpy as "
                "np` and `import math`; no randomness, no files. You may put it in the JSON field metric.source or "
                "in a fenced block labelled metric; or give only metric.name to use a template.")


def _theory(t) -> str:
    src = getattr(t, "source", None)
    body = f"code:\n{src}" if src else f"program: {t.prose}"
    return f"name: {t.name}\ndescription: {t.prose}\n{body}\nparameter ranges: {json.dumps(t.params.to_json())}"


def _pool(pool) -> str:
    lines = []
    for o in pool.observations:
        preds = {pool.theories[k].name: (None if v is None else round(v, 3)) for k, v in o["preds"].items()
                 if k in pool.slots}
        lines.append(f"- {o['obs_id']}: U={o['design'].n_unique}, metric={o['metric'].name}, "
                     f"observed={None if o['real'] is None else round(o['real'], 3)}, predicted={preds}")
    return "\n".join(lines) or "(no observations yet)"


def advocate_prompt(own, opponent, pool, failures: list[str]) -> str:
    return ("ROLE: advocate\nYou defend theory OWN against theory OPPONENT in a two-product choice task: each "
            "product is rated by experts whose accuracies (validities) are shown. Propose an experiment design on "
            "which OWN should win, i.e. OWN and OPPONENT predict clearly different behaviour, then a metric on "
            "which the difference shows.\n"
            f"OWN:\n{_theory(own)}\n\nOPPONENT:\n{_theory(opponent)}\n\nPast observations:\n{_pool(pool)}\n\n"
            f"Failed attempts this round: {failures or 'none'}\n{METRIC_RULES}\n"
            f"Answer with one JSON object: {DESIGN_SCHEMA}")


def arbiter_prompt(slot1, slot2, pool) -> str:
    return ("ROLE: arbiter\nTwo theories compete. Decide which slot to replace and whether to re-implement it "
            "(new_model) or replace the idea (new_theory); prefer theories that generalise across tasks.\n"
            f"SLOT 1:\n{_theory(slot1)}\n\nSLOT 2:\n{_theory(slot2)}\n\nObservations:\n{_pool(pool)}\n"
            'Answer with JSON: {"interpretation": "...", "verdict": "new_model" | "new_theory", '
            '"target_theory_idx": 1 | 2, "recommendation": "..."}')


def reviser_prompt(verdict, target, other, pool, feedback: str, *, iteration: int = 0, max_iters: int = 1) -> str:
    return ("ROLE: reviser\nWrite a replacement theory as Python. predict(params, stimulus, history) gets a dict of "
            "sampled parameters, stimulus = np.array of shape (2, F) (row 0 = option A, row 1 = option B) and the "
            "history dict (option_a_ratings, option_b_ratings, response lists); it returns np.array([P(A), P(B)]). "
            "Only `import numpy as np` and `import math`; no randomness. Parameters are sampled from ranges, "
            "never fitted: give ranges as strings like \"[0.1, 20]\" or \"{1, 2}\" or \"validities\".\n"
            f"Verdict: {json.dumps(verdict.to_json())}\nTARGET:\n{_theory(target)}\n\nOTHER:\n{_theory(other)}\n\n"
            f"Observations:\n{_pool(pool)}\n\nIteration {iteration + 1} of at most {max_iters}. "
            f"Feedback on earlier attempts: {feedback or 'none'}\n"
            'Answer with JSON: {"name": "...", "prose": "...", "predict_source": "...", "policy": "sample" | '
            '"argmax", "parameters": {"name": "range"}}')


def critic_prompt(verdict, target, candidate, pool, attempt: dict, history: list[dict]) -> str:
    """Reviser/critic content [R]: verdict, target theory, every observation; per candidate its aggregate
    loss and per-observation errors (earlier iterations summarised with their accept/reject mark)."""
    rows = []
    for o, p, e in zip(pool.observations, attempt.get("obs_preds", []), attempt.get("obs_errors", [])):
        rows.append(f"- {o['obs_id']}: metric={o['metric'].name}, "
                    f"observed={None if o['real'] is None else round(o['real'], 3)}, "
                    f"candidate={None if p is None else round(p, 3)}, |error|={None if e is None else round(e, 3)}")
    past = "\n".join(f"  iteration {h['iteration'] + 1}: {h.get('name', '(no compiling candidate)')} loss "
                     f"{h['loss']:.3f} {'ACCEPTED' if h.get('accepted') else 'REJECTED'}; "
                     f"critic said {h['critic']['verdict']}"
                     for h in history if "loss" in h) or "  none"
    mark = "ACCEPTED (best so far)" if attempt["accepted"] else "REJECTED (not below the best so far)"
    return ("ROLE: critic\nJudge a candidate replacement theory. Answer continue if it is good enough to stop "
            "revising, regenerate if the reviser should try again; say briefly what to change.\n"
            f"Verdict being carried out: {json.dumps(verdict.to_json())}\n"
            f"TARGET (being replaced):\n{_theory(target)}\n\n"
            f"CANDIDATE (iteration {attempt['iteration'] + 1}):\n{_theory(candidate)}\n\n"
            f"Per observation:\n{chr(10).join(rows) or '(no observations)'}\n"
            f"Candidate aggregate loss {attempt['loss']:.3f}: {mark}; best so far {attempt['best_loss']:.3f}; "
            f"replaced theory {attempt['target_loss']:.3f} (lower is better).\nEarlier iterations:\n{past}\n"
            'Answer with JSON: {"verdict": "continue" | "regenerate", "critique": "..."}')


def fenced_code(text: str, label: str) -> str | None:
    """The body of the first fenced block labelled ``label`` (```metric / ```predict), or None."""
    m = re.search(r"```" + re.escape(label) + r"[ \t]*\n(.*?)```", text, re.S)
    return m.group(1) if m else None


def first_json(text: str) -> dict:
    """The first JSON object in ``text`` (fenced or bare). Raises ValueError with a reason."""
    m = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    cand = m.group(1) if m else None
    if cand is None:
        start = text.find("{")
        if start < 0:
            raise ValueError("no JSON object in the reply")
        depth = 0
        for i, ch in enumerate(text[start:], start):
            depth += ch == "{"
            depth -= ch == "}"
            if depth == 0:
                cand = text[start:i + 1]
                break
    if cand is None:
        raise ValueError("unterminated JSON object")
    try:
        obj = json.loads(cand)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError("reply JSON is not an object")
    return obj
