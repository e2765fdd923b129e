"""A steerable FactSearch world model: transitions, control-carrying SFT examples, a cached tiny model, and a
simulated search env (docs/methods/world_model.md, "FactSearch").

Data. FactSearch worlds are split by world seed (``wm-train`` worlds feed the world model only). On every question a
behaviour policy (the oracle plan with probability 0.5 per step, else a uniform admissible command) plays one
episode; every ``web_search`` and ``web_extractor`` step is a transition. The world model's current state is the
question line, not the previous tool output: the tool is stateless, its output depends on the action and the world
only [R]. A share of search examples (``control_share``, 0.3 [R]) carries a steering control in the
``**Simulation Instruction:**`` block, and its target is the env's *programmatic* transform of the real results
(``envs.factsearch.apply_control``): ``Stingy`` (answer-free snippets, three results), ``Paginate(k)``,
``InjectError`` (the generic service error).

Model. A ``tiny:`` transformer with its own byte-level BPE, trained from random init by masked-loss SFT
(``train.train_sft``); cached under ``core.paths.cache_root()/world_model/search-v<version>/<config hash>/``.
"""

from __future__ import annotations

import hashlib
import re
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.paths import cache_root
from agentmill.core.seeding import derive_seed
from agentmill.envs.factsearch import (SERVICE_ERROR, FactSearchConfig, FactSearchEnv, FactWorld, Question,
                                       apply_control)
from agentmill.methods.world_model.data import WMExample
from agentmill.methods.world_model.domain_factsearch import FactSearchDomain, action_json, parse_factsearch
from agentmill.methods.world_model.format import QwenFormat, Turn, render_chatml

SEARCH_VERSION = "1"
"""Bumped whenever data or training code here changes, so a cached model is never served to newer code."""
FMT = QwenFormat(history_k=0, system_prompt="short", card=True)
CONTROLS = ("stingy", "paginate2", "paginate3", "error")


def control_text(control: str | None) -> str | None:
    """The Simulation Instruction of a control (names after the project's steering controls [R])."""
    if control is None:
        return None
    if control == "stingy":
        return "Stingy(withhold_answer=True, page_size=3)"
    if control.startswith("paginate"):
        return f"Paginate(k={int(control[len('paginate'):])})"
    if control == "error":
        return "InjectError(kind=service)"
    raise ValueError(f"unknown control {control!r}; controls: {CONTROLS}")


@dataclass(frozen=True)
class SearchWMConfig:
    """The FactSearch world model and its data."""

    n_train_worlds: int = 24
    """``wm-train`` worlds (world seeds from a base no other split uses)."""
    n_entities: int = 24
    """Entities per world [R: the env default is 60; 24 keeps the card and the index small for a tiny model]."""
    n_news: int = 4
    """News pages per world."""
    control_share: float = 0.3
    """Share of search examples carrying a control [R]."""
    bpe_vocab: int = 1024
    """BPE vocabulary size."""
    layers: int = 2
    """Tiny transformer blocks."""
    d: int = 64
    """Residual width."""
    heads: int = 4
    """Attention heads."""
    max_len: int = 640
    """Context in tokens (card + question + action + reasoning + five results ≈ 450 BPE tokens)."""
    sft_steps: int = 400
    """SFT steps [R: budget — 0.66 s per step of 8 × ≈ 470 tokens on one thread; 400 steps ≈ 4.5 minutes]."""
    batch: int = 8
    """Examples per step."""
    sft_lr: float = 3e-3
    """SFT peak learning rate (the KeyDoor pipeline's, fixed before any FactSearch run)."""
    max_new: int = 200
    """New-token cap of greedy predictions."""
    seed: int = 0
    """Data, initialisation and batch-order seed."""

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def world_seeds(split: str, n: int, seed: int = 0) -> list[int]:
    """World seeds of a split (``wm-train``, ``policy-train``, ``test``): disjoint consecutive ranges."""
    base = {"wm-train": 0, "policy-train": 100_000, "test": 200_000}[split]
    start = base + derive_seed(seed, "factsearch-worlds", split) % 50_000
    return list(range(start, start + n))


@lru_cache(maxsize=256)
def world(seed: int, n_entities: int, n_news: int) -> FactWorld:
    return FactWorld.generate(seed, n_entities, n_news)


@dataclass(frozen=True)
class SearchTransition:
    """One tool step: the question, the action, the raw search results (or the page) and the real observation."""

    world_seed: int
    qid: str
    question: str
    answer: str
    state: str
    action: str
    results: tuple[tuple[str, str, str], ...]
    next_obs: str
    card: str


def _q(w: FactWorld, qid: str, phrasing: str = "train") -> Question:
    return next(q for q in w.questions(phrasing) if q.qid == qid)


