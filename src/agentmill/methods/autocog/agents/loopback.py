"""The AC-12 loopback stub [R]: a scripted AutoCog "model" behind OpenAI-compatible HTTP on
127.0.0.1, so the LLM roles run end to end through ``agentmill.lm``'s ``openai:`` client — real sockets, real JSON,
the SDK's parsing — offline and in CI.

What it stands in for: a capable chat model at an OpenAI-compatible endpoint (vLLM, llama.cpp server, a hosted API).
It does not stand in for that model's judgement: its replies are fixed and exercise the plumbing, including the
two planned faults [R] — the first advocate reply of a run is malformed JSON, and the reviser's first round-1 theory
does not compile. The replies are a pure function of the prompt (no counters), so a run killed between a request
and its recording gets the same reply when it asks again: resume stays byte-identical (AC-8's Scripted-LM arm).

The server is :class:`agentmill.lm.loopback.LoopbackServer` (stdlib ``http.server`` in a daemon thread); it counts
requests and keeps every prompt it was sent, so a test can check both "no call repeated" and "no prompt leaks the
ground truth" from the server side. This module holds only what is AutoCog's: the scripted replies.
"""

from __future__ import annotations

import json
import re

from agentmill.lm.loopback import LoopbackServer

MODEL_NAME = "autocog-scripted"

DESIGN = {"validities": [0.9, 0.8, 0.7, 0.6], "rating_max": 1,
          "pairs_a": [[1, 0, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1], [1, 0, 0, 1]],
          "pairs_b": [[0, 1, 1, 1], [0, 1, 0, 1], [1, 0, 0, 0], [0, 1, 1, 0]],
          "rationale": "the most valid cue against the majority of the others"}
"""Binary pairs where the top cue and the cue majority disagree; none is in the frozen held-out battery (tested)."""

GRADED_CODE = ("import numpy as np\nimport math\n"
               "def predict(params, stimulus, history):\n"
               "    v = np.array([0.9, 0.8, 0.7, 0.6])[: stimulus.shape[1]]\n"
               "    w = v ** params['gamma']\n"
               "    d = float(np.dot(w / w.max(), stimulus[0] - stimulus[1]))\n"
               "    pa = (1 - params['eps']) / (1 + math.exp(-params['beta'] * d)) + params['eps'] / 2\n"
               "    return np.array([pa, 1 - pa])\n")
"""The scripted reviser's theory: validity weights raised to a power (written here, not taken from the library)."""


TOP_CUE_METRIC = ("import numpy as np\n"
                  "def metric(data):\n"
                  "    top = int(np.argmax(data['validities']))\n"
                  "    diff = data['option_a_ratings'][:, top] - data['option_b_ratings'][:, top]\n"
                  "    picked_a = data['response'] == 0\n"
                  "    follows = np.where(diff > 0, picked_a, ~picked_a)[diff != 0]\n"
                  "    return float(follows.mean()) if follows.size else 0.5\n")
"""The scripted advocate's metric code: the share of choices that follow the most valid cue where it discriminates."""

BAD_METRIC = "import os\ndef metric(data):\n    return float(len(os.listdir('.')))\n"
"""Metric code the AST policy rejects (an ``os`` import): the advocate must fall back to its named template."""


def _role(prompt: str) -> str:
    m = re.search(r"ROLE: (\w+)", prompt)
    return m.group(1) if m else "?"


def _n_observations(prompt: str) -> int:
    return len(re.findall(r"^- o\d+:", prompt, re.M))


def scripted_reply(prompt: str) -> str:
    """The stub's reply to ``prompt`` (a pure function of it).

    * advocate: malformed JSON on a first attempt with no observations yet (round 1, slot 1); with exactly 2 past
      observations (round 2, slot 1) a fenced JSON proposal of :data:`DESIGN` plus a fenced ``metric`` block
      (:data:`TOP_CUE_METRIC`); with exactly 3 (round 2, slot 2) :data:`BAD_METRIC` in ``metric.source`` with the
      ``top_cue_vs_majority`` template named as its fallback; else a fenced JSON proposal of :data:`DESIGN` with
      the ``top_cue_vs_majority`` template;
    * arbiter: replace slot 2 with a new theory;
    * reviser: in round 1 (2 observations), a first attempt whose code does not compile; otherwise
      :data:`GRADED_CODE`;
    * critic: ``continue`` when the prompt marks the candidate accepted, else ``regenerate``;
    * anything else: an apology with no JSON (the roles then fall back).
    """
    role, retry = _role(prompt), "previous reply was invalid" in prompt
    if role == "advocate":
        if "(no observations yet)" in prompt and not retry:
            return '{"design": {"validities": [0.9, 0.8'
        n_obs = _n_observations(prompt)
        if n_obs == 2:
            return ("Here is my proposal:\n```json\n" + json.dumps({"design": DESIGN}) + "\n```\n```metric\n"
                    + TOP_CUE_METRIC + "```")
        if n_obs == 3:
            return json.dumps({"design": DESIGN, "metric": {"source": BAD_METRIC, "name": "top_cue_vs_majority"}})
        return ("Here is my proposal:\n```json\n"
                + json.dumps({"design": DESIGN, "metric": {"name": "top_cue_vs_majority"}}) + "\n```")
    if role == "arbiter":
        return json.dumps({"interpretation": "slot 2 misses the observed top-cue choices", "verdict": "new_theory",
                           "target_theory_idx": 2, "recommendation": "graded validity weights"})
    if role == "reviser":
        if _n_observations(prompt) == 2 and "Feedback on earlier attempts: none" in prompt and not retry:
            return json.dumps({"name": "broken", "prose": "unfinished", "predict_source": "def predict(:",
                               "policy": "sample", "parameters": {}})
        return json.dumps({"name": "graded weights", "prose": "Validity weights raised to a power, additive.",
                           "predict_source": GRADED_CODE, "policy": "sample",
                           "parameters": {"gamma": "[0, 10]", "beta": "[0.1, 20]", "eps": "[0, 0.5]"}})
    if role == "critic":
        verdict = "continue" if "ACCEPTED (best so far)" in prompt else "regenerate"
        return json.dumps({"verdict": verdict, "critique": "fits the observed top-cue choices" if verdict == "continue"
                           else "try steeper validity weights"})
    return "Sorry, I cannot help with that."


def scripted_server(**kw) -> LoopbackServer:
    """``with scripted_server() as srv:`` serves :func:`scripted_reply` as model :data:`MODEL_NAME` on 127.0.0.1
    (``srv.lm_spec`` is its ``openai:`` spec; ``srv.requests``/``srv.prompts`` are the server-side request log).
    Keyword arguments go to :class:`~agentmill.lm.loopback.LoopbackServer` (``model``, ``port``)."""
    kw.setdefault("model", MODEL_NAME)
    return LoopbackServer(lambda request: scripted_reply(request.prompt), **kw)
