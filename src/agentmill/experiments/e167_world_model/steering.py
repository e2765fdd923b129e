"""E167 D-3: the world model obeys steering instructions on unseen worlds (FactSearch, tiny model).

One tiny world model is trained by SFT on FactSearch tool transitions of ``wm-train`` worlds, 30 % of its search
examples carrying a control whose target is the env's programmatic transform (``methods/world_model/search_wm.py``).
On worlds it never saw (``test`` seeds, test question phrasings), one search per question — a uniform draw from the
searches the env offers at the start — is predicted greedily four times: without instruction, with
``Stingy(withhold_answer=True, page_size=3)``, with ``Paginate(k)`` (k uniform in {2, 3}), and with
``InjectError(kind=service)``. Measured (all fixed before any run):

- answer leak = the share of predictions with a snippet containing the gold answer (whole words, normalised), with
  Stingy and without instruction;
- page-size compliance = the share of Paginate(k) predictions with exactly k result blocks and the "more results"
  line, over searches whose real result list is longer than k;
- error form = the share of InjectError predictions whose strictly extracted observation is the env's service-error
  line exactly.

Intervals: Wilson (one search per question; searches of one world share its pages, which the interval ignores).
Reported beside: the real env's leak on the same searches, the uninstructed field-F1 against the real observation,
the parse rate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, mean_estimate, proportion_estimate
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

WM_SPEC = "tiny:2x64-bpe1024 FactSearch WM (SFT, trained here, cached)"


@dataclass(frozen=True)
class Setup:
    wm: str = WM_SPEC
    """The world model under test (a tiny transformer trained here from random init)."""
    n_train_worlds: int = 24
    """``wm-train`` worlds of its SFT data."""
    sft_steps: int = 400
    """Its SFT steps (batch 8)."""
    batch: int = 8
    """SFT examples per step."""
    layers: int = 2
    """Tiny transformer blocks."""
    d: int = 64
    """Residual width."""
    max_new: int = 200
    """New-token cap of the greedy predictions."""
    n_test_worlds: int = 5
    """``test`` worlds (never seen by the world model)."""
    n_searches: int = 300
    """Held-out searches (one per question, questions drawn without replacement)."""


SETUPS = {"smoke": Setup(n_train_worlds=1, sft_steps=2, batch=2, layers=1, d=32, max_new=24, n_test_worlds=1,
                         n_searches=4),
          "quick": Setup(n_train_worlds=2, sft_steps=4, batch=4, max_new=48, n_test_worlds=1, n_searches=8),
          "full": Setup()}

CLAIMS = (
    Claim("E167-D3-leak-instructed", "Told to be stingy, the world model keeps the answer out of its snippets: "
          "answer-leak rate ≤ 0.05 on unseen worlds.", "[C] control instructions inject targeted perturbations "
          "(README)", "controlled simulation: Tool Decathlon 31.5 → 36.1, MCPMark 24.6 → 33.8 [C README]",
          "d3_leak_instructed", "<=", 0.05),
    Claim("E167-D3-leak-uninstructed", "Without the instruction it leaks as a real engine does: answer-leak "
          "rate ≥ 0.30 on the same searches.", "[C] control instructions (README) [R] contrast", "—",
          "d3_leak_uninstructed", ">=", 0.30),
    Claim("E167-D3-page-size", "Told Paginate(k), it shows exactly k results and the more-results line in ≥ 0.95 of "
          "searches.", "[C] control instructions (README) [R] form", "—", "d3_page_size", ">=", 0.95),
    Claim("E167-D3-error", "Told to inject a service error, it renders the env's error line exactly in ≥ 0.95 of "
          "searches.", "[C] control instructions (README) [R] form", "—", "d3_error_form", ">=", 0.95),
)


def held_out_searches(s: Setup, cfg: Any) -> list[tuple[Any, Any, str]]:
    """(world, question, search command) on test worlds: one uniformly drawn start search per question."""
    from agentmill.core.seeding import derive_seed
    from agentmill.envs.factsearch import FactSearchConfig, FactSearchEnv
    from agentmill.methods.world_model.search_wm import world, world_seeds

    pool = []
    for ws in world_seeds("test", s.n_test_worlds, cfg.seed):
        w = world(ws, cfg.n_entities, cfg.n_news)
        pool += [(w, q) for q in w.questions("test")]
    rng = np.random.default_rng(derive_seed(cfg.seed, "d3-searches"))
    out = []
    for i in rng.permutation(len(pool))[:s.n_searches]:
        w, q = pool[int(i)]
        _, info = FactSearchEnv(w, q, FactSearchConfig(n_entities=cfg.n_entities, n_news=cfg.n_news)).reset(seed=0)
        cmds = [c for c in info["admissible_commands"] if c.startswith("web_search:")]
        out.append((w, q, cmds[int(rng.integers(len(cmds)))]))
    return out


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.envs.factsearch import MORE_RESULTS, SERVICE_ERROR, FactSearchConfig, FactSearchEnv
    from agentmill.methods.world_model.domain_factsearch import FactSearchDomain, leaks, parse_factsearch
    from agentmill.methods.world_model.judges import field_f1
    from agentmill.methods.world_model.model import GREEDY, WorldModel
    from agentmill.methods.world_model.search_wm import (FMT, SearchTransition, SearchWMConfig, prompt,
                                                         train_search_wm)

    cfg = SearchWMConfig(n_train_worlds=s.n_train_worlds, sft_steps=s.sft_steps, batch=s.batch, layers=s.layers,
                         d=s.d, max_new=s.max_new)
    ctx.progress("training the search world model (cached)", 0, 1)
    lm, log = train_search_wm(cfg)
    dom = FactSearchDomain()
    items = held_out_searches(s, cfg)
    rng = np.random.default_rng(1)
    trs, ks = [], []
    for w, q, cmd in items:
        env = FactSearchEnv(w, q, FactSearchConfig(n_entities=cfg.n_entities, n_news=cfg.n_news))
        obs, _ = env.reset(seed=0)
        nobs, *_ = env.step(cmd)
        res = tuple(w.search(cmd.partition(":")[2].strip(), k=10))
        trs.append(SearchTransition(w.seed, q.qid, q.text, q.answer, obs, cmd, res, nobs, dom.card((w, q))))
        ks.append(int(rng.integers(2, 4)))
    wm = WorldModel(lm, dom, FMT, dataclasses.replace(GREEDY, max_new_tokens=cfg.max_new))
    conds = {"none": [None] * len(trs), "stingy": ["stingy"] * len(trs),
             "paginate": [f"paginate{k}" for k in ks], "error": ["error"] * len(trs)}
    preds: dict[str, list[Any]] = {}
    for i, (name, cs) in enumerate(conds.items()):
        preds[name] = wm.predict_batch([prompt(tr, c) for tr, c in zip(trs, cs)])
        ctx.progress("predicting", i + 1, len(conds))
    n = len(trs)
    leak_none = [leaks(p.observation, tr.answer) for p, tr in zip(preds["none"], trs)]
    leak_st = [leaks(p.observation, tr.answer) for p, tr in zip(preds["stingy"], trs)]
    leak_real = [leaks(tr.next_obs, tr.answer) for tr in trs]
    page_ok, page_n = [], 0
    for p, tr, k in zip(preds["paginate"], trs, ks):
        if len(tr.results) <= k:
            continue
        page_n += 1
        parsed = parse_factsearch(p.observation) if p.observation else None
        page_ok.append(parsed is not None and parsed.fields["kind"] == "results"
                       and len(parsed.fields["results"]) == k and parsed.fields["more"]
                       and p.observation.strip().endswith(MORE_RESULTS))
    err_ok = [p.observation is not None and p.observation.strip() == SERVICE_ERROR for p in preds["error"]]
    f1 = [field_f1(dom, p.observation, tr.next_obs) for p, tr in zip(preds["none"], trs)]
    ctx.data.update({"train_log": {k: v for k, v in log.items() if k != "losses"},
                     "train_losses": log["losses"][::max(1, len(log["losses"]) // 50)],
                     "searches": [tr.action for tr in trs], "questions": [tr.qid for tr in trs],
                     "leak": {"none": leak_none, "stingy": leak_st, "real": leak_real},
                     "page_ok": page_ok, "error_ok": err_ok, "f1_uninstructed": f1,
                     "examples": {c: [p.text for p in preds[c][:3]] for c in conds},
                     "parse_rate": {c: float(np.mean([p.observation is not None for p in preds[c]])) for c in conds}})
    out = {"d3_leak_instructed": proportion_estimate(int(sum(leak_st)), n),
           "d3_leak_uninstructed": proportion_estimate(int(sum(leak_none)), n),
           "d3_error_form": proportion_estimate(int(sum(err_ok)), n),
           "real_env_leak": proportion_estimate(int(sum(leak_real)), n),
           "f1_uninstructed": mean_estimate(f1)}
    if page_n:
        out["d3_page_size"] = proportion_estimate(int(sum(page_ok)), page_n)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    lk = data.get("leak")
    if not lk:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    bars = {"real env": np.mean(lk["real"]), "WM, no instruction": np.mean(lk["none"]),
            "WM, Stingy": np.mean(lk["stingy"]), "page size kept": np.mean(data["page_ok"] or [0.0]),
            "error form kept": np.mean(data["error_ok"])}
    ax.barh(list(bars), list(bars.values()), color=["gray", "tab:orange", "tab:green", "tab:blue", "tab:purple"])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of held-out searches")
    ax.invert_yaxis()
    ax.set_title("D-3: answer leak in snippets and control compliance")
    fig.tight_layout()
    p = out / "d3_steering.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e167.wm_steering",
    quick_budget_s=8,
    title="E167 D-3: the world model obeys steering instructions on unseen FactSearch worlds",
    paper=PAPER,
    requires=frozenset({"hf"}),
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_check="quick trains the search world model for 4 steps on 2 worlds and predicts 8 searches; the verdict "
                "is the full profile's",
    scale_note="tiny transformer (2 layers, d = 64, 1,024-token BPE) trained from scratch on CPU by SFT on ≈ 7.5k "
               "FactSearch tool transitions of 24 fictional worlds (24 entities each; 30 % of search examples "
               "carry a control), 400 steps × 8; evaluated on 300 searches of 5 unseen worlds. The paper steers "
               "35B/397B LWMs with control instructions in MCP and search simulation.",
)