def collect(seeds: Sequence[int], cfg: SearchWMConfig, *, phrasing: str = "train") -> list[SearchTransition]:
    """One behaviour episode per question of every world; the tool steps as transitions."""
    dom = FactSearchDomain()
    out = []
    for ws in seeds:
        w = world(ws, cfg.n_entities, cfg.n_news)
        for q in w.questions(phrasing):
            env = FactSearchEnv(w, q, FactSearchConfig(n_entities=cfg.n_entities, n_news=cfg.n_news))
            rng = np.random.default_rng(derive_seed(cfg.seed, "factsearch-behaviour", q.qid))
            obs, info = env.reset(seed=0)
            state, card, done = obs, dom.card((w, q)), False
            while not done:
                plan = info["oracle"]["plan_commands"]
                cmds = [c for c in info["admissible_commands"] if not c.startswith("answer:")] or \
                    info["admissible_commands"]
                a = plan[0] if plan and rng.random() < 0.5 else cmds[int(rng.integers(len(cmds)))]
                if a.startswith("answer:"):
                    break
                nobs, _r, term, trunc, info = env.step(a)
                res = tuple(w.search(a.partition(":")[2].strip(), k=10)) if a.startswith("web_search:") else ()
                out.append(SearchTransition(ws, q.qid, q.text, q.answer, state, a, res, nobs, card))
                done = term or trunc
    return out


def target_observation(tr: SearchTransition, control: str | None, cfg: SearchWMConfig) -> str:
    """The real observation under ``control`` (the env's programmatic transform of the raw results)."""
    if control is None:
        return tr.next_obs
    if control == "error":
        return SERVICE_ERROR
    if not tr.action.startswith("web_search:") or tr.next_obs.startswith("Error"):
        return tr.next_obs
    w = world(tr.world_seed, cfg.n_entities, cfg.n_news)
    q = Question(tr.qid, tr.question, tr.answer, (), (), "")
    if control == "stingy":
        return apply_control(tr.results, w, q, stingy=True, page_size=3)
    return apply_control(tr.results, w, q, page_size=int(control[len("paginate"):]))


def trace(tr: SearchTransition, control: str | None) -> list[str]:
    """Reasoning lines from the retrieval trace [R]."""
    if control == "error":
        return ["the simulation instruction injects a service error"]
    if tr.action.startswith("web_extractor:"):
        return ["the page of that URL" if not tr.next_obs.startswith("Error") else "no page has that URL"]
    if not tr.results:
        return ["no page matches the query"]
    lines = ["matching pages " + ", ".join(t for _, t, _ in tr.results[:5])]
    if control == "stingy":
        lines.append("snippets that state the reference answer show the lead sentence instead")
    return lines


def render_prompt(state: str, action: str, card: str, control: str | None, fmt: QwenFormat = FMT) -> str:
    """The world model's prompt (ChatML text): card in the system message, the question as the current state, the
    action as Qwen tool JSON, the control as the Simulation Instruction."""
    msgs = fmt.messages([], Turn(state, action_json(action), "", 0), goal=None, card=card,
                        control=control_text(control))
    return render_chatml(msgs)


def prompt(tr: SearchTransition, control: str | None, fmt: QwenFormat = FMT) -> str:
    return render_prompt(tr.state, tr.action, tr.card, control, fmt)


def examples(transitions: Sequence[SearchTransition], cfg: SearchWMConfig, *,
             controls: bool = True) -> list[WMExample]:
    """SFT examples; a seeded ``control_share`` of search transitions carries a uniformly drawn control."""
    dom = FactSearchDomain()
    out = []
    for i, tr in enumerate(transitions):
        rng = np.random.default_rng(derive_seed(cfg.seed, "factsearch-control", tr.qid, i))
        c = None
        if controls and tr.action.startswith("web_search:") and rng.random() < cfg.control_share:
            c = CONTROLS[int(rng.integers(len(CONTROLS)))]
        nxt = target_observation(tr, c, cfg)
        target = FMT.target(nxt, dom.reasoning(tr.action, tr.state, nxt, trace(tr, c), None))
        out.append(WMExample(prompt(tr, c), target, tr.qid, i, True, nxt.startswith("Error"), tr.state, nxt,
                             tr.card, tr.action))
    return out


# ---------------------------------------------------------------------------------------------------------------
# the cached model

def model_path(cfg: SearchWMConfig, *, controls: bool = True) -> Path:
    return cache_root() / "world_model" / f"search-v{SEARCH_VERSION}" / f"{'ctl' if controls else 'plain'}-" \
        f"{cfg.digest()}"


def train_search_wm(cfg: SearchWMConfig, *, controls: bool = True) -> tuple[Any, dict[str, Any]]:
    """The search world model (trained with or without control-carrying examples), cached; and its log."""
    from agentmill.lm.tiny import TinyLM, train_bpe
    from agentmill.methods.world_model.train import StageConfig, new_model, train_sft

    path = model_path(cfg, controls=controls)
    if (path / "log.json").exists():
        return TinyLM.load(path / "model"), json.loads((path / "log.json").read_text())
    t0 = time.perf_counter()
    trs = collect(world_seeds("wm-train", cfg.n_train_worlds, cfg.seed), cfg)
    exs = examples(trs, cfg, controls=controls)
    tok = train_bpe([e.prompt + e.target for e in exs], vocab_size=cfg.bpe_vocab)
    lm = new_model(cfg.layers, cfg.d, cfg.heads, cfg.max_len, cfg.seed, tok)
    losses = train_sft(lm, exs, StageConfig(steps=cfg.sft_steps, batch=cfg.batch, seq_len=cfg.max_len,
                                            lr=cfg.sft_lr, seed=cfg.seed))
    log = {"losses": losses, "examples": len(exs), "transitions": len(trs), "seconds": time.perf_counter() - t0,
           "controlled_examples": sum(e.prompt.count("**Simulation Instruction:**") for e in exs)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    lm.save(tmp / "model")
    (tmp / "log.json").write_text(json.dumps(log))
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    return lm, log


# ---------------------------------------------------------------------------------------------------------------
# the simulated search env

class SearchSimEnv:
    """One FactSearch question simulated by a world model, behind the ``TextEnv`` interface.

    ``reset`` gives the real initial observation (the question). ``step(a)``: an ``answer`` is judged by the task
    verifier against the gold answer (no world-model call); any other action is predicted greedily (cached) from the
    card, the question and the action, under ``control`` — or under ``InjectError`` when the schedule's own rng
    draws it (``error_rate``); a prediction that does not parse becomes the service-error line
    (``info["sim_parse_failure"]``). The admissible commands are computed from the *simulated* text
    (``envs.factsearch.candidate_actions``), so an invented entity or URL becomes something the policy can try.
    The card (which holds the gold answer) reaches only the world model, never the policy."""

    def __init__(self, wm: Any, world_: FactWorld, question: Question, *, control: str | None = None,
                 error_rate: float = 0.0, max_steps: int = 6) -> None:
        self.wm, self.world, self.question = wm, world_, question
        self.control, self.error_rate, self.max_steps = control, error_rate, max_steps
        self.card = FactSearchDomain().card((world_, question))
        self._seen: list[str] = []
        self._t = 0
        self._done = True
        self._rng = np.random.default_rng(0)
        self.parse_failures = 0

    def _info(self, *, won: bool, invalid: bool, feedback: str, done: bool, failure: bool) -> dict[str, Any]:
        from agentmill.envs.factsearch import candidate_actions

        return {"admissible_commands": [] if done else candidate_actions(self.world, self.question, self._seen),
                "won": won, "lost": False, "task_id": self.question.qid, "step": self._t, "invalid_action": invalid,
                "feedback": feedback, "question": self.question.text, "sim_parse_failure": failure,
                "oracle": {"distance_to_goal": None, "state_id": None, "dead_end": False, "plan_commands": []}}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        env = FactSearchEnv(self.world, self.question)
        obs, _ = env.reset(seed=seed)
        self._rng = np.random.default_rng(derive_seed("search-sim", self.question.qid, seed))
        self._seen, self._t, self._done = [obs], 0, False
        return obs, self._info(won=False, invalid=False, feedback="", done=False, failure=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        from agentmill.envs.factsearch import normalise

        if self._done:
            raise RuntimeError("SearchSimEnv.step called before reset() or after the episode ended")
        self._t += 1
        name, _, arg = action.partition(":")
        if name.strip() == "answer":
            won = bool(normalise(arg)) and normalise(arg) == normalise(self.question.answer)
            obs = "Your answer is correct." if won else "Your answer is wrong."
            self._done = True
            return obs, float(won), True, False, self._info(won=won, invalid=False, feedback=obs, done=True,
                                                            failure=False)
        c = "error" if self.error_rate > 0 and self._rng.random() < self.error_rate else self.control
        pred = self.wm.predict_batch([render_prompt(self._seen[0], action, self.card, c)])[0].observation
        failure = pred is None or parse_factsearch(pred) is None
        if failure:
            self.parse_failures += 1
            pred = SERVICE_ERROR
        self._seen.append(pred)
        trunc = self._t >= self.max_steps
        self._done = trunc
        fb = pred if pred.startswith("Error") else ""
        return pred, 0.0, False, trunc, self._info(won=False, invalid=pred.startswith("Error") and not failure,
                                                   feedback=fb, done=trunc, failure=failure)

    def close(self) -> None:
        self._done = True


def prewarm_search(wm: Any, tasks: Sequence[tuple[FactWorld, Question]], controls: Sequence[str | None], *,
                   depth: int = 2, max_pairs: int = 2000) -> int:
    """Breadth-first expansion of the simulated episodes from each question's start (non-answer commands only),
    predicted in batches under each control, so the greedy cache holds what a policy will ask first. Under greedy
    decoding this changes no result, only the wall time. Returns the prompts predicted."""
    from agentmill.envs.factsearch import candidate_actions

    dom = FactSearchDomain()
    frontier = []
    for w, q in tasks:
        obs = FactSearchEnv(w, q).initial_observation()
        frontier.append((w, q, dom.card((w, q)), [obs]))
    done = 0
    for _ in range(depth):
        jobs = []
        for w, q, card, seen in frontier:
            for a in candidate_actions(w, q, seen):
                if not a.startswith("answer:"):
                    jobs += [(w, q, card, seen, a, c) for c in controls]
        jobs = jobs[:max(0, max_pairs - done)]
        if not jobs:
            break
        preds = wm.predict_batch([render_prompt(seen[0], a, card, c) for _w, _q, card, seen, a, c in jobs])
        done += len(jobs)
        frontier = [(w, q, card, seen + [p.observation]) for (w, q, card, seen, _a, c), p in zip(jobs, preds)
                    if p.observation is not None and c == controls[0] and parse_factsearch(p.observation)]
    return done


# ---------------------------------------------------------------------------------------------------------------
# transfer to an unseen tool domain (U-3)

_CALL = re.compile(r"^(web_search: .*[A-Za-z0-9].*|web_extractor: https://wiki\.example/\S+|answer: .*\S.*)$")


def question_mix(split: str, n_worlds: int, n: int, cfg: SearchWMConfig, phrasing: str,
                 key: str) -> list[tuple[FactWorld, Question]]:
    """(world, question) pairs of a split, half one-hop and half two-hop, drawn without replacement by ``key``."""
    one, two = [], []
    for ws in world_seeds(split, n_worlds, cfg.seed):
        w = world(ws, cfg.n_entities, cfg.n_news)
        for q in w.questions(phrasing):
            (one if q.hops == 1 else two).append((w, q))
    rng = np.random.default_rng(derive_seed(cfg.seed, key))
    return ([one[int(i)] for i in rng.permutation(len(one))[:n - n // 2]]
            + [two[int(i)] for i in rng.permutation(len(two))[:n // 2]])


def first_call_prompts(tasks: Sequence[tuple[FactWorld, Question]],
                       demo: tuple[FactWorld, Question] | None) -> tuple[list[str], list[list[str]]]:
    """One-shot agent prompts for the first FactSearch tool call (the layout of ``warmup.agent_prompt``): a
    demonstration question from another world with its oracle first call (none when ``demo`` is None), then the
    question; and, per task, the admissible first calls (the accurate ones)."""
    from agentmill.methods.world_model.warmup import agent_prompt

    shot = ""
    if demo is not None:
        dw, dq = demo
        dobs, dinfo = FactSearchEnv(dw, dq).reset(seed=0)
        shot = agent_prompt(dq.text, [], dobs, dinfo["admissible_commands"]) + dw.oracle_plan(dq)[0] + "<|im_end|>\n"
    prompts, good = [], []
    for w, q in tasks:
        obs, info = FactSearchEnv(w, q).reset(seed=0)
        p = agent_prompt(q.text, [], obs, info["admissible_commands"])
        prompts.append(shot + p[p.index("<|im_start|>user"):] if shot else p)
        good.append([c for c in info["admissible_commands"] if c.startswith("web_search:")])
    return prompts, good


def is_valid_call(text: str) -> bool:
    """The first line parses as one of FactSearch's three tool forms with a non-empty argument."""
    line = text.strip().split("\n", 1)[0].strip()
    return bool(_CALL.match(line))


def first_calls(lm: Any, prompts: Sequence[str], *, max_new: int = 48, batch: int = 32) -> list[str]:
    """Greedy first lines generated after each prompt."""
    from agentmill.lm.base import GenerateConfig

    gen = GenerateConfig(temperature=0.0, max_new_tokens=max_new)
    out = []
    for s in range(0, len(prompts), batch):
        out += [c.text.strip().split("\n", 1)[0].strip() for c in lm.generate(list(prompts[s:s + batch]), gen)]
    return out
